// Rendering a parsed Jinja template: a tree-walking interpreter over the syntax tree of
// jinja_ast.h, with Python's semantics for operators, and the filters, tests and str / dict
// methods that chat templates use.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <unordered_map>

#include "libgenesis/core/error.h"
#include "libgenesis/data/jinja_ast.h"

namespace genesis::data::jinja {

namespace {

// ---- helpers on Python values

[[noreturn]] void type_error(const std::string& what) {
  throw EvalError(what);
}

// A string or list about to be made of `bytes` (a list counts its Values and its strings' bytes,
// which copying it copies) past kMaxValueBytes is refused before it is allocated.
void check_value_size(double bytes, std::string_view what) {
  if (bytes > static_cast<double>(kMaxValueBytes))
    type_error(detail::concat(what, " would be larger than ", kMaxValueBytes >> 20, " MiB (the template's limit)"));
}

double list_bytes(const List& items) {
  double bytes = 0;
  for (const Value& v : items) bytes += sizeof(Value) + (v.is_string() ? static_cast<double>(v.as_string().size()) : 0);
  return bytes;
}

[[noreturn]] void integer_overflow(std::string_view op) {
  type_error(detail::concat("integer overflow in '", op, "' (the template's integers are 64-bit)"));
}


// Python's int(x) of a float, refused when x is nan, infinite or past 64 bits.
int64_t float_to_int(double d) {
  if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0))
    type_error("cannot convert float " + float_repr(d) + " to a 64-bit integer");
  return static_cast<int64_t>(d);
}

size_t count_code_points(const std::string& s) {
  return static_cast<size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// Arguments by position or by keyword; undefined when absent.
const Value& arg(const Args& args, size_t position, std::string_view keyword) {
  static const Value kUndefined;
  if (position < args.positional.size()) return args.positional[position];
  const Value* v = find(args.keyword, keyword);
  return v != nullptr ? *v : kUndefined;
}

const std::string& string_arg(const Args& args, size_t position, std::string_view keyword, std::string_view what) {
  const Value& v = arg(args, position, keyword);
  if (!v.is_string()) type_error(detail::concat(what, " expects a string ", keyword, ", got '", v.type_name(), "'"));
  return v.as_string();
}

// The code points of UTF-8 text, each as its bytes: Python indexes and counts strings by them.
std::vector<std::string> code_points(const std::string& s) {
  // Each code point becomes a Value of its own when iterated: bounded as a list is.
  check_value_size(
      static_cast<double>(s.size() > kMaxValueBytes / sizeof(Value) ? count_code_points(s) : 0) * sizeof(Value),
      "the string's list of characters");
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t n = 1;
    while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

List as_items(const Value& v) {  // what `for x in v` walks
  switch (v.kind()) {
    case Value::Kind::undefined:
      return {};
    case Value::Kind::list:
      return v.as_list();
    case Value::Kind::string: {
      List chars;
      for (std::string& c : code_points(v.as_string())) chars.emplace_back(std::move(c));
      return chars;
    }
    case Value::Kind::dict: {
      List keys;
      for (const auto& entry : v.as_dict()) keys.emplace_back(entry.first);
      return keys;
    }
    default:
      type_error("'" + v.type_name() + "' object is not iterable");
  }
}

bool is_py_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  auto drop = [&](char c) {
    return chars.is_string() ? chars.as_string().find(c) != std::string::npos : is_py_space(c);
  };
  size_t begin = 0, end = s.size();
  while (left && begin < end && drop(s[begin])) ++begin;
  while (right && end > begin && drop(s[end - 1])) --end;
  return s.substr(begin, end - begin);
}

std::string map_chars(std::string s, int (*f)(int)) {
  for (char& c : s) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return s;
}

std::string title(std::string s) {  // Python's str.title: a letter after a non-letter starts a word
  bool word_start = true;
  for (char& c : s) {
    const bool letter = std::isalpha(static_cast<unsigned char>(c)) != 0;
    c = static_cast<char>(word_start ? std::toupper(static_cast<unsigned char>(c))
                                     : std::tolower(static_cast<unsigned char>(c)));
    word_start = !letter;
  }
  return s;
}

std::string capitalize(const std::string& s) {
  std::string out = map_chars(s, [](int c) { return std::tolower(c); });
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  size_t pos = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    const size_t hit = from.empty() ? (pos <= s.size() ? pos : std::string::npos) : s.find(from, pos);
    if (hit == std::string::npos) break;
    out += s.substr(pos, hit - pos) + to;
    check_value_size(static_cast<double>(out.size()), "replace()'s result");
    if (from.empty()) {
      if (hit < s.size()) out += s[hit];
      pos = hit + 1;
    } else {
      pos = hit + from.size();
    }
  }
  return pos <= s.size() ? out + s.substr(pos) : out;
}

