// Reading the benchmark suite with toml++; every error names the file and line.
#include "apps/genesis/bench_suite.h"

#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "libgenesis/core/error.h"

namespace genesis::cli::bench {
namespace {

std::string where_of(const std::string& file, const toml::node& node) {
  return file + ":" + std::to_string(node.source().begin.line);
}

[[noreturn]] void fail(const std::string& where, const std::string& message) {
  throw UsageError("bench suite " + where + ": " + message);
}

Shape read_shape(const toml::node& node, const std::string& where) {
  const toml::array* dims = node.as_array();
  if (!dims) fail(where, "each entry of 'shapes' must be a list of integers, e.g. [4096, 4096]");
  Shape shape;
  for (const toml::node& d : *dims) {
    auto v = d.value<int64_t>();
    if (!d.is_integer() || !v || *v < 1) fail(where, "shape dimensions must be positive integers");
    shape.push_back(*v);
  }
  return shape;
}

std::vector<int64_t> read_ints(const toml::node& node, const std::string& where, const char* key) {
  const toml::array* items = node.as_array();
  if (!items) fail(where, std::string("'") + key + "' must be a list of integers");
  std::vector<int64_t> out;
  for (const toml::node& item : *items) {
    if (!item.is_integer()) fail(where, std::string("'") + key + "' must be a list of integers");
    out.push_back(*item.value<int64_t>());
  }
  return out;
}

BenchCase read_case(const toml::table& table, const std::string& file, const std::vector<std::string>& known_ops) {
  static const std::set<std::string> keys{"name", "op",     "shapes",  "dtypes",     "backward", "axes",
                                          "dim",  "scalar", "variant", "check_rows", "tolerance"};
  BenchCase c;
  c.where = where_of(file, table);
  const std::string& where = c.where;
  for (const auto& [key, value] : table) {
    std::string k(key.str());
    std::string at = where_of(file, value);
    if (!keys.count(k))
      fail(at, "unknown key '" + k +
                   "' (valid: name, op, shapes, dtypes, backward, axes, dim, scalar, variant, check_rows, tolerance)");
    if (k == "name" || k == "op" || k == "variant") {
      auto s = value.value<std::string>();
      if (!s || s->empty()) fail(at, "'" + k + "' must be a non-empty string");
      (k == "name" ? c.name : k == "op" ? c.op : c.variant) = *s;
    } else if (k == "shapes") {
      const toml::array* list = value.as_array();
      if (!list || list->empty()) fail(at, "'shapes' must be a non-empty list of shapes");
      for (const toml::node& s : *list) c.shapes.push_back(read_shape(s, at));
    } else if (k == "dtypes") {
      const toml::array* list = value.as_array();
      if (!list || list->empty()) fail(at, "'dtypes' must be a non-empty list such as [\"f32\", \"bf16\"]");
      for (const toml::node& d : *list) {
        auto s = d.value<std::string>();
        std::optional<DType> dt = s ? parse_dtype(*s) : std::nullopt;
        if (!dt || !is_floating(*dt)) fail(at, "dtypes must be floating types (f32, f64, f16, bf16)");
        c.dtypes.push_back(*dt);
      }
    } else if (k == "backward") {
      if (!value.is_boolean()) fail(at, "'backward' must be true or false");
      c.backward = *value.value<bool>();
    } else if (k == "axes") {
      c.axes = read_ints(value, at, "axes");
    } else if (k == "dim" || k == "check_rows") {
      if (!value.is_integer()) fail(at, "'" + k + "' must be an integer");
      (k == "dim" ? c.dim : c.check_rows) = *value.value<int64_t>();
    } else {  // scalar, tolerance
      auto v = value.value<double>();
      if (!v || !(value.is_integer() || value.is_floating_point())) fail(at, "'" + k + "' must be a number");
      (k == "scalar" ? c.scalar : c.tolerance) = *v;
    }
  }
  if (c.name.empty()) fail(where, "the case has no 'name'");
  if (c.op.empty()) fail(where, "case '" + c.name + "' has no 'op'");
  if (std::find(known_ops.begin(), known_ops.end(), c.op) == known_ops.end()) {
    std::string list;
    for (const std::string& op : known_ops) list += (list.empty() ? "" : ", ") + op;
    fail(where, "case '" + c.name + "': unknown op '" + c.op + "' (known: " + list + ")");
  }
  if (c.shapes.empty()) fail(where, "case '" + c.name + "' has no 'shapes'");
  if (c.dtypes.empty()) c.dtypes = {DType::f32, DType::bf16};
  if (c.check_rows < 0) fail(where, "case '" + c.name + "': check_rows must be >= 0");
  if (c.check_rows > 0 && c.backward) fail(where, "case '" + c.name + "': check_rows applies to forward cases only");
  return c;
}

}  // namespace

std::vector<BenchCase> load_suite(const std::string& path, const std::vector<std::string>& known_ops) {
  GENESIS_CHECK(std::filesystem::is_regular_file(path), UsageError, "bench suite '", path,
                "' does not exist (the default suite is recipes/bench/ops.toml)");
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    fail(path + ":" + std::to_string(e.source().begin.line), std::string(e.description()));
  }
  for (const auto& [key, value] : root)
    if (key.str() != "case")
      fail(where_of(path, value), "unknown top-level key '" + std::string(key.str()) + "'; cases are [[case]] tables");
  const toml::array* cases = root["case"].as_array();
  if (!cases || cases->empty()) fail(path, "no [[case]] tables");
  std::vector<BenchCase> out;
  std::set<std::string> names;
  for (const toml::node& node : *cases) {
    const toml::table* table = node.as_table();
    if (!table) fail(where_of(path, node), "'case' must be an array of tables ([[case]])");
    out.push_back(read_case(*table, path, known_ops));
    if (!names.insert(out.back().name).second) fail(out.back().where, "duplicate case name '" + out.back().name + "'");
  }
  return out;
}

std::string shape_text(const std::vector<Shape>& shapes) {
  std::string out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i) out += ", ";
    for (size_t d = 0; d < shapes[i].size(); ++d) out.append(d ? "x" : "").append(std::to_string(shapes[i][d]));
  }
  return out;
}

}  // namespace genesis::cli::bench
