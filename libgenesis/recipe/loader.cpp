// Reading recipes: TOML parsing (toml++), includes, --set overrides, validation against the
// schema, and filling RecipeSpec.
#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "libgenesis/io/file_util.h"
#include "libgenesis/io/user_paths.h"
#include "libgenesis/recipe/schema.h"

namespace genesis {
namespace recipe {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& where, const std::string& message) {
  throw RecipeError(where.empty() ? message : where + ": " + message);
}

std::string location(const std::string& file, const toml::source_region& region) {
  return file + ":" + std::to_string(region.begin.line) + ":" + std::to_string(region.begin.column);
}

std::string join(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

std::vector<std::string> section_names() {
  std::vector<std::string> names;
  for (const SectionSpec& s : recipe_sections()) names.emplace_back(s.name);
  return names;
}

bool is_section(std::string_view name) {
  auto names = section_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A section's keys, and the names of the sections inside it ("augment" of [data]).
std::vector<std::string> key_names(std::string_view section) {
  std::vector<std::string> names;
  for (const KeySpec& k : recipe_schema())
    if (section == k.section) names.emplace_back(k.key);
  for (const SectionSpec& s : recipe_sections()) {
    const std::string_view name = s.name;
    if (name.size() > section.size() + 1 && name.starts_with(section) && name[section.size()] == '.')
      names.emplace_back(name.substr(section.size() + 1));
  }
  return names;
}

// For a top-level name that is not a section: a table (`[name]`) or a value (`name = ...`).
std::string unknown_section_message(const std::string& name, bool is_table) {
  std::string msg = is_table ? "unknown section [" + name + "]" : "key '" + name + "' is outside any section";
  for (const KeySpec& k : recipe_schema())
    if (!is_table && name == k.key) return msg + "; it belongs to [" + k.section + "]";
  auto names = section_names();
  if (const std::string* near = closest_name(name, names)) return msg + "; did you mean [" + *near + "]?";
  for (const KeySpec& k : recipe_schema())
    if (name == k.key) return msg + "; '" + name + "' is a key of [" + k.section + "]";
  return msg + "; sections are " + join(names);
}

std::string unknown_key_message(const std::string& section, const std::string& key) {
  std::string msg = "unknown key '" + key + "' in [" + section + "]";
  if (key == "include") return msg + "; include goes at the top of the file, before the first [section]";
  auto names = key_names(section);
  if (const std::string* near = closest_name(key, names)) return msg + "; did you mean '" + *near + "'?";
  for (const KeySpec& k : recipe_schema())
    if (key == k.key) return msg + "; '" + key + "' belongs to [" + k.section + "]";
  // A key of another section that starts with it or is close to it ("warmup" -> scheduler.warmup_steps).
  std::vector<std::string> elsewhere;
  for (const KeySpec& k : recipe_schema())
    if (std::string(k.section) != section) elsewhere.push_back(k.key);
  const std::string* near = closest_name(key, elsewhere);
  for (const KeySpec& k : recipe_schema()) {
    if (std::string(k.section) == section) continue;
    if (std::string_view(k.key).starts_with(key + "_") || (near != nullptr && *near == k.key))
      return msg + "; did you mean " + k.section + "." + k.key + "?";
  }
  return msg + "; valid keys: " + join(names);
}

// What a TOML node holds, for "expected X, got Y" messages.
std::string describe(const toml::node& node) {
  if (auto s = node.as_string()) return "string " + format_toml_value(s->get());
  if (auto i = node.as_integer()) return "int " + std::to_string(i->get());
  if (auto f = node.as_floating_point()) return "float " + format_toml_value(f->get());
  if (auto b = node.as_boolean()) return std::string("bool ") + (b->get() ? "true" : "false");
  if (node.is_array()) return "a list";
  if (node.is_table()) return "a table";
  return "a date/time";
}

template <class T>
std::optional<T> scalar(const toml::node& node) {
  if constexpr (std::is_same_v<T, int64_t>) {
    if (auto v = node.as_integer()) return v->get();
  } else if constexpr (std::is_same_v<T, double>) {
    if (auto v = node.as_floating_point()) return v->get();
    if (auto v = node.as_integer()) return static_cast<double>(v->get());  // ints are accepted as floats
  } else if constexpr (std::is_same_v<T, bool>) {
    if (auto v = node.as_boolean()) return v->get();
  } else {
    if (auto v = node.as_string()) return v->get();
  }
  return std::nullopt;
}

// Names where a node sits: "file:line:col" in a file, the override text for --set values.
using Locate = std::function<std::string(const toml::node&)>;

template <class T>
T convert_scalar(const toml::node& node, const char* expected, const std::string& name, const Locate& locate) {
  std::optional<T> v = scalar<T>(node);
  if (!v) fail(locate(node), name + " expects " + expected + ", got " + describe(node));
  return *v;
}

template <class T>
std::vector<T> convert_list(const toml::node& node, const KeySpec& spec, const Locate& locate) {
  const toml::array* array = node.as_array();
  const char* expected = type_name(spec.type());
  if (!array) fail(locate(node), spec.full_name() + " expects a " + expected + ", got " + describe(node));
  std::vector<T> out;
  const char* element = std::is_same_v<T, int64_t> ? "an int" : std::is_same_v<T, double> ? "a float" : "a string";
  for (size_t i = 0; i < array->size(); ++i)
    out.push_back(convert_scalar<T>((*array)[i], element, spec.full_name() + "[" + std::to_string(i) + "]", locate));
  return out;
}

// A key that takes a string or a number: a number, given as one or spelled in a string (a --set
// value), becomes its shortest TOML text, so that every way of writing it reads back equal.
std::string string_or_number(const toml::node& node, const KeySpec& spec, const Locate& locate) {
  if (node.is_number()) return format_toml_value(*scalar<double>(node));
  std::string text = convert_scalar<std::string>(node, "a string or a number", spec.full_name(), locate);
  const std::optional<double> number = number_in_text(text);
  return number ? format_toml_value(*number) : text;
}

// Reads `node` as the key's type and checks it against the key's constraints.
Value convert(const toml::node& node, const KeySpec& spec, const Locate& locate) {
  Value value;
  switch (spec.type()) {
    case ValueType::Int:
      value = convert_scalar<int64_t>(node, "an int", spec.full_name(), locate);
      break;
    case ValueType::Float:
      value = convert_scalar<double>(node, "a float", spec.full_name(), locate);
      break;
    case ValueType::Bool:
      value = convert_scalar<bool>(node, "a bool", spec.full_name(), locate);
      break;
    case ValueType::String:
      value = spec.number_as_text ? string_or_number(node, spec, locate)
                                  : convert_scalar<std::string>(node, "a string", spec.full_name(), locate);
      break;
    case ValueType::IntList:
      value = convert_list<int64_t>(node, spec, locate);
      break;
    case ValueType::FloatList:
      value = convert_list<double>(node, spec, locate);
      break;
    case ValueType::StringList:
      value = convert_list<std::string>(node, spec, locate);
      break;
  }
  if (std::string problem = constraint_violation(spec, value); !problem.empty()) fail(locate(node), problem);
  return value;
}

struct Entry {
  Value value;
  std::string where;  // where the winning value was set
};

// What makes two paths the same file, for cycle detection.
fs::path identity_of(const fs::path& path) {
  std::error_code error;
  fs::path identity = fs::weakly_canonical(path, error);
  return error ? path.lexically_normal() : identity;
}

class Loader {
 public:
  void load_file(const fs::path& path, const std::string& display, const std::string& included_at) {
    fs::path identity = identity_of(path);
    for (size_t i = 0; i < stack_.size(); ++i) {
      if (stack_[i].identity != identity) continue;
      std::vector<std::string> chain;
      for (size_t j = i; j < stack_.size(); ++j) chain.push_back(stack_[j].display);
      chain.push_back(display);
      fail(included_at, "include cycle: " + join(chain, " -> "));
    }
    // A file reached again through another include (a diamond) is read once: re-reading would
    // apply its values a second time and made chains of duplicate includes exponential.
    if (!loaded_.insert(identity).second) return;
    if (loaded_.size() > kMaxRecipeFiles)
      fail(included_at, "more than " + std::to_string(kMaxRecipeFiles) + " recipe files included; simplify the includes");
    // A regular file of at most kMaxRecipeBytes: a FIFO or device is refused without blocking
    // (/dev/zero as an include was read to 2.2 GB).
    const std::string cannot_read =
        (included_at.empty() ? "cannot read recipe file '" : "cannot read included recipe '") + display + "'";
    std::string text;
    std::error_code ec;
    if (!fs::exists(path, ec)) fail(included_at, cannot_read);
    try {
      text = io::read_file(path, kMaxRecipeBytes);
    } catch (const IoError& e) {
      fail(included_at, cannot_read + ": " + e.what());
    }
    load_text(text, display, identity);
  }

  void load_text(std::string_view text, const std::string& display, const fs::path& identity) {
    stack_.push_back({identity, display});
    toml::table table;
    try {
      table = toml::parse(text, display);
    } catch (const toml::parse_error& e) {
      fail(location(display, e.source()), std::string(e.description()));
    }
    load_includes(table, display);
    load_entries(table, display);
    stack_.pop_back();
  }

  void apply_override(const std::string& text) {
    const std::string where = "--set " + text;
    size_t eq = text.find('=');
    // The key is what follows the last dot before '=': sections hold dots ("data.augment.flip").
    size_t dot = eq == std::string::npos ? std::string::npos : text.rfind('.', eq);
    if (eq == std::string::npos || dot == std::string::npos) fail(where, "expected section.key=value");
    std::string section = text.substr(0, dot);
    std::string key = text.substr(dot + 1, eq - dot - 1);
    std::string raw = text.substr(eq + 1);
    if (!is_section(section)) fail(where, unknown_section_message(section, true));
    if (is_section(section + "." + key))
      fail(where,
           "[" + section + "." + key + "] is a section: set its keys, --set " + section + "." + key + ".KEY=value");
    const KeySpec* spec = find_key(section, key);
    if (!spec) fail(where, unknown_key_message(section, key));
    entries_[spec->full_name()] = {override_value(*spec, raw, where), where};
  }

  const std::map<std::string, Entry>& entries() const { return entries_; }

 private:
  struct Open {
    fs::path identity;
    std::string display;
  };
  static constexpr size_t kMaxRecipeFiles = 256;
  static constexpr size_t kMaxRecipeBytes = size_t{1} << 20;  // 1 MiB: recipes are a few KB
  std::set<fs::path> loaded_;  // files read so far, by identity

  void load_includes(const toml::table& table, const std::string& display) {
    const toml::node* includes = table.get("include");
    if (!includes) return;
    const toml::array* list = includes->as_array();
    if (!list)
      fail(location(display, includes->source()), "include expects a list of file names, got " + describe(*includes));
    for (const toml::node& item : *list) {
      const toml::value<std::string>* name = item.as_string();
      if (!name) fail(location(display, item.source()), "include expects file names, got " + describe(item));
      fs::path resolved = (fs::path(display).parent_path() / name->get()).lexically_normal();
      load_file(resolved, resolved.string(), location(display, item.source()));
    }
  }

  void load_entries(const toml::table& table, const std::string& display) {
    struct Found {
      const toml::key* key;
      const toml::node* node;
      std::string section;
    };
    // Checked in file order, so the first mistake in the file is the one reported.
    std::vector<Found> found;
    // A section's keys, and those of the sections inside it ([data.augment] is the table
    // `augment` in the table `data`).
    std::function<void(const std::string&, const toml::key&, const toml::node&)> collect =
        [&](const std::string& section, const toml::key& name, const toml::node& node) {
          const toml::table* keys = node.as_table();
          if (!keys) fail(location(display, name.source()), "[" + section + "] must be a table, got " + describe(node));
          for (auto&& [key, value] : *keys) {
            const std::string inner = section + "." + std::string(key.str());
            if (is_section(inner))
              collect(inner, key, value);
            else
              found.push_back({&key, &value, section});
          }
        };
    for (auto&& [name, node] : table) {
      if (name.str() == "include") continue;
      std::string section(name.str());
      if (!is_section(section))
        fail(location(display, name.source()), unknown_section_message(section, node.is_table()));
      collect(section, name, node);
    }
    std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
      const auto &pa = a.key->source().begin, &pb = b.key->source().begin;
      return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
    });
    Locate locate = [&display](const toml::node& n) { return location(display, n.source()); };
    for (const Found& f : found) {
      std::string key(f.key->str());
      const KeySpec* spec = find_key(f.section, key);
      if (!spec) fail(location(display, f.key->source()), unknown_key_message(f.section, key));
      entries_[spec->full_name()] = {convert(*f.node, *spec, locate), location(display, f.key->source())};
    }
  }

  // An override value is read as TOML ("3e-3", "true", "[1, 2]"), except that strings are
  // taken as typed and a string list may leave its items unquoted ("[bias, norm]").
  static Value override_value(const KeySpec& spec, const std::string& raw, const std::string& where) {
    Locate locate = [&where](const toml::node&) { return where; };
    if (spec.type() == ValueType::String) return convert(toml::value<std::string>(raw), spec, locate);
    toml::table parsed;
    bool ok = true;
    try {
      parsed = toml::parse("value = " + raw);
    } catch (const toml::parse_error&) {
      ok = false;
    }
    if (ok && parsed.size() == 1 && parsed.contains("value")) return convert(*parsed.get("value"), spec, locate);
    if (spec.type() == ValueType::StringList && raw.size() >= 2 && raw.front() == '[' && raw.back() == ']') {
      toml::array items;
      std::stringstream inner(raw.substr(1, raw.size() - 2));
      for (std::string item; std::getline(inner, item, ',');) {
        size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
        if (b != std::string::npos && e > b && item[b] == '"' && item[e] == '"') ++b, --e;  // a quoted item
        items.push_back(b == std::string::npos ? std::string() : item.substr(b, e - b + 1));
      }
      return convert(items, spec, locate);
    }
    fail(where, spec.full_name() + " expects " + (spec.type() == ValueType::Int ? "an " : "a ") +
                    type_name(spec.type()) + ", got '" + raw + "'");
  }

  std::vector<Open> stack_;
  std::map<std::string, Entry> entries_;
};

// A path key's value with ${NAME} and ~/ expanded (io/user_paths.h); a recipe error at `where`.
void expand_paths(std::string& path, const KeySpec& key, const std::string& where) {
  try {
    path = io::expand_path(path);
  } catch (const ValueError& e) {
    fail(where, key.full_name() + ": " + e.what());
  }
}
void expand_paths(std::vector<std::string>& paths, const KeySpec& key, const std::string& where) {
  for (std::string& path : paths) expand_paths(path, key, where);
}

RecipeSpec build(const std::map<std::string, Entry>& entries, const std::string& top_file) {
  RecipeSpec spec;
  std::vector<std::string> missing;
  for (const KeySpec& key : recipe_schema()) {
    auto it = entries.find(key.full_name());
    const bool given = it != entries.end();
    if (!given && key.presence == Presence::Required) {
      missing.push_back(key.full_name());
      continue;
    }
    std::visit(
        [&](auto* member) {
          using T = std::remove_pointer_t<decltype(member)>;
          if (member == nullptr) return;  // a key of another model family
          if (given)
            *member = std::get<T>(it->second.value);
          else if (key.presence == Presence::Optional)
            *member = T{};  // not set, whatever the default of the config type that holds it
          else
            *member = std::get<T>(key.fallback);
          if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::vector<std::string>>)
            if (key.path) expand_paths(*member, key, given ? it->second.where : top_file);
        },
        key.field(spec));
    if (key.after_set) key.after_set(spec);
  }
  if (!missing.empty())
    fail(top_file,
         std::string(missing.size() == 1 ? "missing required key " : "missing required keys ") + join(missing));
  for (const RecipeRule& rule : recipe_rules()) {
    std::string problem = rule.violation(spec);
    if (problem.empty()) continue;
    std::string where = top_file;
    for (const char* anchor : rule.anchors) {
      if (auto it = entries.find(anchor); it != entries.end()) {
        where = it->second.where;
        break;
      }
    }
    fail(where, problem);
  }
  return spec;
}

}  // namespace
}  // namespace recipe

RecipeSpec load_recipe(const std::filesystem::path& path, const std::vector<std::string>& overrides) {
  recipe::Loader loader;
  loader.load_file(path, path.string(), "");
  for (const std::string& o : overrides) loader.apply_override(o);
  return recipe::build(loader.entries(), path.string());
}

RecipeSpec parse_recipe(std::string_view toml_text, const std::string& source_name,
                        const std::vector<std::string>& overrides) {
  recipe::Loader loader;
  loader.load_text(toml_text, source_name, recipe::identity_of(source_name));
  for (const std::string& o : overrides) loader.apply_override(o);
  return recipe::build(loader.entries(), source_name);
}

}  // namespace genesis
