// genesis ops --list [--json]: the op table, with the gradient-check status of each op from the
// op-case registry (libgenesis/ops/op_cases.h).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>

#include "apps/genesis/commands.h"
#include "libgenesis/ops/op_cases.h"

namespace genesis::cli {

void add_ops_command(CLI::App& app) {
  CLI::App* sub =
      app.add_subcommand("ops", "List every operation with its family, backward, gradient-check and autocast policy");
  // The flags' storage lives as long as the registered command (CLI11 writes into it).
  struct Flags {
    bool list = false;
    bool json = false;
  };
  auto flags = std::make_shared<Flags>();
  sub->add_flag("--list", flags->list, "Print the op table as text (the default)");
  sub->add_flag("--json", flags->json, "Emit the table as JSON (fields: name, family, backward, gradcheck, autocast)");
  register_command(sub, [flags] {
    auto table = op_table();
    if (flags->json) {
      nlohmann::json out = nlohmann::json::array();
      for (const OpInfo& op : table)
        out.push_back({{"name", op.name},
                       {"family", op.family},
                       {"backward", op.backward},
                       {"gradcheck", op_gradient_checked(op_id(op))},
                       {"autocast", autocast_policy_name(op.autocast)}});
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    int n_backward = 0, n_checked = 0;
    std::printf("%-34s %-8s %-8s %-9s %s\n", "op", "family", "backward", "gradcheck", "autocast");
    for (const OpInfo& op : table) {
      const std::string_view policy = autocast_policy_name(op.autocast);
      const bool checked = op_gradient_checked(op_id(op));
      std::printf("%-34.*s %-8.*s %-8s %-9s %.*s\n", static_cast<int>(op.name.size()), op.name.data(),
                  static_cast<int>(op.family.size()), op.family.data(), op.backward ? "yes" : "-",
                  checked ? "yes" : "-", static_cast<int>(policy.size()), policy.data());
      n_backward += op.backward;
      n_checked += checked;
    }
    std::printf(
        "%zu ops: %d differentiable, %d gradient-checked by their op cases; every op has CPU and CUDA kernels\n",
        table.size(), n_backward, n_checked);
    return 0;
  });
}

}  // namespace genesis::cli
