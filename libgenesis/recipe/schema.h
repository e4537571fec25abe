#pragma once
// The recipe schema: every section and key declared once, as data. The loader validates
// against it, fills RecipeSpec through each key's `field`, to_toml() writes in its order,
// and docs/recipes.md is generated from it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "libgenesis/recipe/recipe.h"

namespace genesis::recipe {

// The alternatives of Value and FieldRef follow this order.
enum class ValueType { Int, Float, Bool, String, IntList, FloatList, StringList };

using Value = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>,
                           std::vector<std::string>>;
using FieldRef = std::variant<int64_t*, double*, bool*, std::string*, std::vector<int64_t>*, std::vector<double>*,
                              std::vector<std::string>*>;

enum class Presence {
  Defaulted,  // absent -> `fallback`
  Required,   // absent -> error
  Optional,   // absent -> 0 or "" in the spec (an int key whose valid values start at 1, or a
              // string key that refuses "")
};

// Bounds on a number, or on each element of a number list.
struct Bound {
  double value;
  bool inclusive;
};

struct KeySpec {
  const char* section;
  const char* key;
  Presence presence = Presence::Defaulted;
  Value fallback{};
  std::optional<Bound> min{};
  std::optional<Bound> max{};
  std::vector<std::string> choices{};  // allowed strings, when not empty
  int list_length = -1;                // exact list length, when >= 0
  // Extra check for a format the fields above cannot say; returns the problem or "".
  std::string (*check)(const Value&) = nullptr;
  const char* check_doc = nullptr;  // what `check` accepts, for messages and docs
  // A String key that also takes a TOML number; a number (given either way) is kept as its
  // shortest TOML text ("1024" -> "1024.0") and written back unquoted.
  bool number_as_text = false;
  // A String or StringList key naming files: its values go through io::expand_path (${NAME},
  // ${GENESIS_DATA}, a leading ~/) when the recipe is built, its default included.
  bool path = false;
  const char* doc = "";
  // Where the key's value lives; a null pointer when the spec's model family has no such key
  // (a key of another family: read, checked and ignored, and left out of the resolved recipe).
  FieldRef (*field)(RecipeSpec&) = nullptr;
  // Runs after the loader sets the key (model.name: makes model.config that family's, which the
  // keys after it fill).
  void (*after_set)(RecipeSpec&) = nullptr;

  ValueType type() const;
  std::string full_name() const { return std::string(section) + "." + key; }
};

struct SectionSpec {
  const char* name;
  const char* doc;
};

// A rule that spans several keys; `violation` returns the problem or "".
struct RecipeRule {
  // "section.key" names; the error points at the first one the recipe sets.
  std::vector<const char*> anchors;
  const char* doc;
  std::string (*violation)(const RecipeSpec&);
};

const std::vector<SectionSpec>& recipe_sections();
const std::vector<KeySpec>& recipe_schema();
const std::vector<RecipeRule>& recipe_rules();
const KeySpec* find_key(std::string_view section, std::string_view key);

const char* type_name(ValueType type);
// Why `value` (of the key's type) is not valid for `spec`, or "" when it is.
std::string constraint_violation(const KeySpec& spec, const Value& value);
// The valid values in words ("> 0", "one of: sgd, adam, adamw"); "" when any value goes.
std::string describe_constraint(const KeySpec& spec);
// The candidate closest to `name` by edit distance, if close enough to be a likely typo.
const std::string* closest_name(std::string_view name, const std::vector<std::string>& candidates);
// The number a whole string spells ("1024", "6.5e4"), if it spells one.
std::optional<double> number_in_text(const std::string& text);
// A value as TOML text: strings quoted and escaped, floats always with '.' or exponent,
// printed so that reading them back gives the same double.
std::string format_toml_value(const Value& value);

}  // namespace genesis::recipe
