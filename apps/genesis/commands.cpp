#include "apps/genesis/commands.h"

#include <map>

namespace genesis::cli {

namespace {
std::map<CLI::App*, CommandFn>& registry() {
  static std::map<CLI::App*, CommandFn> commands;
  return commands;
}
}  // namespace

void register_command(CLI::App* sub, CommandFn run) { registry()[sub] = std::move(run); }

int run_selected(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands()) {
    auto it = registry().find(sub);
    if (it != registry().end()) return it->second();
  }
  return 2;
}

}  // namespace genesis::cli