List split(const std::string& s, const Value& separator, int64_t max_splits) {
  List parts;
  if (!separator.is_string()) {  // runs of whitespace, no empty parts
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_py_space(s[i])) ++i;
      if (i == s.size()) break;
      size_t j = i;
      if (max_splits >= 0 && static_cast<int64_t>(parts.size()) == max_splits) {
        parts.emplace_back(strip(s.substr(i), Value(), false, true));
        break;
      }
      while (j < s.size() && !is_py_space(s[j])) ++j;
      parts.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return parts;
  }
  const std::string& sep = separator.as_string();
  if (sep.empty()) type_error("split(): empty separator");
  size_t pos = 0;
  for (size_t hit; (max_splits < 0 || static_cast<int64_t>(parts.size()) < max_splits) &&
                   (hit = s.find(sep, pos)) != std::string::npos;
       pos = hit + sep.size())
    parts.emplace_back(s.substr(pos, hit - pos));
  parts.emplace_back(s.substr(pos));
  return parts;
}

bool starts_or_ends_with(const std::string& s, const Value& affixes, bool at_start) {
  const List options = affixes.is_list() ? affixes.as_list() : List{affixes};
  return std::any_of(options.begin(), options.end(), [&](const Value& a) {
    if (!a.is_string()) type_error("startswith/endswith expects strings, got '" + a.type_name() + "'");
    return at_start ? s.starts_with(a.as_string()) : s.ends_with(a.as_string());
  });
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::string:
      return static_cast<int64_t>(count_code_points(v.as_string()));
    case Value::Kind::list:
      return static_cast<int64_t>(v.as_list().size());
    case Value::Kind::dict:
      return static_cast<int64_t>(v.as_dict().size());
    case Value::Kind::undefined:
      return 0;
    default:
      type_error("object of type '" + v.type_name() + "' has no len()");
  }
}

// Python's index into a sequence of `size` (negative counts from the end); -1 when out of range.
int64_t normalize_index(int64_t i, size_t size) {
  const int64_t n = static_cast<int64_t>(size);
  if (i < 0) i += n;
  return i >= 0 && i < n ? i : -1;
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_dict()) {
    const Value* v = find(object.as_dict(), name);
    return v != nullptr ? *v : Value();
  }
  if (object.kind() == Value::Kind::namespace_object) {
    const Value* v = find(object.as_namespace().attributes, name);
    return v != nullptr ? *v : Value();
  }
  return Value();
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_dict() || object.kind() == Value::Kind::namespace_object)
    return key.is_string() ? get_attribute(object, key.as_string()) : Value();
  if ((object.is_list() || object.is_string()) && key.kind() == Value::Kind::integer) {
    if (object.is_list()) {
      const int64_t i = normalize_index(key.as_int(), object.as_list().size());
      return i < 0 ? Value() : object.as_list()[static_cast<size_t>(i)];
    }
    const std::string& s = object.as_string();
    const int64_t i = normalize_index(key.as_int(), count_code_points(s));
    if (i < 0) return Value();
    size_t begin = 0;  // the i-th code point's first byte
    for (int64_t seen = -1; begin < s.size(); ++begin)
      if ((static_cast<unsigned char>(s[begin]) & 0xC0) != 0x80 && ++seen == i) break;
    size_t end = begin + 1;
    while (end < s.size() && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) ++end;
    return Value(s.substr(begin, end - begin));
  }
  if (object.is_undefined() || object.is_list() || object.is_string()) return Value();
  type_error("'" + object.type_name() + "' object is not subscriptable");
}

// Python's seq[start:stop:step] on a list or a string.
Value slice(const Value& object, const Value& start, const Value& stop, const Value& step_value) {
  const bool is_string = object.is_string();
  if (!is_string && !object.is_list()) type_error("'" + object.type_name() + "' object cannot be sliced");
  const List items = as_items(object);
  const int64_t n = static_cast<int64_t>(items.size());
  auto bound = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (v.kind() != Value::Kind::integer) type_error(std::string("slice ") + what + " must be an integer");
    return v.as_int();
  };
  const int64_t step = bound(step_value, "step").value_or(1);
  if (step == 0) type_error("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> i, int64_t if_absent) {
    if (!i) return if_absent;
    int64_t v = *i < 0 ? *i + n : *i;
    return step > 0 ? std::clamp<int64_t>(v, 0, n) : std::clamp<int64_t>(v, -1, n - 1);
  };
  const int64_t first = clamp(bound(start, "start"), step > 0 ? 0 : n - 1);
  const int64_t last = clamp(bound(stop, "stop"), step > 0 ? n : -1);
  List picked;
  for (int64_t i = first; step > 0 ? i < last : i > last; i += step) picked.push_back(items[static_cast<size_t>(i)]);
  if (!is_string) return picked;
  std::string s;
  for (const Value& c : picked) s += c.as_string();
  return s;
}

