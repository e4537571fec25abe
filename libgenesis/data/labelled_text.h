#pragma once
// Labelled texts for a text classifier: JSON Lines records ({"text": ..., "label": ...}) or the
// rows of a CSV file with a header row, each text tokenized and cut to its first seq_len tokens.
// The tokens are kept in a cache keyed by what decides them (the file's bytes, the text field,
// the tokenizer's file and seq_len), so a second run reads them back at once.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "libgenesis/core/tensor.h"
#include "libgenesis/data/tokenizer.h"

namespace genesis::data {

struct TextFields {
  std::string text = "text";    // the JSONL field / CSV column of the text
  std::string label = "label";  // of the class (a string, or an integer)
  bool label_optional = false;  // texts to predict: a record may lack the label
};

struct LabelledTexts {
  std::filesystem::path path;
  std::vector<std::string> texts;
  std::vector<std::string> labels;  // "" where a record has none (label_optional)
  std::vector<int64_t> lines;       // the line of the file where each record starts
  int64_t size() const { return static_cast<int64_t>(texts.size()); }
  // "path:line" of record i, for messages.
  std::string where(int64_t i) const;
};

// A .csv file through the CSV reader (data/csv_table.h), any other file as JSON Lines (blank
// lines skipped). Throws UsageError naming file:line for bad JSON, a record that is not an
// object, a text that is missing, not a string or empty, a label that is missing (unless
// optional) or neither a string nor an integer, and a file without records.
LabelledTexts read_labelled_texts(const std::filesystem::path& path, const TextFields& fields);

// Lines of plain text as texts to predict (no labels): each non-empty line of `path` ("-": the
// standard input) is one text.
LabelledTexts read_text_lines(const std::filesystem::path& path);

struct TextTokenOptions {
  int64_t seq_len = 256;
  std::filesystem::path cache_dir = {};  // empty: no cache
  std::string tokenizer_key = {};        // what identifies the tokenizer in the cache key
  std::string text_field = {};           // part of the key: the file's other fields may change the texts read
  std::function<void(int64_t done, int64_t total)> progress{};  // texts tokenized
};

// Every text's first seq_len tokens, as rows i32 [N, seq_len] right-padded with `pad`. With a
// cache directory, read back from (or written to) cache_dir/text_classification/<key>.safetensors.
// `reused` says which.
Tensor tokenize_texts(const Tokenizer& tokenizer, const LabelledTexts& texts, const TextTokenOptions& options,
                      int32_t pad, bool* reused = nullptr);

// The classifier's class names as checkpoints keep them (data.json), and back: ValueError naming
// `file` for text that is not such an encoding.
std::string text_encoding_json(const std::vector<std::string>& classes);
std::vector<std::string> parse_text_encoding(std::string_view text, const std::string& file);

}  // namespace genesis::data
