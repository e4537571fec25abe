// libFuzzer harness: CSV tables (data::CsvReader, data::read_csv_table). The first byte picks
// the reader's block size (4 to 67 bytes, so records straddle blocks) and whether missing values
// are imputed; the rest is the file. The records must not depend on the block size, and written
// back RFC 4180's way (every field quoted, quotes doubled, CRLF) must read back the same. The
// file is then read as a table (label: the first column, the second categorical) and encoded,
// and the encoding written as JSON (a checkpoint's data.json) and read back encodes the same.
// The input is also read as such a JSON file.
#include <cstring>
#include <string>
#include <vector>

#include "libgenesis/data/csv_reader.h"
#include "libgenesis/data/csv_table.h"
#include "tests/fuzz/fuzz_common.h"

using namespace genesis;

namespace {

using Records = std::vector<std::vector<std::string>>;

Records read_records(const std::filesystem::path& path, size_t block_bytes) {
  data::CsvReader reader(path, block_bytes);
  Records records;
  std::vector<std::string> fields;
  while (reader.next(fields)) records.push_back(fields);
  return records;
}

std::string written(const Records& records) {
  std::string out;
  for (const std::vector<std::string>& record : records) {
    for (size_t i = 0; i < record.size(); ++i) {
      out += i ? ",\"" : "\"";
      for (const char c : record[i]) out += c == '"' ? std::string("\"\"") : std::string(1, c);
      out += '"';
    }
    out += "\r\n";
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t block = 4 + data[0] % 64;
  const bool impute = (data[0] & 64) != 0;
  const std::filesystem::path path = fuzz::write_input("table.csv", fuzz::as_text(data + 1, size - 1));
  fuzz::expect_clean([&] {
    const Records records = read_records(path, block);
    if (read_records(path, size_t{1} << 20) != records)
      fuzz::finding("records depend on the block size", path.string());
    const std::filesystem::path again = fuzz::write_input("again.csv", written(records));
    if (read_records(again, block) != records) fuzz::finding("records written back read differently", path.string());
    if (records.empty() || records[0].size() < 2) return;
    const data::CsvOptions options{.label = records[0][0], .categorical = {records[0][1]}, .impute = impute};
    const data::CsvTable table = data::read_csv_table(path, options);
    const data::CsvEncoding encoding = data::fit_csv_encoding(table, data::all_csv_rows(table), options);
    const data::Dataset ds = data::encode_csv(table, data::all_csv_rows(table), encoding);
    if (ds.size() != table.rows()) fuzz::finding("encoded rows differ from the table's", path.string());
    // What checkpoints keep encodes the same inputs, bit for bit.
    const data::CsvEncoding kept = data::parse_csv_encoding(data::csv_encoding_json(encoding), "data.json");
    const data::Dataset reencoded = data::encode_csv(table, data::all_csv_rows(table), kept);
    if (std::memcmp(reencoded.inputs.data_ptr(), ds.inputs.data_ptr(), static_cast<size_t>(ds.inputs.numel()) * 4) != 0)
      fuzz::finding("the encoding read back from JSON encodes differently", path.string());
  });
  // The same bytes as a checkpoint's data.json: an encoding, or a genesis error.
  fuzz::expect_clean([&] { (void)data::parse_csv_encoding(fuzz::as_text(data + 1, size - 1), "data.json"); });
  return 0;
}