// ---- operators

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  auto unsupported = [&]() -> Value {
    type_error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  };
  if (a.is_number() && b.is_number()) {
    const bool ints = a.kind() == Value::Kind::integer && b.kind() == Value::Kind::integer;
    const double x = a.as_double(), y = b.as_double();
    if ((op == "/" || op == "//" || op == "%") && y == 0) type_error("division by zero");
    if (op == "/") return x / y;
    if (ints) {
      const int64_t i = a.as_int(), j = b.as_int();
      if (op == "+" || op == "-" || op == "*") {
        // The builtins write the wrapped result and say whether it wrapped; r is read after.
        int64_t r = 0;
        const bool wrapped = op == "+"   ? __builtin_add_overflow(i, j, &r)
                             : op == "-" ? __builtin_sub_overflow(i, j, &r)
                                         : __builtin_mul_overflow(i, j, &r);
        if (wrapped) integer_overflow(op);
        return r;
      }
      if ((op == "//" || op == "%") && j == -1) {
        if (op == "%") return int64_t{0};
        if (i == INT64_MIN) integer_overflow(op);
        return -i;
      }
      if (op == "//") return i / j - ((i % j != 0 && (i < 0) != (j < 0)) ? 1 : 0);
      if (op == "%") return i % j != 0 && (i < 0) != (j < 0) ? i % j + j : i % j;
      if (op == "**" && j >= 0) {  // by squaring, exact
        int64_t power = 1, base = i;
        for (int64_t e = j; e > 0; e >>= 1) {
          if ((e & 1) != 0 && __builtin_mul_overflow(power, base, &power)) integer_overflow(op);
          if (e > 1 && __builtin_mul_overflow(base, base, &base)) integer_overflow(op);
        }
        return power;
      }
    }
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    if (op == "*") return x * y;
    if (op == "//") return std::floor(x / y);
    if (op == "%") return x - y * std::floor(x / y);
    if (op == "**") return std::pow(x, y);
    return unsupported();
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    check_value_size(static_cast<double>(a.as_string().size() + b.as_string().size()), "the string");
    return a.as_string() + b.as_string();
  }
  if (op == "+" && a.is_list() && b.is_list()) {
    check_value_size(list_bytes(a.as_list()) + list_bytes(b.as_list()), "the list");
    List joined = a.as_list();
    joined.insert(joined.end(), b.as_list().begin(), b.as_list().end());
    return joined;
  }
  if (op == "*" && (a.is_string() || a.is_list()) && b.kind() == Value::Kind::integer) {
    const double times = static_cast<double>(std::max<int64_t>(b.as_int(), 0));
    check_value_size(times * (a.is_string() ? static_cast<double>(a.as_string().size()) : list_bytes(a.as_list())),
                     a.is_string() ? "the repeated string" : "the repeated list");
    if (a.is_string()) {
      std::string out;
      for (int64_t i = 0; i < b.as_int(); ++i) out += a.as_string();
      return out;
    }
    List out;
    for (int64_t i = 0; i < b.as_int(); ++i) out.insert(out.end(), a.as_list().begin(), a.as_list().end());
    return out;
  }
  return unsupported();
}

bool less(const Value& a, const Value& b, const std::string& op) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  type_error("'" + op + "' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) type_error("'in <string>' requires string as left operand, not " + item.type_name());
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_dict()) return item.is_string() && find(container.as_dict(), item.as_string()) != nullptr;
  const List items = as_items(container);
  return std::find(items.begin(), items.end(), item) != items.end();
}

Value binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string left = a.str();
    const std::string right = b.str();
    check_value_size(static_cast<double>(left.size() + right.size()), "the string");
    return left + right;
  }
  if (op == "==") return a == b;
  if (op == "!=") return !(a == b);
  if (op == "<") return less(a, b, op);
  if (op == ">") return less(b, a, op);
  if (op == "<=") return !less(b, a, op);
  if (op == ">=") return !less(a, b, op);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  return arithmetic(op, a, b);
}

// ---- tests: `value is name(args)`

using TestFn = bool (*)(const Value&, const Args&);

