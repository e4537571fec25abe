#include "apps/genesis/commands.h"

#include <map>

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

}  // namespace genesis::cli
