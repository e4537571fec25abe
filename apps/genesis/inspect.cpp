// genesis inspect: what a model file or directory holds, from headers only (libgenesis/io/convert.h).
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/genesis/commands.h"
#include "libgenesis/io/convert.h"

namespace genesis::cli {

void add_inspect_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "inspect", "Format, architecture, config and tensors of a safetensors file, model or checkpoint directory");
  auto path = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  sub->add_option("PATH", *path, "A .safetensors file, Hugging Face directory, checkpoint or run directory")
      ->required();
  sub->add_flag("--json", *as_json, "Print the report as JSON");
  register_command(sub, [path, as_json] {
    const nlohmann::json report = io::inspect_model(*path);
    std::cout << (*as_json ? report.dump(2) + "\n" : io::format_inspect_report(report));
    return 0;
  });
}

}  // namespace genesis::cli