const std::unordered_map<std::string_view, TestFn>& tests() {
  using K = Value::Kind;
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", [](const Value& v, const Args&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, const Args&) { return v.is_undefined(); }},
      {"none", [](const Value& v, const Args&) { return v.is_none(); }},
      {"boolean", [](const Value& v, const Args&) { return v.kind() == K::boolean; }},
      {"true", [](const Value& v, const Args&) { return v.kind() == K::boolean && v.as_bool(); }},
      {"false", [](const Value& v, const Args&) { return v.kind() == K::boolean && !v.as_bool(); }},
      {"string", [](const Value& v, const Args&) { return v.is_string(); }},
      {"number", [](const Value& v, const Args&) { return v.is_number() || v.kind() == K::boolean; }},
      {"integer", [](const Value& v, const Args&) { return v.kind() == K::integer; }},
      {"float", [](const Value& v, const Args&) { return v.kind() == K::floating; }},
      {"mapping", [](const Value& v, const Args&) { return v.is_dict(); }},
      {"iterable",
       [](const Value& v, const Args&) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined(); }},
      {"sequence", [](const Value& v, const Args&) { return v.is_string() || v.is_list() || v.is_dict(); }},
      {"callable", [](const Value& v, const Args&) { return v.kind() == K::function; }},
      {"equalto", [](const Value& v, const Args& a) { return v == arg(a, 0, "value"); }},
      {"eq", [](const Value& v, const Args& a) { return v == arg(a, 0, "value"); }},
      {"ne", [](const Value& v, const Args& a) { return !(v == arg(a, 0, "value")); }},
      {"sameas",
       [](const Value& v, const Args& a) { return v.kind() == arg(a, 0, "value").kind() && v == arg(a, 0, "value"); }},
      {"in", [](const Value& v, const Args& a) { return contains(arg(a, 0, "seq"), v); }},
      {"odd", [](const Value& v, const Args&) { return v.kind() == K::integer && v.as_int() % 2 != 0; }},
      {"even", [](const Value& v, const Args&) { return v.kind() == K::integer && v.as_int() % 2 == 0; }},
      {"divisibleby", [](const Value& v, const Args& a) { return !arithmetic("%", v, arg(a, 0, "num")).truthy(); }},
      {"lower",
       [](const Value& v, const Args&) {
         return v.is_string() && map_chars(v.as_string(), [](int c) { return std::tolower(c); }) == v.as_string();
       }},
      {"upper",
       [](const Value& v, const Args&) {
         return v.is_string() && map_chars(v.as_string(), [](int c) { return std::toupper(c); }) == v.as_string();
       }},
  };
  return table;
}

bool run_test(const std::string& name, const Value& v, const Args& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) type_error("unknown test '" + name + "'");
  return it->second(v, args);
}

// ---- filters: `value | name(args)`

using FilterFn = Value (*)(const Value&, const Args&);
Value run_filter(const std::string& name, const Value& v, const Args& args);

// An attribute path "a.b" of an item, as selectattr / map / join take it.
Value attribute_path(Value v, const std::string& path) {
  for (const Value& part : split(path, Value("."), -1)) v = get_attribute(v, part.as_string());
  return v;
}

// The arguments after the first `skip` positional ones.
Args rest_of(const Args& args, size_t skip) {
  Args rest;
  if (args.positional.size() > skip)
    rest.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(skip), args.positional.end());
  return rest;
}

// select / reject (by_attribute = false) and selectattr / rejectattr: keep items whose test passes (or fails).
Value select_items(const Value& v, const Args& args, bool by_attribute, bool keep) {
  List kept;
  const size_t test_at = by_attribute ? 1 : 0;
  const Value& test = arg(args, test_at, "test");
  const Args test_args = rest_of(args, test_at + 1);
  for (const Value& item : as_items(v)) {
    const Value subject = by_attribute ? attribute_path(item, string_arg(args, 0, "attribute", "selectattr")) : item;
    const bool passed = test.is_string() ? run_test(test.as_string(), subject, test_args) : subject.truthy();
    if (passed == keep) kept.push_back(item);
  }
  return kept;
}

