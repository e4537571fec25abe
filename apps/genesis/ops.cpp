// genesis ops --list [--json]: the op table.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <memory>

#include "apps/genesis/commands.h"
#include "libgenesis/ops/op_table.h"

namespace genesis::cli {

void add_ops_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("ops", "List every operation with its backward/CPU/CUDA/gradient-check status");
  // The flags' storage lives as long as the registered command (CLI11 writes into it).
  struct Flags {
    bool list = false;
    bool json = false;
  };
  auto flags = std::make_shared<Flags>();
  sub->add_flag("--list", flags->list, "Print the op table as text (the default)");
  sub->add_flag("--json", flags->json, "Emit the table as JSON (fields: name, family, backward, cpu, cuda, gradcheck, autocast)");
  register_command(sub, [flags] {
    auto table = op_table();
    if (flags->json) {
      nlohmann::json out = nlohmann::json::array();
      for (const OpInfo& op : table) {
        // Every differentiable op has a finite-difference gradient check: the test
        // "every differentiable op has a gradient check" enforces it against this table.
        out.push_back({{"name", op.name},
                       {"family", op.family},
                       {"backward", op.backward},
                       {"cpu", true},
                       {"cuda", op.cuda},
                       {"gradcheck", op.backward},
                       {"autocast", autocast_policy_name(op.autocast)}});
      }
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    int n_backward = 0, n_cuda = 0;
    std::printf("%-34s %-8s %-8s %-4s %-5s %-9s %s\n", "op", "family", "backward", "cpu", "cuda", "gradcheck",
                "autocast");
    for (const OpInfo& op : table) {
      const std::string_view policy = autocast_policy_name(op.autocast);
      std::printf("%-34.*s %-8.*s %-8s %-4s %-5s %-9s %.*s\n", static_cast<int>(op.name.size()), op.name.data(),
                  static_cast<int>(op.family.size()), op.family.data(), op.backward ? "yes" : "-", "yes",
                  op.cuda ? "yes" : "-", op.backward ? "yes" : "-", static_cast<int>(policy.size()), policy.data());
      n_backward += op.backward;
      n_cuda += op.cuda;
    }
    std::printf("%zu ops: %d differentiable (each with a gradient check), %d with CUDA kernels\n", table.size(),
                n_backward, n_cuda);
    return 0;
  });
}

}  // namespace genesis::cli
