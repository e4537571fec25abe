// genesis inspect: what a model file or directory holds, from headers only (libgenesis/convert/convert.h).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/genesis/commands.h"
#include "libgenesis/data/shards.h"
#include "libgenesis/convert/convert.h"

namespace genesis::cli {

namespace {

// A token shard's header (genesis's or llm.c's) and its largest id (one pass over the mapped tokens).
nlohmann::ordered_json inspect_token_shard(const std::string& path) {
  const data::TokenShard shard(path);
  nlohmann::ordered_json report;
  report["path"] = path;
  report["format"] = shard.format() == data::ShardFormat::genesis ? "genesis token shard (GENTOKEN, version 1)"
                                                                 : "llm.c token shard (20240520, version 1)";
  report["tokens"] = shard.size();
  report["token_bytes"] = shard.token_bytes();
  if (shard.format() == data::ShardFormat::genesis) report["vocab_size"] = shard.vocab_size();  // u64, unsigned
  report["max_token"] = shard.checked_max_token();
  return report;
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "inspect", "Format, architecture, config and tensors of a safetensors file, model or checkpoint directory, or the "
      "header of a token shard");
  auto path = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  sub->add_option("PATH", *path, "A .safetensors file, Hugging Face directory, checkpoint or run directory, or a token shard")
      ->required();
  sub->add_flag("--json", *as_json, "Print the report as JSON");
  register_command(sub, [path, as_json] {
    if (data::looks_like_token_shard(*path)) {
      const nlohmann::ordered_json report = inspect_token_shard(*path);
      if (*as_json) {
        std::cout << report.dump(2) << "\n";
      } else {
        for (const auto& [key, value] : report.items())
          std::printf("%-14s%s\n", key.c_str(), value.is_string() ? value.get<std::string>().c_str() : value.dump().c_str());
      }
      return 0;
    }
    const nlohmann::json report = io::inspect_model(*path);
    std::cout << (*as_json ? report.dump(2) + "\n" : io::format_inspect_report(report));
    return 0;
  });
}

}  // namespace genesis::cli
