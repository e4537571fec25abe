// Values of the Jinja interpreter as Python shows them: truth, str(), repr(), json.dumps() and ==.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "libgenesis/core/error.h"
#include "libgenesis/data/jinja.h"

namespace genesis::data::jinja {

const Value* find(const Dict& dict, std::string_view key) {
  for (const auto& [k, v] : dict)
    if (k == key) return &v;
  return nullptr;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // The shortest digits that round-trip, laid out as Python's repr does: positional notation
  // for exponents in [-4, 16), otherwise d.ddde+XX.
  char buf[64];
  const auto end = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific).ptr;
  const std::string sci(buf, end);
  const size_t e = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits = sci.substr(negative ? 1 : 0, e - (negative ? 1 : 0));
  std::erase(digits, '.');
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (exponent < 0) return out + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  const size_t int_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_digits) return out + digits + std::string(int_digits - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

namespace {

// The nesting and namespace flag of a container of `items` (each a Value, or a dict's pair).
template <class Box, class Items, class ValueOf>
std::shared_ptr<const Box> boxed(Items items, ValueOf value_of) {
  auto box = std::make_shared<Box>();
  for (const auto& item : items) {
    const Value& v = value_of(item);
    box->nesting = std::max(box->nesting, 1 + v.nesting());
    box->holds_namespace = box->holds_namespace || v.holds_namespace();
  }
  if (box->nesting > kMaxNesting)
    throw EvalError(detail::concat("values nest deeper than ", kMaxNesting, " levels (the template's limit)"));
  box->items = std::move(items);
  return box;
}

}  // namespace

Value::Value(List items)
    : data_(boxed<Box<List>>(std::move(items), [](const Value& v) -> const Value& { return v; })) {}

Value::Value(Dict entries)
    : data_(boxed<Box<Dict>>(std::move(entries), [](const auto& entry) -> const Value& { return entry.second; })) {}

int Value::nesting() const {
  switch (kind()) {
    case Kind::list:
      return std::get<ListPtr>(data_)->nesting;
    case Kind::dict:
      return std::get<DictPtr>(data_)->nesting;
    case Kind::namespace_object: {  // mutable: its attributes now (they hold no namespace)
      int deepest = 0;
      for (const auto& entry : as_namespace().attributes) deepest = std::max(deepest, entry.second.nesting());
      return 1 + deepest;
    }
    default:
      return 0;
  }
}

bool Value::holds_namespace() const {
  switch (kind()) {
    case Kind::list:
      return std::get<ListPtr>(data_)->holds_namespace;
    case Kind::dict:
      return std::get<DictPtr>(data_)->holds_namespace;
    case Kind::namespace_object:
      return true;
    default:
      return false;
  }
}

double Value::as_double() const {
  return kind() == Kind::integer ? static_cast<double>(as_int()) : std::get<double>(data_);
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::undefined:
    case Kind::none:
      return false;
    case Kind::boolean:
      return as_bool();
    case Kind::integer:
      return as_int() != 0;
    case Kind::floating:
      return as_double() != 0.0;
    case Kind::string:
      return !as_string().empty();
    case Kind::list:
      return !as_list().empty();
    case Kind::dict:
      return !as_dict().empty();
    default:
      return true;
  }
}

std::string Value::type_name() const {
  static constexpr const char* kNames[] = {"undefined", "NoneType", "bool", "int",       "float",
                                           "str",       "list",     "dict", "Namespace", "function"};
  return kNames[static_cast<size_t>(kind())];
}

std::string Value::str() const {
  switch (kind()) {
    case Kind::undefined:
      return "";
    case Kind::string:
      return as_string();
    default:
      return repr();
  }
}

namespace {

// `s` between `quote`s with backslash escapes, as Python's repr() (json false) or json.dumps writes it.
void append_quoted(std::string& out, const std::string& s, char quote, bool json) {
  out += quote;
  for (const char c : s) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (json && (c == '\b' || c == '\f')) {
      out += c == '\b' ? "\\b" : "\\f";
    } else if (byte < 0x20 || (!json && byte == 0x7f)) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), json ? "\\u%04x" : "\\x%02x", byte);
      out += buf;
    } else {
      out += c;  // UTF-8 passes through (ensure_ascii=False)
    }
  }
  out += quote;
}

