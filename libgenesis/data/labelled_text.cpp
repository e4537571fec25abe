#include "libgenesis/data/labelled_text.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "libgenesis/core/error.h"
#include "libgenesis/core/interrupt.h"
#include "libgenesis/data/csv_table.h"
#include "libgenesis/data/sft_prepare.h"
#include "libgenesis/data/sft_records.h"
#include "libgenesis/io/fnv.h"
#include "libgenesis/io/safetensors.h"
#include "libgenesis/ops/factory.h"

namespace genesis::data {

namespace fs = std::filesystem;

namespace {

// Bumped when what a cached file holds changes.
constexpr const char* kTokensVersion = "1";

LabelledTexts read_csv_texts(const fs::path& path, const TextFields& fields) {
  const CsvTable table = read_csv_table(path, {.label = fields.label,
                                               .features = {fields.text},
                                               .categorical = {fields.text},
                                               .impute = true,  // an empty text is refused below, in its own words
                                               .standardize = false,
                                               .regression = false,
                                               .label_optional = fields.label_optional});
  LabelledTexts out{.path = path, .texts = {}, .labels = {}, .lines = table.lines};
  const CsvCodes& texts = table.categories.front();
  for (int64_t r = 0; r < table.rows(); ++r) {
    const int32_t text = texts.rows[static_cast<size_t>(r)];
    GENESIS_CHECK(text != CsvCodes::kMissing, UsageError, out.where(r), ": the column '", fields.text,
                  "' is empty; every row needs a text");
    out.texts.push_back(texts.values[static_cast<size_t>(text)]);
    const int32_t label = table.labels.rows[static_cast<size_t>(r)];
    out.labels.push_back(label == CsvCodes::kMissing ? std::string() : table.labels.values[static_cast<size_t>(label)]);
  }
  return out;
}

// A record's label as text: a string as it is, an integer in decimal.
std::string label_text(const nlohmann::json& value, const std::string& where, const std::string& field) {
  if (value.is_string() && !value.get<std::string>().empty()) return value.get<std::string>();
  GENESIS_CHECK(value.is_number_integer(), UsageError, where, ": the field \"", field,
                "\" must be a non-empty string or an integer (a class), got ", value.dump().substr(0, 40));
  return value.dump();
}

LabelledTexts read_jsonl_texts(const fs::path& path, const TextFields& fields) {
  std::ifstream in(path, std::ios::binary);
  GENESIS_CHECK(in.good(), UsageError, path.string(), ": cannot be read");
  LabelledTexts out{.path = path, .texts = {}, .labels = {}, .lines = {}};
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path.string() + ":" + std::to_string(number);
    GENESIS_CHECK(line.size() <= kMaxSftRecordBytes, UsageError, where, ": a record of more than ",
                  kMaxSftRecordBytes >> 20, " MiB");
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    GENESIS_CHECK(!record.is_discarded(), UsageError, where, ": not a JSON value (each line holds one record)");
    GENESIS_CHECK(record.is_object(), UsageError, where, ": a record must be a JSON object with \"", fields.text,
                  "\" and \"", fields.label, "\"");
    GENESIS_CHECK(record.contains(fields.text) && record[fields.text].is_string(), UsageError, where,
                  ": the record has no string field \"", fields.text, "\" (data.text names the text's field)");
    std::string text = record[fields.text].get<std::string>();
    GENESIS_CHECK(!text.empty(), UsageError, where, ": the field \"", fields.text,
                  "\" is empty; every record needs a text");
    const bool labelled = record.contains(fields.label) && !record[fields.label].is_null();
    GENESIS_CHECK(labelled || fields.label_optional, UsageError, where, ": the record has no field \"", fields.label,
                  "\" (data.label names the class's field)");
    out.labels.push_back(labelled ? label_text(record[fields.label], where, fields.label) : std::string());
    out.texts.push_back(std::move(text));
    out.lines.push_back(number);
  }
  GENESIS_CHECK(!in.bad(), UsageError, path.string(), ": a read failed");
  GENESIS_CHECK(out.size() > 0, UsageError, path.string(), " holds no records");
  return out;
}

}  // namespace

