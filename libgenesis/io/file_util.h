#pragma once
// Durable file-system helpers: writes that survive a crash either completely or not at all
// (temp file + fsync + rename + fsync of the directory), and errors that name the path.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "libgenesis/core/error.h"

namespace genesis {

// A file-system operation failed, or a path is not what the caller expected.
class IoError : public Error {
 public:
  using Error::Error;
};

}  // namespace genesis

namespace genesis::io {

// Throws IoError "<what> '<path>': <system message for err>".
[[noreturn]] void throw_io_error(std::string_view what, const std::filesystem::path& path, int err);

// Flushes a file or directory to stable storage.
void fsync_path(const std::filesystem::path& path);
// Flushes the directory holding `path`, which makes a rename or creation inside it durable.
void fsync_parent(const std::filesystem::path& path);
// Flushes every file and directory under `root` (and root itself).
void fsync_tree(const std::filesystem::path& root);

// Writes a file atomically: the bytes go to `<path>.tmp`, which commit() flushes and renames
// over `path`. Destroyed without commit(), the temp file is removed and `path` is untouched.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t nbytes);
  // Overwrites nbytes at `offset` of what was written (a header completed at the end).
  void write_at(uint64_t offset, const void* data, size_t nbytes);
  void commit();
  const std::filesystem::path& temp_path() const { return temp_path_; }

 private:
  std::filesystem::path path_;
  std::filesystem::path temp_path_;
  int fd_ = -1;
};

// write + commit of a whole small file through AtomicFile.
void write_file_atomic(const std::filesystem::path& path, std::string_view content);
// The whole content of a regular file. A directory, FIFO or device is refused (IoError) without
// blocking on it, and so is a file larger than max_bytes (a recipe or tokenizer file that size
// is a wrong path, not data).
std::string read_file(const std::filesystem::path& path, size_t max_bytes = SIZE_MAX);

// The most a metadata file read whole may hold: past it, the file is refused by name before any
// memory is spent on it (a 2 GB sparse tokenizer.json took 2.2 GB and 7 s to be called malformed).
// Tokenizers: the largest in use are tens of MiB (Gemma's tokenizer.json about 33 MiB; GPT-2's
// encoder.json 1 MiB). Configs (config.json, generation_config.json, a safetensors index,
// trainer.json, summary.json): kilobytes to a few MiB.
inline constexpr size_t kMaxTokenizerFileBytes = size_t{256} << 20;
inline constexpr size_t kMaxConfigFileBytes = size_t{64} << 20;
// IoError unless fd (open on path) is a regular file; returns its size.
size_t regular_file_size(int fd, const std::filesystem::path& path);

}  // namespace genesis::io
