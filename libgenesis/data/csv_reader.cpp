#include "libgenesis/data/csv_reader.h"

#include <algorithm>

#include "libgenesis/core/error.h"

namespace genesis::data {

CsvReader::CsvReader(const std::filesystem::path& path, size_t block_bytes)
    : path_(path), in_(path, std::ios::binary), block_bytes_(std::max<size_t>(block_bytes, 4)) {
  GENESIS_CHECK(in_.is_open() && !std::filesystem::is_directory(path), UsageError, "cannot read ", path.string(),
                ": no such file (check data.path, data.val_path and data.test_path)");
  // A small file takes a buffer of its size, not a whole block.
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size < block_bytes_) block_bytes_ = std::max<size_t>(static_cast<size_t>(size), 4);
  fill();
  if (block_.compare(0, 3, "\xEF\xBB\xBF") == 0) pos_ = 3;
}

bool CsvReader::fill() {
  if (at_end_) return false;
  block_.resize(block_bytes_);
  in_.read(block_.data(), static_cast<std::streamsize>(block_.size()));
  const auto got = static_cast<size_t>(in_.gcount());
  GENESIS_CHECK(!in_.bad(), UsageError, "cannot read ", path_.string(), " near line ", line_);
  block_.resize(got);
  pos_ = 0;
  if (got == 0) at_end_ = true;
  return got > 0;
}

int CsvReader::get() {
  if (pos_ == block_.size() && !fill()) return -1;
  return static_cast<unsigned char>(block_[pos_++]);
}

int CsvReader::peek() {
  if (pos_ == block_.size() && !fill()) return -1;
  return static_cast<unsigned char>(block_[pos_]);
}

void CsvReader::append(std::string& field, int c) const {
  GENESIS_CHECK(field.size() < kMaxCsvFieldBytes, UsageError, where(), ": a field longer than ",
                kMaxCsvFieldBytes >> 20, " MiB (is a quote left open?)");
  field.push_back(static_cast<char>(c));
}

std::string CsvReader::where() const {
  return path_.string() + ":" + std::to_string(record_line_);
}

bool CsvReader::next(std::vector<std::string>& fields) {
  fields.clear();
  int c = get();
  // Empty lines between records are skipped.
  while (c == '\n' || c == '\r') {
    if (c == '\r' && peek() == '\n') get();
    ++line_;
    c = get();
  }
  if (c == -1) return false;
  record_line_ = line_;
  for (;;) {
    std::string& field = fields.emplace_back();
    if (c == '"') {
      for (;;) {
        c = get();
        GENESIS_CHECK(c != -1, UsageError, where(), ": a quoted field of column ", fields.size(),
                      " is not closed before the end of the file; close it with \"");
        if (c == '"') {
          if (peek() != '"') break;
          get();
        } else if (c == '\n') {
          ++line_;
        }
        append(field, c);
      }
      c = get();
      GENESIS_CHECK(c == ',' || c == '\n' || c == '\r' || c == -1, UsageError, where(),
                    ": text after the closing quote of column ", fields.size(),
                    "; a field that holds quotes is quoted whole, its quotes doubled (\"a \"\"b\"\"\")");
    } else {
      while (c != ',' && c != '\n' && c != '\r' && c != -1) {
        append(field, c);
        c = get();
      }
    }
    if (c == ',') {
      c = get();
      continue;
    }
    if (c == '\r' && peek() == '\n') get();
    if (c != -1) ++line_;
    return true;
  }
}

}  // namespace genesis::data
