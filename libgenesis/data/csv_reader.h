#pragma once
// A streaming reader of comma-separated values as RFC 4180 writes them: fields in double quotes
// may hold commas, line breaks and doubled quotes (""), records end in LF or CRLF (a lone CR
// too). The file is read in blocks, so a table of any size passes through a fixed buffer; a
// UTF-8 byte-order mark at its start is dropped, other bytes are kept as they are. Lines that
// are empty are skipped. An unquoted field keeps a quote inside it as text (as Python's csv
// module does).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace genesis::data {

// A field longer than this is refused: most often an unclosed quote that swallowed the rest of
// the file.
inline constexpr size_t kMaxCsvFieldBytes = size_t{1} << 20;

class CsvReader {
 public:
  // Throws UsageError when the file cannot be opened.
  explicit CsvReader(const std::filesystem::path& path, size_t block_bytes = size_t{1} << 20);

  // The next record's fields, false at the end of the file. Throws UsageError naming the file
  // and line on a quote left open at the end of the file, text after a closing quote, or a field
  // over kMaxCsvFieldBytes.
  bool next(std::vector<std::string>& fields);
  // The line (1-based) where the record next() returned last starts.
  int64_t line() const { return record_line_; }
  const std::filesystem::path& path() const { return path_; }
  // "path:line" of that record, for messages.
  std::string where() const;

 private:
  int get();   // the next byte, -1 at the end
  int peek();  // the same without taking it
  bool fill();
  void append(std::string& field, int c) const;

  std::filesystem::path path_;
  std::ifstream in_;
  size_t block_bytes_;
  std::string block_;
  size_t pos_ = 0;
  bool at_end_ = false;
  int64_t line_ = 1;         // the line of the next byte
  int64_t record_line_ = 0;  // where the last record started
};

}  // namespace genesis::data
