#pragma once
// A small interpreter of the Jinja subset that Hugging Face chat templates use, with the
// settings transformers renders them with (trim_blocks, lstrip_blocks, loop controls).
//
// The template text is parsed once into an AST (jinja_parse.cpp) and rendered by a tree-walking
// interpreter (jinja_render.cpp) over Values: Python's none/bool/int/float/str/list/dict, plus
// Jinja's undefined (an unknown name or missing key: empty when printed, falsy) and namespace
// (the one mutable object templates have: `{% set ns.count = ns.count + 1 %}`).
// Errors are ValueErrors "chat template <name>: line L, column C: <what>".
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace genesis::data::jinja {

// Limits that no real chat template comes near, so that a hostile one (tokenizer_config.json is
// downloaded) ends in a ValueError naming the limit instead of a stack overflow, memory
// exhaustion or an endless render.
inline constexpr int kMaxNesting = 256;                     // blocks, expressions, nested values
inline constexpr size_t kMaxValueBytes = size_t{64} << 20;  // a string, a list, the output
inline constexpr int64_t kMaxRenderSteps = 5'000'000;       // statements, expressions, iterations

class Value;
using List = std::vector<Value>;
// Keys in insertion order, as a Python dict keeps them (items() and tojson show that order).
using Dict = std::vector<std::pair<std::string, Value>>;

// The arguments of a call, a filter or a test (after the filtered / tested value).
struct Args {
  std::vector<Value> positional;
  Dict keyword;
};

// A function a template can call: raise_exception, strftime_now, namespace, range.
struct Function {
  std::string name;
  std::function<Value(const Args&)> call;
};

// Attributes of a namespace() object: shared, so that `set ns.x` inside a loop is seen after it.
struct Namespace {
  Dict attributes;
};

class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, floating, string, list, dict, namespace_object, function };

  Value() = default;  // undefined
  Value(std::nullptr_t) : data_(None{}) {}
  Value(bool b) : data_(b) {}
  Value(int i) : data_(int64_t{i}) {}
  Value(int64_t i) : data_(i) {}
  Value(double d) : data_(d) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(std::string_view s) : data_(std::string(s)) {}
  // A list or dict nested deeper than kMaxNesting throws EvalError.
  Value(List items);
  Value(Dict entries);
  Value(std::shared_ptr<Namespace> ns) : data_(std::move(ns)) {}
  Value(Function f) : data_(std::make_shared<const Function>(std::move(f))) {}

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::undefined; }
  bool is_none() const { return kind() == Kind::none; }
  bool is_string() const { return kind() == Kind::string; }
  bool is_number() const { return kind() == Kind::integer || kind() == Kind::floating; }
  bool is_list() const { return kind() == Kind::list; }
  bool is_dict() const { return kind() == Kind::dict; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_double() const;  // an int or a float
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const List& as_list() const { return std::get<ListPtr>(data_)->items; }
  const Dict& as_dict() const { return std::get<DictPtr>(data_)->items; }
  Namespace& as_namespace() const { return *std::get<std::shared_ptr<Namespace>>(data_); }
  const Function& as_function() const { return *std::get<FunctionPtr>(data_); }

  // Python's truth: undefined, none, false, 0, 0.0, "" and empty containers are false.
  bool truthy() const;
  // How deep containers nest in this value (0 for a scalar, 1 for a flat list), and whether a
  // namespace() is inside it (a namespace attribute may not hold one: no cycles).
  int nesting() const;
  bool holds_namespace() const;
  // What {{ value }} prints: strings as they are, True/False, None, 1.0, ['a', 1], {'k': 'v'}.
  std::string str() const;
  // Python's repr(): strings quoted ('it\'s' as Python writes "it's").
  std::string repr() const;
  // Python's json.dumps(value, ensure_ascii=False, indent=indent); indent < 0 is one line.
  std::string to_json(int indent = -1) const;
  // Python's type name, for error messages: 'str', 'int', 'list', 'undefined'...
  std::string type_name() const;

  friend bool operator==(const Value& a, const Value& b);

 private:
  struct None {};
  // A container with its nesting, computed once when it is made (containers are immutable).
  template <class Items>
  struct Box {
    Items items;
    int nesting = 1;
    bool holds_namespace = false;
  };
  using ListPtr = std::shared_ptr<const Box<List>>;
  using DictPtr = std::shared_ptr<const Box<Dict>>;
  using FunctionPtr = std::shared_ptr<const Function>;
  // The order of the alternatives is the order of Kind.
  std::variant<std::monostate, None, bool, int64_t, double, std::string, ListPtr, DictPtr, std::shared_ptr<Namespace>,
               FunctionPtr>
      data_;
};

// The entry of `key` in a dict, or nullptr.
const Value* find(const Dict& dict, std::string_view key);
// Python's repr() of a float: 1.0, 0.1, 1e+16, 1.5e-05, inf, nan.
std::string float_repr(double d);

// A type or argument error while rendering; the interpreter adds the template's name and position.
class EvalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Program;  // the parsed template (jinja_ast.h)

class Template {
 public:
  // Throws ValueError "chat template <name>: line L, column C: <what>" for text it cannot parse.
  static Template parse(std::string_view source, std::string name);
  // Renders with `variables` as the template's globals (unknown names are undefined); errors,
  // raise_exception's included, are ValueErrors naming the template and the position.
  std::string render(const std::map<std::string, Value>& variables) const;
  const std::string& name() const;

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace genesis::data::jinja
