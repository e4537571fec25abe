#include "libgenesis/data/csv_table.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "libgenesis/core/error.h"
#include "libgenesis/data/csv_reader.h"

namespace genesis::data {

namespace {

std::string_view trimmed(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF):
// names, categories and labels go into the checkpoint's JSON, which holds only UTF-8 text.
bool is_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    if (extra < 0 || i + static_cast<size_t>(extra) >= s.size()) return false;
    uint32_t cp = extra == 0 ? c : c & (0x3F >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((b >> 6) != 0x2) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr uint32_t kLeast[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kLeast[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<size_t>(extra) + 1;
  }
  return true;
}

std::optional<double> parse_number(std::string_view text) {
  double value = 0.0;
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (err != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<int64_t> parse_integer(std::string_view text) {
  int64_t value = 0;
  const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (err != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

std::string joined(const std::vector<std::string>& names, size_t at_most = 12) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < at_most; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > at_most) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

// Appends `value` to a column, adding it to the column's values when new.
void add_code(CsvCodes& column, std::unordered_map<std::string, int32_t>& index, std::string_view value,
              const std::string& where) {
  if (value.empty()) {
    column.rows.push_back(CsvCodes::kMissing);
    return;
  }
  const auto [it, added] = index.try_emplace(std::string(value), static_cast<int32_t>(column.values.size()));
  if (added) {
    GENESIS_CHECK(column.values.size() < size_t{1} << 30, UsageError, where,
                  ": more than 2^30 distinct values in one text column");
    column.values.emplace_back(value);
  }
  column.rows.push_back(it->second);
}

// The header's columns by name (a map: a table may have many thousands of columns).
using ColumnIndex = std::unordered_map<std::string, size_t>;

// The position of `name` in the header; throws naming `key`, the recipe key that asked for it.
size_t column_of(const ColumnIndex& columns, const std::vector<std::string>& header, const std::string& name,
                 const char* key, const std::string& file) {
  const auto it = columns.find(name);
  GENESIS_CHECK(it != columns.end(), UsageError, file, ":1: no column '", name, "' (", key,
                "); the header has: ", joined(header));
  return it->second;
}

}  // namespace

CsvTable read_csv_table(const std::filesystem::path& path, const CsvOptions& options) {
  CsvReader reader(path);
  const std::string file = path.string();
  std::vector<std::string> header;
  GENESIS_CHECK(reader.next(header), UsageError, file,
                ": the file is empty; a CSV needs a header row naming its columns, then one row per example");
  ColumnIndex columns;
  for (size_t i = 0; i < header.size(); ++i) {
    header[i] = std::string(trimmed(header[i]));
    GENESIS_CHECK(is_utf8(header[i]), UsageError, file, ":", reader.line(), ": column ", i + 1,
                  "'s name is not UTF-8 text; save the file as UTF-8");
    GENESIS_CHECK(columns.emplace(header[i], i).second, UsageError, file, ":", reader.line(),
                  ": the header names column '", header[i], "' twice; column names must be unique");
  }
  GENESIS_CHECK(!options.label.empty(), UsageError, "data.label must name the label column of ", file,
                " (its columns: ", joined(header), ")");
  // Rows to predict may come without their label; their labels are then all missing.
  const bool labelled = !options.label_optional || columns.contains(options.label);
  const size_t label = labelled ? column_of(columns, header, options.label, "data.label", file) : 0;

  CsvTable t;
  t.path = path;
  t.features = options.features;
  if (t.features.empty())
    for (const std::string& name : header)
      if (name != options.label) t.features.push_back(name);
  GENESIS_CHECK(!t.features.empty(), UsageError, file, " has no column besides the label '", options.label,
                "' to learn from");
  std::vector<size_t> at;
  for (const std::string& name : t.features) {
    GENESIS_CHECK(name != options.label, UsageError, "data.features lists the label column '", name,
                  "'; a label cannot be an input");
    at.push_back(column_of(columns, header, name, "data.features", file));
  }
  const std::set<std::string> features(t.features.begin(), t.features.end());
  GENESIS_CHECK(features.size() == t.features.size(), UsageError, "data.features names a column twice");
  for (const std::string& name : options.categorical)
    GENESIS_CHECK(features.count(name) > 0, UsageError, "data.categorical names '", name,
                  "', which is not a feature column of ", file, " (features: ", joined(t.features), ")");
  const size_t n = t.features.size();
  t.categorical.resize(n);
  t.numbers.resize(n);
  t.categories.resize(n);
  const std::set<std::string> categorical(options.categorical.begin(), options.categorical.end());
  for (size_t f = 0; f < n; ++f) t.categorical[f] = categorical.count(t.features[f]) > 0;

  std::vector<std::unordered_map<std::string, int32_t>> codes(n);  // per categorical feature
  std::unordered_map<std::string, int32_t> label_codes;
  std::vector<std::string> fields;
  while (reader.next(fields)) {
    GENESIS_CHECK(fields.size() == header.size(), UsageError, reader.where(), ": ", fields.size(),
                  " fields, but the header has ", header.size(),
                  " columns; every row needs one field per column (a value holding a comma must be quoted)");
    const std::string_view y = labelled ? trimmed(fields[label]) : std::string_view();
    GENESIS_CHECK(!y.empty() || !labelled, UsageError, reader.where(), ": the label column '", options.label,
                  "' is empty; every row needs a label");
    GENESIS_CHECK(is_utf8(y), UsageError, reader.where(), ": the label column '", options.label,
                  "' holds a value that is not UTF-8 text; save the file as UTF-8");
    if (labelled) add_code(t.labels, label_codes, y, reader.where());
    else t.labels.rows.push_back(CsvCodes::kMissing);
    t.lines.push_back(reader.line());
    for (size_t f = 0; f < n; ++f) {
      const std::string_view value = trimmed(fields[at[f]]);
      GENESIS_CHECK(!value.empty() || options.impute, UsageError, reader.where(), ": column '", t.features[f],
                    "' is empty; fill the value, or set data.impute = \"mean\" (the training mean, or the most "
                    "frequent category)");
      if (t.categorical[f]) {
        GENESIS_CHECK(is_utf8(value), UsageError, reader.where(), ": column '", t.features[f],
                      "' holds a value that is not UTF-8 text; save the file as UTF-8");
        add_code(t.categories[f], codes[f], value, reader.where());
        continue;
      }
      std::optional<double> number = value.empty() ? std::numeric_limits<double>::quiet_NaN() : parse_number(value);
      GENESIS_CHECK(number.has_value(), UsageError, reader.where(), ": column '", t.features[f], "' holds '",
                    std::string(value.substr(0, 40)), value.size() > 40 ? "...'" : "'",
                    ", which is not a finite number; fix the value, or list the column in data.categorical");
      t.numbers[f].push_back(*number);
    }
  }
  GENESIS_CHECK(t.rows() > 0, UsageError, file, " has a header but no rows");
  return t;
}

int64_t CsvEncoding::width() const {
  int64_t w = 0;
  for (const CsvFeature& f : features) w += f.categorical ? static_cast<int64_t>(f.categories.size()) : 1;
  return w;
}

namespace {

// How many of `rows` hold each of the column's values.
std::vector<int64_t> code_counts(const CsvCodes& column, const std::vector<int64_t>& rows) {
  std::vector<int64_t> counts(column.values.size(), 0);
  for (const int64_t r : rows)
    if (const int32_t code = column.rows[static_cast<size_t>(r)]; code != CsvCodes::kMissing)
      ++counts[static_cast<size_t>(code)];
  return counts;
}

// For each of the column's values, its position in `names` (-1: not there).
std::vector<int64_t> positions_in(const CsvCodes& column, const std::vector<std::string>& names) {
  std::unordered_map<std::string_view, int64_t> position;
  for (size_t i = 0; i < names.size(); ++i) position.emplace(names[i], static_cast<int64_t>(i));
  std::vector<int64_t> at(column.values.size(), -1);
  for (size_t v = 0; v < at.size(); ++v)
    if (const auto it = position.find(column.values[v]); it != position.end()) at[v] = it->second;
  return at;
}

// The mean and population standard deviation (1 for a constant column) of the values at `rows`
// that are not NaN: a running mean, and the spread in units of the largest deviation, so no
// finite values overflow (1e300 squared is not a double).
std::pair<double, double> spread_of(const CsvTable& table, const std::vector<double>& values,
                                    const std::vector<int64_t>& rows, const std::string& column) {
  int64_t count = 0;
  double mean = 0.0;
  for (const int64_t r : rows)
    if (const double x = values[static_cast<size_t>(r)]; !std::isnan(x)) mean += (x - mean) / static_cast<double>(++count);
  GENESIS_CHECK(count > 0, UsageError, table.path.string(), ": column '", column, "' has no value in the training rows");
  double scale = 0.0, squares = 0.0;
  for (const int64_t r : rows)
    if (const double x = values[static_cast<size_t>(r)]; !std::isnan(x)) scale = std::max(scale, std::abs(x - mean));
  for (const int64_t r : rows)
    if (const double x = values[static_cast<size_t>(r)]; !std::isnan(x) && scale > 0.0)
      squares += ((x - mean) / scale) * ((x - mean) / scale);
  const double std = scale * std::sqrt(squares / static_cast<double>(count));
  GENESIS_CHECK(std::isfinite(mean) && std::isfinite(std), UsageError, table.path.string(), ": column '", column,
                "' has values too far apart to standardize (their spread overflows a double)");
  return {mean, std > 0.0 ? std : 1.0};
}

// A regression's label of every row as a number; UsageError naming the first row whose label is
// not a finite number.
std::vector<double> label_numbers(const CsvTable& table) {
  std::vector<std::optional<double>> of_value;
  for (const std::string& v : table.labels.values) of_value.push_back(parse_number(v));
  std::vector<double> out(static_cast<size_t>(table.rows()));
  for (size_t r = 0; r < out.size(); ++r) {
    const auto code = static_cast<size_t>(table.labels.rows[r]);
    GENESIS_CHECK(of_value[code].has_value(), UsageError, table.path.string(), ":", table.lines[r], ": label '",
                  table.labels.values[code].substr(0, 40), "' is not a finite number, which a regression predicts; fix "
                  "it, or set data.task = \"classification\"");
    out[r] = *of_value[code];
  }
  return out;
}

}  // namespace

CsvEncoding fit_csv_encoding(const CsvTable& table, const std::vector<int64_t>& rows, const CsvOptions& options) {
  GENESIS_CHECK(!rows.empty(), UsageError, table.path.string(), ": no training rows are left");
  CsvEncoding e;
  e.standardize = options.standardize;
  for (size_t f = 0; f < table.features.size(); ++f) {
    CsvFeature out;
    out.name = table.features[f];
    out.categorical = table.categorical[f];
    if (out.categorical) {
      const CsvCodes& column = table.categories[f];
      const std::vector<int64_t> counts = code_counts(column, rows);
      for (size_t v = 0; v < counts.size(); ++v)
        if (counts[v] > 0) out.categories.push_back(column.values[v]);
      GENESIS_CHECK(!out.categories.empty(), UsageError, table.path.string(), ": column '", out.name,
                    "' has no value in the training rows");
      std::sort(out.categories.begin(), out.categories.end());
      // The most frequent, ties to the first in sort order.
      int64_t best = 0;
      for (size_t v = 0; v < counts.size(); ++v)
        if (counts[v] > best || (counts[v] == best && best > 0 && column.values[v] < out.most_frequent))
          best = counts[v], out.most_frequent = column.values[v];
    } else {
      std::tie(out.mean, out.std) = spread_of(table, table.numbers[f], rows, out.name);
    }
    e.features.push_back(std::move(out));
  }
  if (options.regression) {
    CsvTarget target{.name = options.label};
    if (options.standardize) std::tie(target.mean, target.std) = spread_of(table, label_numbers(table), rows, target.name);
    e.target = target;
    return e;
  }
  std::vector<std::string> classes;
  const std::vector<int64_t> label_counts = code_counts(table.labels, rows);
  for (size_t v = 0; v < label_counts.size(); ++v)
    if (label_counts[v] > 0) classes.push_back(table.labels.values[v]);
  sort_classes(classes);
  e.classes = std::move(classes);
  return e;
}

void sort_classes(std::vector<std::string>& classes) {
  std::sort(classes.begin(), classes.end());
  const bool integers =
      std::all_of(classes.begin(), classes.end(), [](const std::string& c) { return parse_integer(c); });
  if (integers)
    std::sort(classes.begin(), classes.end(),
              [](const std::string& a, const std::string& b) { return *parse_integer(a) < *parse_integer(b); });
}

Dataset encode_csv(const CsvTable& table, const std::vector<int64_t>& rows, const CsvEncoding& encoding) {
  const int64_t n = static_cast<int64_t>(rows.size());
  const bool regression = encoding.target.has_value();
  Dataset out{encode_csv_inputs(table, rows, encoding), regression ? empty({n, 1}) : empty({n}, {.dtype = DType::i64})};
  // Each text label's class, found once per distinct value.
  const std::vector<int64_t> class_of = positions_in(table.labels, encoding.classes);
  const std::vector<double> numbers = regression ? label_numbers(table) : std::vector<double>{};
  for (int64_t i = 0; i < n; ++i) {
    const auto r = static_cast<size_t>(rows[static_cast<size_t>(i)]);
    const auto label = static_cast<size_t>(table.labels.rows[r]);
    if (regression) {
      const double target = (numbers[r] - encoding.target->mean) / encoding.target->std;
      GENESIS_CHECK(std::abs(target) <= std::numeric_limits<float>::max(), UsageError, table.path.string(), ":",
                    table.lines[r], ": label ", numbers[r], " is beyond the range of an f32 target");
      out.targets.data<float>()[i] = static_cast<float>(target);
    } else {
      GENESIS_CHECK(class_of[label] >= 0, UsageError, table.path.string(), ":", table.lines[r], ": label '",
                    table.labels.values[label], "' is not among the training data's classes (",
                    joined(encoding.classes), "); a class needs training rows to be learned");
      out.targets.data<int64_t>()[i] = class_of[label];
    }
  }
  return out;
}

Tensor encode_csv_inputs(const CsvTable& table, const std::vector<int64_t>& rows, const CsvEncoding& encoding) {
  std::vector<std::string> trained;
  for (const CsvFeature& feature : encoding.features) trained.push_back(feature.name);
  GENESIS_CHECK(table.features == trained, UsageError, table.path.string(), ": its feature columns (",
                joined(table.features), ") are not the training data's (", joined(trained), ")");
  const int64_t n = static_cast<int64_t>(rows.size()), width = encoding.width();
  Tensor inputs = empty({n, width});
  float* x = inputs.data<float>();
  std::fill(x, x + n * width, 0.0f);
  // Each text value's one-hot position, found once per distinct value.
  std::vector<std::vector<int64_t>> slot_of(encoding.features.size());
  std::vector<int64_t> missing_slot(encoding.features.size(), -1);
  for (size_t f = 0; f < encoding.features.size(); ++f) {
    const CsvFeature& feature = encoding.features[f];
    if (!feature.categorical) continue;
    slot_of[f] = positions_in(table.categories[f], feature.categories);
    const auto it = std::find(feature.categories.begin(), feature.categories.end(), feature.most_frequent);
    if (it != feature.categories.end()) missing_slot[f] = it - feature.categories.begin();
  }
  for (int64_t i = 0; i < n; ++i) {
    const auto r = static_cast<size_t>(rows[static_cast<size_t>(i)]);
    float* row = x + i * width;
    for (size_t f = 0; f < encoding.features.size(); ++f) {
      const CsvFeature& feature = encoding.features[f];
      if (feature.categorical) {
        const int32_t code = table.categories[f].rows[r];
        const int64_t slot = code == CsvCodes::kMissing ? missing_slot[f] : slot_of[f][static_cast<size_t>(code)];
        if (slot >= 0) row[slot] = 1.0f;
        row += feature.categories.size();
      } else {
        const double value = table.numbers[f][r];
        const double filled = std::isnan(value) ? feature.mean : value;
        const double input = encoding.standardize ? (filled - feature.mean) / feature.std : filled;
        GENESIS_CHECK(std::abs(input) <= std::numeric_limits<float>::max(), UsageError, table.path.string(), ":",
                      table.lines[r], ": column '", feature.name, "' holds ", filled, ", which is ",
                      encoding.standardize ? "standardized " : "", "beyond the range of an f32 input");
        *row++ = static_cast<float>(input);
      }
    }
  }
  return inputs;
}

std::string csv_encoding_json(const CsvEncoding& encoding) {
  nlohmann::json features = nlohmann::json::array();
  for (const CsvFeature& f : encoding.features) {
    if (f.categorical)
      features.push_back({{"name", f.name}, {"categories", f.categories}, {"most_frequent", f.most_frequent}});
    else
      features.push_back({{"name", f.name}, {"mean", f.mean}, {"std", f.std}});
  }
  nlohmann::json j{{"format", "genesis csv encoding"},
                   {"standardize", encoding.standardize},
                   {"features", features},
                   {"classes", encoding.classes}};
  if (const std::optional<CsvTarget>& t = encoding.target)
    j["target"] = {{"name", t->name}, {"mean", t->mean}, {"std", t->std}};
  return j.dump(2) + "\n";
}

CsvEncoding parse_csv_encoding(std::string_view text, const std::string& file) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto strings = [](const nlohmann::json& v) {
    return v.is_array() && std::all_of(v.begin(), v.end(), [](const nlohmann::json& s) { return s.is_string(); });
  };
  GENESIS_CHECK(j.is_object() && j.contains("format") && j["format"] == "genesis csv encoding" &&
                    j.contains("features") && j["features"].is_array() && j.contains("classes") &&
                    strings(j["classes"]) && j.contains("standardize") && j["standardize"].is_boolean(),
                ValueError, file, ": not a CSV encoding written by genesis (format, standardize, features, classes)");
  CsvEncoding e;
  e.standardize = j["standardize"].get<bool>();
  e.classes = j["classes"].get<std::vector<std::string>>();
  if (j.contains("target")) {
    const nlohmann::json& t = j["target"];
    GENESIS_CHECK(t.is_object() && t.contains("name") && t["name"].is_string() && t.contains("mean") &&
                      t["mean"].is_number() && t.contains("std") && t["std"].is_number() && t["std"].get<double>() > 0.0,
                  ValueError, file, ": the regression target needs a name, a mean and a std > 0");
    e.target = CsvTarget{.name = t["name"].get<std::string>(), .mean = t["mean"].get<double>(), .std = t["std"].get<double>()};
  }
  for (const nlohmann::json& f : j["features"]) {
    GENESIS_CHECK(f.is_object() && f.contains("name") && f["name"].is_string(), ValueError, file,
                  ": a feature without a name");
    CsvFeature out;
    out.name = f["name"].get<std::string>();
    out.categorical = f.contains("categories");
    if (out.categorical) {
      GENESIS_CHECK(strings(f["categories"]) && f.contains("most_frequent") && f["most_frequent"].is_string(),
                    ValueError, file, ": feature '", out.name, "' needs categories and most_frequent (strings)");
      out.categories = f["categories"].get<std::vector<std::string>>();
      out.most_frequent = f["most_frequent"].get<std::string>();
      GENESIS_CHECK(std::is_sorted(out.categories.begin(), out.categories.end()), ValueError, file, ": feature '",
                    out.name, "': categories are not sorted");
    } else {
      GENESIS_CHECK(f.contains("mean") && f["mean"].is_number() && f.contains("std") && f["std"].is_number() &&
                        f["std"].get<double>() > 0.0,
                    ValueError, file, ": feature '", out.name, "' needs a mean and a std > 0");
      out.mean = f["mean"].get<double>();
      out.std = f["std"].get<double>();
    }
    e.features.push_back(std::move(out));
  }
  return e;
}

std::vector<int64_t> all_csv_rows(const CsvTable& table) {
  std::vector<int64_t> rows(static_cast<size_t>(table.rows()));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  return rows;
}

}  // namespace genesis::data