std::string LabelledTexts::where(int64_t i) const {
  return path.string() + ":" + std::to_string(lines[static_cast<size_t>(i)]);
}

LabelledTexts read_labelled_texts(const fs::path& path, const TextFields& fields) {
  GENESIS_CHECK(fs::is_regular_file(path), UsageError, path.string(),
                fs::exists(path) ? " is not a file" : " does not exist");
  return path.extension() == ".csv" ? read_csv_texts(path, fields) : read_jsonl_texts(path, fields);
}

LabelledTexts read_text_lines(const fs::path& path) {
  std::ifstream file;
  const bool from_stdin = path == "-";
  if (!from_stdin) {
    file.open(path, std::ios::binary);
    GENESIS_CHECK(file.good(), UsageError, path.string(), fs::exists(path) ? ": cannot be read" : " does not exist");
  }
  std::istream& in = from_stdin ? std::cin : file;
  LabelledTexts out{.path = from_stdin ? fs::path("stdin") : path, .texts = {}, .labels = {}, .lines = {}};
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    out.texts.push_back(line);
    out.labels.emplace_back();
    out.lines.push_back(number);
  }
  return out;
}

Tensor tokenize_texts(const Tokenizer& tokenizer, const LabelledTexts& texts, const TextTokenOptions& o, int32_t pad,
                      bool* reused) {
  GENESIS_CHECK(o.seq_len >= 1, ValueError, "tokenize_texts: seq_len must be positive");
  fs::path cached;
  if (!o.cache_dir.empty()) {
    uint64_t key = io::fnv1a(io::kFnvBasis, std::string(kTokensVersion));
    for (const std::string& part : {io::hex16(file_fingerprint(texts.path)), o.text_field, o.tokenizer_key,
                                    std::to_string(o.seq_len), std::to_string(pad)})
      key = io::fnv1a(key, part);
    cached = o.cache_dir / "text_classification" / (io::hex16(key) + ".safetensors");
    if (fs::exists(cached)) {
      Tensor rows = io::SafetensorsFile(cached).tensor("rows").contiguous();
      GENESIS_CHECK(
          rows.dim() == 2 && rows.size(0) == texts.size() && rows.size(1) == o.seq_len && rows.dtype() == DType::i32,
          ValueError, cached.string(), ": the cached tokens do not match ", texts.path.string(),
          "; delete the file to tokenize again");
      if (reused) *reused = true;
      return rows.clone();
    }
  }
  std::vector<int32_t> rows(static_cast<size_t>(texts.size() * o.seq_len), pad);
  for (int64_t i = 0; i < texts.size(); ++i) {
    check_interrupt("tokenizing the texts (run again to tokenize them)");
    const std::vector<TokenId> ids = tokenizer.encode(texts.texts[static_cast<size_t>(i)]);
    const auto kept = std::min<int64_t>(o.seq_len, static_cast<int64_t>(ids.size()));
    std::copy_n(ids.begin(), kept, rows.begin() + i * o.seq_len);
    if (o.progress && (i % 64 == 63 || i + 1 == texts.size())) o.progress(i + 1, texts.size());
  }
  Tensor out = from_vector(rows, {texts.size(), o.seq_len});
  if (!cached.empty()) {
    fs::create_directories(cached.parent_path());
    io::save_safetensors(cached, {{"rows", out}},
                         {{"source", texts.path.string()}, {"seq_len", std::to_string(o.seq_len)}});
  }
  if (reused) *reused = false;
  return out;
}

std::string text_encoding_json(const std::vector<std::string>& classes) {
  const nlohmann::json j{{"format", "genesis text classification encoding"}, {"classes", classes}};
  return j.dump(2) + "\n";
}

std::vector<std::string> parse_text_encoding(std::string_view text, const std::string& file) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  GENESIS_CHECK(
      j.is_object() && j.contains("format") && j["format"] == "genesis text classification encoding" &&
          j.contains("classes") && j["classes"].is_array() && !j["classes"].empty() &&
          std::all_of(j["classes"].begin(), j["classes"].end(), [](const nlohmann::json& v) { return v.is_string(); }),
      ValueError, file, ": not a text classification encoding written by genesis (format, classes)");
  return j["classes"].get<std::vector<std::string>>();
}

}  // namespace genesis::data