Value to_int(const Value& v, const Value& fallback) {
  switch (v.kind()) {
    case Value::Kind::integer:
      return v;
    case Value::Kind::boolean:
      return int64_t{v.as_bool() ? 1 : 0};
    case Value::Kind::floating:
      return float_to_int(v.as_double());
    case Value::Kind::string: {
      const std::string s = strip(v.as_string(), Value(), true, true);
      char* end = nullptr;
      const double d = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) return float_to_int(d);
      [[fallthrough]];
    }
    default:
      return fallback.is_undefined() ? Value(0) : fallback;
  }
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"trim", [](const Value& v, const Args& a) { return Value(strip(v.str(), arg(a, 0, "chars"), true, true)); }},
      {"length", [](const Value& v, const Args&) { return Value(length(v)); }},
      {"count", [](const Value& v, const Args&) { return Value(length(v)); }},
      {"tojson",
       [](const Value& v, const Args& a) {
         const Value& indent = arg(a, 0, "indent");
         if (indent.kind() == Value::Kind::integer && indent.as_int() > 1024)
           type_error(detail::concat("tojson indent ", indent.as_int(), " is past 1024 (the template's limit)"));
         return Value(v.to_json(
             indent.kind() == Value::Kind::integer ? static_cast<int>(std::max<int64_t>(indent.as_int(), -1)) : -1));
       }},
      {"upper",
       [](const Value& v, const Args&) { return Value(map_chars(v.str(), [](int c) { return std::toupper(c); })); }},
      {"lower",
       [](const Value& v, const Args&) { return Value(map_chars(v.str(), [](int c) { return std::tolower(c); })); }},
      {"title", [](const Value& v, const Args&) { return Value(title(v.str())); }},
      {"capitalize", [](const Value& v, const Args&) { return Value(capitalize(v.str())); }},
      {"replace",
       [](const Value& v, const Args& a) {
         const Value& count = arg(a, 2, "count");
         return Value(replace(v.str(), string_arg(a, 0, "old", "replace"), string_arg(a, 1, "new", "replace"),
                              count.kind() == Value::Kind::integer ? count.as_int() : -1));
       }},
      {"join",
       [](const Value& v, const Args& a) {
         const Value& separator = arg(a, 0, "d");
         const Value& attribute = arg(a, 1, "attribute");
         std::string out;
         bool first = true;
         for (const Value& item : as_items(v)) {
           if (!first) out += separator.str();
           out += (attribute.is_string() ? attribute_path(item, attribute.as_string()) : item).str();
           check_value_size(static_cast<double>(out.size()), "join()'s result");
           first = false;
         }
         return Value(out);
       }},
      {"first",
       [](const Value& v, const Args&) {
         const List items = as_items(v);
         return items.empty() ? Value() : items.front();
       }},
      {"last",
       [](const Value& v, const Args&) {
         const List items = as_items(v);
         return items.empty() ? Value() : items.back();
       }},
      {"default",
       [](const Value& v, const Args& a) {
         const bool replace_falsy = arg(a, 1, "boolean").truthy();
         const Value& fallback = arg(a, 0, "default_value");
         if (v.is_undefined() || (replace_falsy && !v.truthy())) return fallback.is_undefined() ? Value("") : fallback;
         return v;
       }},
      {"items",
       [](const Value& v, const Args&) {
         if (v.is_undefined()) return Value(List{});
         if (!v.is_dict()) type_error("items expects a mapping, got '" + v.type_name() + "'");
         List pairs;
         for (const auto& [k, value] : v.as_dict()) pairs.emplace_back(List{Value(k), value});
         return Value(std::move(pairs));
       }},
      {"list", [](const Value& v, const Args&) { return Value(as_items(v)); }},
      {"string", [](const Value& v, const Args&) { return Value(v.str()); }},
      {"safe", [](const Value& v, const Args&) { return v; }},
      {"int", [](const Value& v, const Args& a) { return to_int(v, arg(a, 0, "default")); }},
      {"float",
       [](const Value& v, const Args&) {
         if (v.is_number()) return Value(v.as_double());
         const std::string s = v.str();
         char* end = nullptr;
         const double d = std::strtod(s.c_str(), &end);
         return Value(end != s.c_str() && *end == '\0' ? d : 0.0);
       }},
      {"abs",
       [](const Value& v, const Args&) {
         if (v.kind() == Value::Kind::integer) {
           if (v.as_int() == INT64_MIN) integer_overflow("abs");
           return Value(std::abs(v.as_int()));
         }
         return Value(std::fabs(v.as_double()));
       }},
      {"select", [](const Value& v, const Args& a) { return select_items(v, a, false, true); }},
      {"reject", [](const Value& v, const Args& a) { return select_items(v, a, false, false); }},
      {"selectattr", [](const Value& v, const Args& a) { return select_items(v, a, true, true); }},
      {"rejectattr", [](const Value& v, const Args& a) { return select_items(v, a, true, false); }},
      {"map",
       [](const Value& v, const Args& a) {
         List mapped;
         const Value* attribute = find(a.keyword, "attribute");
         for (const Value& item : as_items(v)) {
           if (attribute != nullptr) {
             Value picked = attribute_path(item, attribute->str());
             const Value* fallback = find(a.keyword, "default");
             mapped.push_back(picked.is_undefined() && fallback != nullptr ? *fallback : picked);
           } else {
             mapped.push_back(run_filter(string_arg(a, 0, "filter", "map"), item, rest_of(a, 1)));
           }
         }
         return Value(std::move(mapped));
       }},
  };
  return table;
}

