// Values of recipe keys: their type names, the constraint checks and their wording, TOML
// formatting, and the closest-name suggestion for unknown keys (the table itself is schema.cpp).
#include "libgenesis/recipe/schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace genesis::recipe {

const char* type_name(ValueType type) {
  switch (type) {
    case ValueType::Int:
      return "int";
    case ValueType::Float:
      return "float";
    case ValueType::Bool:
      return "bool";
    case ValueType::String:
      return "string";
    case ValueType::IntList:
      return "list of int";
    case ValueType::FloatList:
      return "list of float";
    case ValueType::StringList:
      return "list of string";
  }
  return "?";
}

namespace {

std::string shortest(double v) {
  char buf[64];
  auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  return std::string(buf, end);
}

std::string bound_text(const KeySpec& spec) {
  const auto& lo = spec.min;
  const auto& hi = spec.max;
  if (lo && hi)
    return "in " + std::string(lo->inclusive ? "[" : "(") + shortest(lo->value) + ", " + shortest(hi->value) +
           (hi->inclusive ? "]" : ")");
  if (lo) return (lo->inclusive ? ">= " : "> ") + shortest(lo->value);
  if (hi) return (hi->inclusive ? "<= " : "< ") + shortest(hi->value);
  return "";
}

bool in_bounds(const KeySpec& spec, double v) {
  if (spec.min && (spec.min->inclusive ? v < spec.min->value : v <= spec.min->value)) return false;
  if (spec.max && (spec.max->inclusive ? v > spec.max->value : v >= spec.max->value)) return false;
  return true;
}

std::string choices_text(const std::vector<std::string>& choices) {
  std::string out = "one of: ";
  for (size_t i = 0; i < choices.size(); ++i) out += (i ? ", " : "") + choices[i];
  return out;
}

template <class T>
std::string check_numbers(const KeySpec& spec, const std::vector<T>& values, bool is_list) {
  for (size_t i = 0; i < values.size(); ++i) {
    double v = static_cast<double>(values[i]);
    std::string where = spec.full_name();
    if (is_list) where.append("[").append(std::to_string(i)).append("]");
    if (!std::isfinite(v)) return where + " must be a finite number";
    if (!in_bounds(spec, v))
      return where + " must be " + bound_text(spec) + ", got " + format_toml_value(Value(values[i]));
  }
  return "";
}

}  // namespace

std::string constraint_violation(const KeySpec& spec, const Value& value) {
  std::string problem = std::visit(
      [&](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>) {
          return check_numbers(spec, std::vector<T>{v}, false);
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (spec.choices.empty() || std::find(spec.choices.begin(), spec.choices.end(), v) != spec.choices.end())
            return "";
          std::string msg = spec.full_name() + " must be " + choices_text(spec.choices) + "; got \"" + v + "\"";
          if (const std::string* near = closest_name(v, spec.choices)) msg += " (did you mean \"" + *near + "\"?)";
          return msg;
        } else if constexpr (std::is_same_v<T, bool>) {
          return "";
        } else {
          if (spec.list_length >= 0 && v.size() != static_cast<size_t>(spec.list_length))
            return spec.full_name() + " must have " + std::to_string(spec.list_length) + " entries, got " +
                   std::to_string(v.size());
          if constexpr (!std::is_same_v<T, std::vector<std::string>>) return check_numbers(spec, v, true);
          return "";
        }
      },
      value);
  if (problem.empty() && spec.check) {
    std::string bad = spec.check(value);
    if (!bad.empty()) problem = spec.full_name() + " " + bad + ", got " + format_toml_value(value);
  }
  return problem;
}

std::string describe_constraint(const KeySpec& spec) {
  std::vector<std::string> parts;
  bool is_list =
      spec.type() == ValueType::IntList || spec.type() == ValueType::FloatList || spec.type() == ValueType::StringList;
  if (std::string b = bound_text(spec); !b.empty()) parts.push_back((is_list ? "each " : "") + b);
  if (!spec.choices.empty()) parts.push_back(choices_text(spec.choices));
  if (spec.list_length >= 0) parts.push_back(std::to_string(spec.list_length) + " entries");
  if (spec.check_doc) parts.push_back(spec.check_doc);
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out;
}

namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// Shortest text that reads back as the same double, made a TOML float ("25" -> "25.0").
std::string toml_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = shortest(v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

template <class T>
std::string scalar_text(const T& v) {
  if constexpr (std::is_same_v<T, int64_t>) return std::to_string(v);
  if constexpr (std::is_same_v<T, double>) return toml_float(v);
  if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
  if constexpr (std::is_same_v<T, std::string>) return quote(v);
}

}  // namespace

std::optional<double> number_in_text(const std::string& text) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) return std::nullopt;
  return value;
}

std::string format_toml_value(const Value& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (requires { typename T::value_type; } && !std::is_same_v<T, std::string>) {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + scalar_text(v[i]);
          return out + "]";
        } else {
          return scalar_text(v);
        }
      },
      value);
}

namespace {

// Optimal string alignment distance: edits, with a swap of two neighbours counting as one.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

const std::string* closest_name(std::string_view name, const std::vector<std::string>& candidates) {
  const std::string* best = nullptr;
  size_t best_distance = std::max<size_t>(1, name.size() / 3) + 1;
  for (const std::string& c : candidates) {
    size_t d = edit_distance(name, c);
    if (d < best_distance) {
      best = &c;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace genesis::recipe