std::string quote_python(const std::string& s) {
  // Python prefers single quotes and switches to double ones when the text has a ' and no ".
  std::string out;
  append_quoted(out, s, s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'', false);
  return out;
}

// Text of a value past kMaxValueBytes is refused as it grows (a list may hold one large list
// many times over, and print as far more text than it takes memory).
void check_text_size(const std::string& out) {
  if (out.size() > kMaxValueBytes)
    throw EvalError(
        detail::concat("a value's text is larger than ", kMaxValueBytes >> 20, " MiB (the template's limit)"));
}

void append_json(std::string& out, const Value& v, int indent, int depth) {
  // json.dumps separators: ", " and ": " on one line; "," and ": " with an indent.
  auto newline = [&](int level) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
    check_text_size(out);
  };
  const char* comma = indent >= 0 ? "," : ", ";
  switch (v.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      out += "null";
      return;
    case Value::Kind::boolean:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::integer:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::floating: {
      const double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d);
      return;
    }
    case Value::Kind::string:
      append_quoted(out, v.as_string(), '"', true);
      return;
    case Value::Kind::list: {
      const List& items = v.as_list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += comma;
        newline(depth + 1);
        append_json(out, items[i], indent, depth + 1);
        check_text_size(out);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::dict:
    case Value::Kind::namespace_object: {
      const Dict& entries = v.is_dict() ? v.as_dict() : v.as_namespace().attributes;
      if (entries.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += comma;
        newline(depth + 1);
        append_quoted(out, entries[i].first, '"', true);
        out += ": ";
        append_json(out, entries[i].second, indent, depth + 1);
        check_text_size(out);
      }
      newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::function:
      throw EvalError("Object of type function is not JSON serializable");
  }
}

}  // namespace

std::string Value::repr() const {
  switch (kind()) {
    case Kind::undefined:
      return "";
    case Kind::none:
      return "None";
    case Kind::boolean:
      return as_bool() ? "True" : "False";
    case Kind::integer:
      return std::to_string(as_int());
    case Kind::floating:
      return float_repr(as_double());
    case Kind::string:
      return quote_python(as_string());
    case Kind::list: {
      std::string out = "[";
      for (const Value& item : as_list()) {
        out += (out.size() > 1 ? ", " : "") + item.repr();
        check_text_size(out);
      }
      return out + "]";
    }
    case Kind::dict: {
      std::string out = "{";
      for (const auto& [k, v] : as_dict()) {
        out += (out.size() > 1 ? ", " : "") + quote_python(k) + ": " + v.repr();
        check_text_size(out);
      }
      return out + "}";
    }
    case Kind::namespace_object:
      return "<Namespace " + to_json() + ">";
    case Kind::function:
      return "<function " + as_function().name + ">";
  }
  return "";
}

std::string Value::to_json(int indent) const {
  std::string out;
  append_json(out, *this, indent, 0);
  return out;
}

bool operator==(const Value& a, const Value& b) {
  using Kind = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::integer && b.kind() == Kind::integer) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::undefined:
    case Kind::none:
      return true;
    case Kind::boolean:
      return a.as_bool() == b.as_bool();
    case Kind::string:
      return a.as_string() == b.as_string();
    case Kind::list:
      return a.as_list() == b.as_list();
    case Kind::dict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x) {  // equal regardless of key order, as Python's dicts
        const Value* other = find(y, k);
        if (other == nullptr || !(*other == v)) return false;
      }
      return true;
    }
    case Kind::namespace_object:
      return &a.as_namespace() == &b.as_namespace();
    case Kind::function:
      return &a.as_function() == &b.as_function();
    default:
      return false;
  }
}

}  // namespace genesis::data::jinja
