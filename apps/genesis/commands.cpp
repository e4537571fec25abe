#include "apps/genesis/commands.h"

#include <cctype>
#include <map>

#include "libgenesis/recipe/schema.h"

namespace genesis::cli {

namespace {
constexpr int kNoCommand = -1;
}  // namespace

namespace {
std::map<CLI::App*, CommandFn>& registry() {
  static std::map<CLI::App*, CommandFn> commands;
  return commands;
}
}  // namespace

void register_command(CLI::App* sub, CommandFn run) { registry()[sub] = std::move(run); }

int run_selected(CLI::App& app) {
  // The deepest parsed subcommand with a registered function (e.g. "recipe show").
  for (CLI::App* sub : app.get_subcommands()) {
    if (int code = run_selected(*sub); code != kNoCommand) return code;
    auto it = registry().find(sub);
    if (it != registry().end()) return it->second();
  }
  return kNoCommand;
}

CLI::Validator device_validator() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (value == "cpu" || value == "cuda" || value == "auto") return "";
        if (value.starts_with("cuda:") && value.size() > 5) {
          bool digits = true;
          for (char c : value.substr(5)) digits &= std::isdigit(static_cast<unsigned char>(c)) != 0;
          if (digits) return "";
        }
        return "'" + value + "' is not a device; use cpu, cuda, cuda:N or auto";
      },
      "cpu|cuda|cuda:N|auto");
}

std::string unknown_command_message(CLI::App& app, const std::string& word) {
  if (word.empty() || word.starts_with("-")) return "";
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == word) return "";
    names.push_back(sub->get_name());
  }
  const std::string* near = recipe::closest_name(word, names);
  return "unknown command '" + word + "'" + (near ? "; did you mean '" + *near + "'?" : "") +
         " (genesis --help lists the commands)";
}

}  // namespace genesis::cli