Value run_filter(const std::string& name, const Value& v, const Args& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) type_error("unknown filter '" + name + "'");
  return it->second(v, args);
}

// ---- methods of str and dict: `value.name(args)`

std::optional<Value> call_method(const Value& object, const std::string& name, const Args& a) {
  if (object.is_string()) {
    const std::string& s = object.as_string();
    if (name == "strip") return strip(s, arg(a, 0, "chars"), true, true);
    if (name == "lstrip") return strip(s, arg(a, 0, "chars"), true, false);
    if (name == "rstrip") return strip(s, arg(a, 0, "chars"), false, true);
    if (name == "startswith") return starts_or_ends_with(s, arg(a, 0, "prefix"), true);
    if (name == "endswith") return starts_or_ends_with(s, arg(a, 0, "suffix"), false);
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize")
      return run_filter(name, object, {});
    if (name == "split") {
      const Value& max = arg(a, 1, "maxsplit");
      return split(s, arg(a, 0, "sep"), max.kind() == Value::Kind::integer ? max.as_int() : -1);
    }
    if (name == "replace") return run_filter("replace", object, a);
    if (name == "join") return run_filter("join", arg(a, 0, "iterable"), Args{{object}, {}});
  } else if (object.is_dict()) {
    if (name == "items") return run_filter("items", object, {});
    if (name == "keys") return Value(as_items(object));
    if (name == "values") {
      List values;
      for (const auto& entry : object.as_dict()) values.push_back(entry.second);
      return values;
    }
    if (name == "get") {
      const Value* v = find(object.as_dict(), string_arg(a, 0, "key", "get"));
      const Value& fallback = arg(a, 1, "default");
      return v != nullptr ? *v : fallback.is_undefined() ? Value(nullptr) : fallback;
    }
  }
  return std::nullopt;
}

// ---- Jinja's own globals

Value make_namespace(const Args& args) {
  auto ns = std::make_shared<Namespace>();
  if (!args.positional.empty() && args.positional[0].is_dict()) ns->attributes = args.positional[0].as_dict();
  for (const auto& [k, v] : args.keyword) ns->attributes.emplace_back(k, v);
  Value made(std::move(ns));
  if (made.nesting() > kMaxNesting)
    type_error(detail::concat("values nest deeper than ", kMaxNesting, " levels (the template's limit)"));
  return made;
}

Value make_range(const Args& args) {
  std::vector<int64_t> bounds;
  for (const Value& v : args.positional) {
    if (v.kind() != Value::Kind::integer) type_error("range() expects integers, got '" + v.type_name() + "'");
    bounds.push_back(v.as_int());
  }
  if (bounds.empty() || bounds.size() > 3) type_error("range() expects 1 to 3 arguments");
  const int64_t start = bounds.size() > 1 ? bounds[0] : 0;
  const int64_t stop = bounds.size() > 1 ? bounds[1] : bounds[0];
  const int64_t step = bounds.size() > 2 ? bounds[2] : 1;
  if (step == 0) type_error("range() step must not be zero");
  const double count =
      std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step)));
  check_value_size(count * sizeof(Value), "range()'s list");
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    out.emplace_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;  // the next one would be past int64: past stop
  }
  return out;
}

// ---- the interpreter

enum class Flow { normal, break_loop, continue_loop };

class Renderer {
 public:
  Renderer(const Program& program, const std::map<std::string, Value>& variables) : program_(program) {
    frames_.emplace_back();
    frames_.back()["namespace"] = Function{"namespace", make_namespace};
    frames_.back()["range"] = Function{"range", make_range};
    frames_.back()["dict"] = Function{"dict", [](const Args& a) { return Value(a.keyword); }};
    for (const auto& [name, value] : variables) frames_.back()[name] = value;
  }

  std::string run() {
    try {
      exec(program_.body);
    } catch (const EvalError& e) {
      GENESIS_THROW(ValueError, location(program_.name, program_.source, at_), e.what());
    }
    return std::move(out_);
  }

 private:
  Value lookup(const std::string& name) const {
    for (auto frame = frames_.rbegin(); frame != frames_.rend(); ++frame)
      if (const auto it = frame->find(name); it != frame->end()) return it->second;
    return Value();
  }

  Flow exec(const Body& body) {
    for (const Stmt& stmt : body)
      if (const Flow flow = exec(stmt); flow != Flow::normal) return flow;
    return Flow::normal;
  }

