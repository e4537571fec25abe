#pragma once
// Tables of comma-separated values as classifier or regression samples: a header row names the
// columns, one column holds the label, the feature columns become one input vector per row.
// Numeric columns are standardized with the training rows' mean and standard deviation;
// categorical columns are one-hot over the training rows' categories (sorted; a category the
// training rows lack encodes as all zeros). A classifier's labels become class indices over the
// sorted training labels (numerically when every label is an integer), and their names are kept;
// a regression's labels are numbers, standardized as the numeric inputs are.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "libgenesis/data/dataset.h"

namespace genesis::data {

struct CsvOptions {
  std::string label{};                     // the target column
  std::vector<std::string> features{};     // the input columns, in order; empty: all but the label
  std::vector<std::string> categorical{};  // feature columns read as categories; the others are numbers
  bool impute = false;                     // a missing value takes the training mean or most frequent category
  bool standardize = true;                 // numeric columns to zero mean, unit variance
  bool regression = false;                 // the label is a number to predict, not a class
  bool label_optional = false;             // a file without the label column is rows to predict (labels missing)
};

// A column of text values, each distinct value kept once: a row holds its value's index.
struct CsvCodes {
  static constexpr int32_t kMissing = -1;
  std::vector<std::string> values;  // in order of first appearance
  std::vector<int32_t> rows;        // per row: an index into values, or kMissing
};

// A file's rows as read, by column. A missing value (an empty or blank field) is NaN in
// `numbers` and kMissing in `categories`.
struct CsvTable {
  std::filesystem::path path;
  std::vector<std::string> features;         // the feature columns, in input order
  std::vector<bool> categorical;             // per feature
  std::vector<std::vector<double>> numbers;  // per feature (empty for categorical ones): per row
  std::vector<CsvCodes> categories;          // per feature (empty for numeric ones)
  CsvCodes labels;
  std::vector<int64_t> lines;  // per row: the line of the file where it starts
  int64_t rows() const { return static_cast<int64_t>(lines.size()); }
};

// Reads a table through CsvReader (streamed in blocks). Throws UsageError, naming the file and
// line and the column, on an empty file or one without rows, a row with more or fewer fields
// than the header, a label or feature column the header lacks, a duplicate column name, a value
// of a numeric column that is no finite number, an empty label, a column name, category or label
// that is not UTF-8, and (without options.impute) a missing feature value.
CsvTable read_csv_table(const std::filesystem::path& path, const CsvOptions& options);

struct CsvFeature {
  std::string name;
  bool categorical = false;
  double mean = 0.0;                    // numeric: the training mean (the imputed value)
  double std = 1.0;                     // numeric: the divisor of standardization (1 for a constant column)
  std::vector<std::string> categories;  // categorical: sorted, one input each
  std::string most_frequent;            // categorical: the imputed category
};

// A regression's label: what the model predicts is (label - mean) / std.
struct CsvTarget {
  std::string name;   // the label column
  double mean = 0.0;  // the training rows' (0 without standardization)
  double std = 1.0;   // their population standard deviation (1 without standardization, or when constant)
};

// What the training rows fix and every split is encoded with.
struct CsvEncoding {
  std::vector<CsvFeature> features;
  std::vector<std::string> classes;  // class i's name (a classifier's; empty for a regression)
  std::optional<CsvTarget> target;   // a regression's label
  bool standardize = true;
  // Inputs per row: one per numeric column, one per category of each categorical column.
  int64_t width() const;
};

// The statistics of `rows` of the table (the training split): population standard deviations
// (scikit-learn's StandardScaler), ties of the most frequent category to the first in sort
// order. Missing values take no part. A regression's labels must be finite numbers (UsageError
// naming file:line).
CsvEncoding fit_csv_encoding(const CsvTable& table, const std::vector<int64_t>& rows, const CsvOptions& options);
// `rows` of the table as inputs [N, width] f32 and class indices [N] i64 (a regression: its
// standardized labels [N, 1] f32). Throws UsageError naming file:line for a label that is not
// among the classes, or (a regression) not a finite number.
Dataset encode_csv(const CsvTable& table, const std::vector<int64_t>& rows, const CsvEncoding& encoding);
// The inputs alone (rows to predict, labelled or not): [N, width] f32.
Tensor encode_csv_inputs(const CsvTable& table, const std::vector<int64_t>& rows, const CsvEncoding& encoding);
// The encoding as JSON text (what checkpoints keep as data.json), and back: ValueError naming
// `file` for text that is not such an encoding. Numbers keep every bit (shortest round-trip form).
std::string csv_encoding_json(const CsvEncoding& encoding);
CsvEncoding parse_csv_encoding(std::string_view text, const std::string& file);
// Class names in class order: sorted, numerically when every one is an integer (byte order otherwise).
void sort_classes(std::vector<std::string>& classes);
// 0, 1, ..., rows - 1.
std::vector<int64_t> all_csv_rows(const CsvTable& table);

}  // namespace genesis::data
