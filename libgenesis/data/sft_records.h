#pragma once
// Supervised fine-tuning records from JSON Lines files (.jsonl, or gzip'd .jsonl.gz), read one
// line at a time: a file larger than memory streams through. Three record formats, the ones
// TRL's SFTTrainer takes:
//   messages           {"messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]}
//   prompt_completion  {"prompt": "...", "completion": "..."}
//   text               {"text": "..."}
// A file's format is its first record's (format = auto) or the one given; every record of the
// file must then have it. A malformed record (bad JSON, a missing or non-string field, an
// unknown role, an empty conversation or one without an assistant turn) is an error naming the
// file and line, or, with skip_bad, is skipped and counted: never trained as text.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libgenesis/data/chat.h"

namespace genesis::data {

enum class SftFormat { automatic, messages, prompt_completion, text };
// "auto", "messages", "prompt_completion", "text"; nullopt for another word.
std::optional<SftFormat> parse_sft_format(const std::string& name);
const char* sft_format_name(SftFormat format);

struct SftRecord {
  SftFormat format = SftFormat::messages;
  Conversation messages;           // messages
  std::string prompt, completion;  // prompt_completion
  std::string text;                // text
  std::string where;               // "file:line", for messages
};

// The longest line a record may take; past it the file is refused by name (a JSONL file whose
// lines are gigabytes is not a dataset of records, and one line is held in memory whole).
inline constexpr size_t kMaxSftRecordBytes = size_t{64} << 20;

// The files of data.path entries: a .jsonl / .jsonl.gz file as it is, a directory's such files
// (sorted, not recursive). Throws UsageError naming an entry that does not exist, is not such a
// file, or is a directory without any.
std::vector<std::filesystem::path> sft_files(const std::vector<std::string>& entries);

class SftReader {
 public:
  SftReader(std::vector<std::filesystem::path> files, SftFormat format, bool skip_bad);
  ~SftReader();
  SftReader(const SftReader&) = delete;
  SftReader& operator=(const SftReader&) = delete;

  // The next record of the files in order; nullopt after the last one. Throws ValueError
  // "FILE:LINE: what is wrong" for a bad record (without skip_bad), IoError for a file that
  // cannot be read.
  std::optional<SftRecord> next();

  int64_t records() const { return records_; }  // returned so far
  int64_t skipped() const { return skipped_; }  // bad records passed over (skip_bad)
  // The first skipped record's "FILE:LINE: what", for the note that counts them.
  const std::string& first_skipped() const { return first_skipped_; }
  // Bytes read so far (compressed bytes for .gz), of all files' sizes: progress.
  uint64_t bytes_read() const;
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  struct File;
  bool open_next_file();
  std::optional<std::string> next_line();
  // The record of one line, or an error message (the line holds no record the file's format has).
  std::optional<SftRecord> parse(const std::string& line, std::string& error);

  std::vector<std::filesystem::path> files_;
  SftFormat format_;
  bool skip_bad_;
  size_t next_file_ = 0;
  std::unique_ptr<File> file_;
  SftFormat file_format_ = SftFormat::automatic;
  int64_t line_ = 0;
  int64_t records_ = 0, skipped_ = 0;
  std::string first_skipped_;
  uint64_t done_bytes_ = 0, total_bytes_ = 0;
};

}  // namespace genesis::data
