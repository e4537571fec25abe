// Text made from the schema: the resolved recipe (RecipeSpec::to_toml) and docs/recipes.md.
#include "libgenesis/recipe/schema.h"

#include <optional>

#include <nlohmann/json.hpp>

namespace genesis {
namespace recipe {
namespace {

// The key's value; nullopt for a key of another model family than the spec's.
std::optional<Value> read_field(const KeySpec& key, RecipeSpec& spec) {
  return std::visit([](auto* member) { return member ? std::optional<Value>(*member) : std::nullopt; },
                    key.field(spec));
}

// An Optional key that the recipe leaves unset holds its type's zero value (0, "").
bool is_unset(const Value& value) {
  return std::visit([](const auto& v) { return v == std::decay_t<decltype(v)>{}; }, value);
}

// A key's value as the resolved recipe writes it: a number held as text (number_as_text) unquoted.
std::string toml_text(const KeySpec& key, const Value& value) {
  if (key.number_as_text && number_in_text(std::get<std::string>(value))) return std::get<std::string>(value);
  return format_toml_value(value);
}

std::string table_cell(std::string text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string default_cell(const KeySpec& key) {
  switch (key.presence) {
    case Presence::Required:
      return "**required**";
    case Presence::Optional:
      return "not set";
    case Presence::Defaulted:
      return std::string("`").append(format_toml_value(key.fallback)).append("`");
  }
  return "";
}

constexpr const char* kReferenceIntro = R"(# Recipe reference

<!-- Generated from the recipe schema (libgenesis/recipe/schema.cpp) by
     recipe_reference_markdown(); do not edit by hand. The test "docs/recipes.md matches the
     recipe schema" (genesis_tests "[recipe]") fails when this file is stale: it writes the
     expected text to a temporary file and prints the command that copies it here. -->

A recipe is the one configuration surface of a training run: a TOML file, plus overrides on
the command line.

```
genesis train recipe.toml --set optimizer.lr=3e-3 --set training.epochs=5
```

```toml
include = ["base.toml"]  # optional: recipes loaded first

[run]
name = "fashion-mlp"

[model]
name = "mlp"
hidden = [512, 256]

[optimizer]
name = "adamw"
lr = 1e-3

[training]
epochs = 3
```

- **Includes.** `include = ["a.toml", "b.toml"]` at the top level loads those recipes first
  (paths relative to the including file, recursively; a cycle is an error). They are merged
  section by section and key by key: a later include wins over an earlier one, and the
  including file wins over all of them.
- **Overrides.** `--set section.key=value` applies after all files. The value is read as the
  key's type: `3e-3` and `1` for floats, `true`/`false`, `[1, 2]` for lists; strings are
  taken as typed, and string lists may leave items unquoted (`[bias, norm]`). A section inside
  another (`[data.augment]`) takes its full name: `--set data.augment.flip=true`.
- **Validation.** Unknown sections and keys (with a did-you-mean suggestion), values of the
  wrong type and values out of range are errors that name the place: `file:line:col` in a
  recipe, or the `--set` argument. An int is accepted where a float is expected, not the
  reverse. Recipe errors exit with code 2.
- **Paths.** A relative path starts at the working directory. In the keys that name files
  (their type reads "path" below), `${GENESIS_DATA}` is where `data/fetch.sh` keeps what it
  fetches (`$GENESIS_DATA`, else `$GENESIS_CACHE_DIR/data`, else `$XDG_CACHE_HOME/genesis/data`,
  else `~/.cache/genesis/data`), so the project's recipes run from any directory; any other
  `${NAME}` is that environment variable (unset is an error), and a leading `~/` is the home
  directory. The resolved recipe holds the expanded paths.
- **Resolved recipe.** `RecipeSpec::to_toml()` writes every key in the order below, defaults
  included (an unset optional key appears as a comment), except the [model] keys of models
  other than `model.name` (a recipe may set them; they are ignored); reading it back gives the
  same recipe.
)";

}  // namespace
}  // namespace recipe

std::string RecipeSpec::to_toml() const {
  using namespace recipe;
  RecipeSpec copy = *this;  // KeySpec::field takes a mutable spec
  std::string out = "# genesis recipe, fully resolved: every key, defaults included\n";
  for (const SectionSpec& section : recipe_sections()) {
    out += std::string("\n[") + section.name + "]\n";
    for (const KeySpec& key : recipe_schema()) {
      if (std::string_view(key.section) != section.name) continue;
      const std::optional<Value> value = read_field(key, copy);
      if (!value) continue;
      if (key.presence == Presence::Optional && is_unset(*value))
        out += std::string("# ") + key.key + " is not set\n";
      else
        out += std::string(key.key) + " = " + toml_text(key, *value) + "\n";
    }
  }
  return out;
}

nlohmann::json recipe_json(const RecipeSpec& spec) {
  using namespace recipe;
  RecipeSpec copy = spec;  // KeySpec::field takes a mutable spec
  nlohmann::json out = nlohmann::json::object();
  // A section inside another ("data.augment") is an object inside the other's.
  auto section_object = [&out](std::string_view name) -> nlohmann::json& {
    nlohmann::json::json_pointer pointer;
    for (size_t begin = 0, end = 0; end != std::string_view::npos; begin = end + 1) {
      end = name.find('.', begin);
      pointer /= std::string(name.substr(begin, end - begin));
    }
    return out[pointer];
  };
  for (const SectionSpec& section : recipe_sections()) section_object(section.name) = nlohmann::json::object();
  for (const KeySpec& key : recipe_schema()) {
    const std::optional<Value> value = read_field(key, copy);
    if (!value) continue;
    nlohmann::json& slot = section_object(key.section)[key.key];
    if (key.presence == Presence::Optional && is_unset(*value)) slot = nullptr;
    else std::visit([&slot](const auto& v) { slot = v; }, *value);
  }
  return out;
}

std::vector<RecipeChange> recipe_changes(const RecipeSpec& before, const RecipeSpec& after) {
  using namespace recipe;
  RecipeSpec a = before, b = after;  // KeySpec::field takes a mutable spec
  std::vector<RecipeChange> changes;
  for (const KeySpec& key : recipe_schema()) {
    const std::optional<Value> va = read_field(key, a), vb = read_field(key, b);
    if (va == vb) continue;
    auto text = [&key](const std::optional<Value>& v) {
      if (!v) return std::string("(not a key of this model)");
      return key.presence == Presence::Optional && is_unset(*v) ? std::string("(not set)") : toml_text(key, *v);
    };
    changes.push_back({key.full_name(), text(va), text(vb)});
  }
  return changes;
}

std::string recipe_reference_markdown() {
  using namespace recipe;
  std::string out = kReferenceIntro;
  for (const SectionSpec& section : recipe_sections()) {
    out += std::string("\n## [") + section.name + "]\n\n" + section.doc + "\n\n";
    out += "| key | type | default | valid values | meaning |\n|---|---|---|---|---|\n";
    for (const KeySpec& key : recipe_schema()) {
      if (std::string_view(key.section) != section.name) continue;
      const std::string type = key.number_as_text ? "string or float"
                               : key.path         ? (key.type() == ValueType::String ? "path" : "path list")
                                                  : type_name(key.type());
      out += "| `" + std::string(key.key) + "` | " + type + " | " + table_cell(default_cell(key)) +
             " | " + table_cell(describe_constraint(key)) + " | " + table_cell(key.doc) + " |\n";
    }
  }
  out += "\n## Rules across keys\n\n";
  for (const RecipeRule& rule : recipe_rules()) out += std::string("- ") + rule.doc + "\n";
  return out;
}

}  // namespace genesis
