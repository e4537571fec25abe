#pragma once
// Scalar summaries in TensorBoard's event-file format, so `tensorboard --logdir runs/` shows a
// run's curves. A file `events.out.tfevents.<seconds>.<host>.<pid>.genesis` holds TFRecords
// (little-endian u64 length, its masked CRC-32C, the bytes, their masked CRC-32C), each an
// `Event` protocol buffer: the first says file_version "brain.Event:2", the others carry a
// `Summary` of one `simple_value` under a tag. The few protobuf fields are written by hand
// (docs/architecture.md names them); scripts/reference/check_tensorboard.py reads a run back
// with TensorBoard's own EventAccumulator where TensorBoard is installed.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace genesis::train {

class TensorBoardWriter {
 public:
  // Creates a new event file in `dir` (which must exist). Throws IoError naming it on failure.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One scalar point of the curve `tag` ("train/loss", "eval/accuracy") at `step`.
  void scalar(std::string_view tag, double value, int64_t step);
  void flush();
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& event);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// CRC-32C (Castagnoli) of `data`, and TFRecord's masking of it; exposed for the tests' reader.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

}  // namespace genesis::train