  // One unit of the render's work (a statement, an expression, a loop iteration): past
  // kMaxRenderSteps the template is stopped, as a loop over range(10**6) in range(10**6) must be.
  void step() {
    if (++steps_ > kMaxRenderSteps)
      type_error(detail::concat("rendering takes more than ", kMaxRenderSteps, " steps (the template's limit)"));
  }

  void output(const std::string& text) {
    if (out_.size() + text.size() > kMaxValueBytes)
      type_error(
          detail::concat("the rendered text is larger than ", kMaxValueBytes >> 20, " MiB (the template's limit)"));
    out_ += text;
  }

  Flow exec(const Stmt& stmt) {
    step();
    switch (stmt.kind) {
      case StmtKind::text:
        at_ = stmt.offset;
        output(stmt.text);
        return Flow::normal;
      case StmtKind::output:
        output(eval(*stmt.expr).str());
        return Flow::normal;
      case StmtKind::if_chain:
        for (const auto& [condition, body] : stmt.branches)
          if (eval(*condition).truthy()) return exec(body);
        return exec(stmt.else_body);
      case StmtKind::for_loop:
        return exec_for(stmt);
      case StmtKind::set:
        exec_set(stmt);
        return Flow::normal;
      case StmtKind::loop_break:
        return Flow::break_loop;
      case StmtKind::loop_continue:
        return Flow::continue_loop;
    }
    return Flow::normal;
  }

  Flow exec_for(const Stmt& stmt) {
    const Value iterable = eval(*stmt.expr);
    at_ = stmt.offset;
    List items = as_items(iterable);
    frames_.emplace_back();
    auto bind = [&](const Value& item) {
      if (stmt.targets.size() == 1) {
        frames_.back()[stmt.targets[0]] = item;
        return;
      }
      at_ = stmt.offset;
      if (!item.is_list() || item.as_list().size() != stmt.targets.size())
        type_error(
            detail::concat("cannot unpack '", item.type_name(), "' into ", stmt.targets.size(), " loop variables"));
      for (size_t t = 0; t < stmt.targets.size(); ++t) frames_.back()[stmt.targets[t]] = item.as_list()[t];
    };
    if (stmt.filter != nullptr) {  // `for x in xs if cond`: loop.* count the kept items only
      List kept;
      for (const Value& item : items) {
        step();
        bind(item);
        if (eval(*stmt.filter).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const size_t n = items.size();
    for (size_t i = 0; i < n; ++i) {
      at_ = stmt.offset;
      step();
      bind(items[i]);
      const auto count = static_cast<int64_t>(n);
      const auto index = static_cast<int64_t>(i);
      frames_.back()["loop"] = Dict{{"index", index + 1},
                                    {"index0", index},
                                    {"revindex", count - index},
                                    {"revindex0", count - index - 1},
                                    {"first", i == 0},
                                    {"last", i + 1 == n},
                                    {"length", count},
                                    {"depth", 1},
                                    {"depth0", 0},
                                    {"previtem", i > 0 ? items[i - 1] : Value()},
                                    {"nextitem", i + 1 < n ? items[i + 1] : Value()}};
      if (exec(stmt.body) == Flow::break_loop) break;
    }
    if (n == 0) exec(stmt.else_body);
    frames_.pop_back();
    return Flow::normal;
  }

  void exec_set(const Stmt& stmt) {
    Value value = eval(*stmt.expr);
    if (stmt.targets.size() == 1) {
      frames_.back()[stmt.targets[0]] = std::move(value);
      return;
    }
    const Value target = lookup(stmt.targets[0]);
    at_ = stmt.offset;
    if (target.kind() != Value::Kind::namespace_object)
      type_error("cannot assign attribute '" + stmt.targets[1] + "' on '" + stmt.targets[0] + "', a '" +
                 target.type_name() + "' and not a namespace()");
    // A namespace inside a namespace's attribute could make a cycle (ns.self = ns): never leaked, never printed
    // forever.
    if (value.holds_namespace())
      type_error("a namespace() attribute cannot hold a namespace ('" + stmt.targets[0] + "." + stmt.targets[1] + "')");
    if (1 + value.nesting() > kMaxNesting)
      type_error(detail::concat("values nest deeper than ", kMaxNesting, " levels (the template's limit)"));
    Dict& attributes = target.as_namespace().attributes;
    for (auto& [k, v] : attributes)
      if (k == stmt.targets[1]) {
        v = std::move(value);
        return;
      }
    attributes.emplace_back(stmt.targets[1], std::move(value));
  }

  Args eval_args(const Expr& e) {
    Args args;
    for (const ExprPtr& a : e.args) args.positional.push_back(eval(*a));
    for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, eval(*a));
    return args;
  }

  Value eval(const Expr& e) {
    step();
    switch (e.kind) {
      case ExprKind::literal:
        return e.literal;
      case ExprKind::name:
        return lookup(e.name);
      case ExprKind::list: {
        List items;
        for (const ExprPtr& item : e.operands) items.push_back(eval(*item));
        return items;
      }
      case ExprKind::dict: {
        Dict entries;
        for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
          Value key = eval(*e.operands[i]);
          Value value = eval(*e.operands[i + 1]);
          at_ = e.operands[i]->offset;
          if (!key.is_string()) type_error("dict keys must be strings here, got '" + key.type_name() + "'");
          entries.emplace_back(key.as_string(), std::move(value));
        }
        return entries;
      }
      case ExprKind::attribute:
        return get_attribute(eval(*e.operands[0]), e.name);
      case ExprKind::subscript: {
        const Value object = eval(*e.operands[0]);
        const Value key = eval(*e.operands[1]);
        at_ = e.offset;
        return get_item(object, key);
      }
      case ExprKind::slice: {
        auto bound = [&](size_t i) { return e.operands[i] != nullptr ? eval(*e.operands[i]) : Value(); };
        const Value object = eval(*e.operands[0]);
        const Value start = bound(1), stop = bound(2), step = bound(3);
        at_ = e.offset;
        return slice(object, start, stop, step);
      }
      case ExprKind::call:
        return eval_call(e);
      case ExprKind::filter: {
        const Value input = eval(*e.operands[0]);
        const Args args = eval_args(e);
        at_ = e.offset;
        return run_filter(e.name, input, args);
      }
      case ExprKind::test: {
        const Value subject = eval(*e.operands[0]);
        const Args args = eval_args(e);
        at_ = e.offset;
        return run_test(e.name, subject, args) != e.negated;
      }
      case ExprKind::unary: {
        const Value operand = eval(*e.operands[0]);
        at_ = e.offset;
        if (e.name == "not") return !operand.truthy();
        if (operand.kind() == Value::Kind::integer) {
          if (e.name == "-" && operand.as_int() == INT64_MIN) integer_overflow("-");
          return e.name == "-" ? -operand.as_int() : operand.as_int();
        }
        if (operand.kind() == Value::Kind::floating) return e.name == "-" ? -operand.as_double() : operand.as_double();
        type_error("bad operand type for unary " + e.name + ": '" + operand.type_name() + "'");
      }
      case ExprKind::binary: {
        const Value left = eval(*e.operands[0]);
        const Value right = eval(*e.operands[1]);
        at_ = e.offset;
        return binary(e.name, left, right);
      }
      case ExprKind::logical_and: {  // Python's: the deciding operand, not a bool
        Value left = eval(*e.operands[0]);
        return left.truthy() ? eval(*e.operands[1]) : left;
      }
      case ExprKind::logical_or: {
        Value left = eval(*e.operands[0]);
        return left.truthy() ? left : eval(*e.operands[1]);
      }
      case ExprKind::conditional:
        if (eval(*e.operands[1]).truthy()) return eval(*e.operands[0]);
        return e.operands[2] != nullptr ? eval(*e.operands[2]) : Value();
    }
    return Value();
  }

  Value eval_call(const Expr& e) {
    const Expr& callee = *e.operands[0];
    if (callee.kind == ExprKind::attribute) {  // a method of a str or a dict
      const Value object = eval(*callee.operands[0]);
      const Args args = eval_args(e);
      at_ = e.offset;
      if (std::optional<Value> result = call_method(object, callee.name, args)) return *result;
      const Value function = get_attribute(object, callee.name);
      if (function.kind() == Value::Kind::function) return function.as_function().call(args);
      type_error("'" + object.type_name() + "' object has no method '" + callee.name + "'");
    }
    const Value function = eval(callee);
    const Args args = eval_args(e);
    at_ = e.offset;
    if (function.kind() == Value::Kind::function) return function.as_function().call(args);
    if (function.is_undefined() && callee.kind == ExprKind::name) type_error("'" + callee.name + "' is undefined");
    type_error("'" + function.type_name() + "' object is not callable");
  }

  const Program& program_;
  std::vector<std::unordered_map<std::string, Value>> frames_;
  std::string out_;
  int64_t steps_ = 0;
  size_t at_ = 0;  // the source offset of the operation being applied, for error messages
};

}  // namespace

bool is_filter(std::string_view name) {
  return filters().contains(name);
}
bool is_test(std::string_view name) {
  return tests().contains(name);
}

std::string Template::render(const std::map<std::string, Value>& variables) const {
  return Renderer(*program_, variables).run();
}

}  // namespace genesis::data::jinja
