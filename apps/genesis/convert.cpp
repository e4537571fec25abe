// genesis convert: a model between the Hugging Face and genesis formats (libgenesis/convert/convert.h).
#include "libgenesis/convert/convert.h"

#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/genesis/commands.h"
#include "libgenesis/core/error.h"
#include "libgenesis/train/run_log.h"

namespace genesis::cli {

void add_convert_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand(
      "convert", "Convert a model: a Hugging Face directory <-> a genesis checkpoint or run (docs/convert.md)");
  struct Args {
    std::string src, dst, to, dtype, max_shard_size = "2GB";
    bool model_only = false, overwrite = false, quiet = false, merge = false;
  };
  auto args = std::make_shared<Args>();
  sub->add_option("SRC", args->src, "Hugging Face directory, genesis checkpoint, checkpoints or run directory")
      ->required();
  sub->add_option("DST", args->dst, "New directory to write (must not exist unless --overwrite)")->required();
  sub->add_option("--to", args->to,
                  "hf, genesis or peft (a LoRA run's adapters; default: the other side of SRC's format)")
      ->check(CLI::IsMember({"hf", "genesis", "peft"}));
  sub->add_flag("--merge", args->merge, "A LoRA run to hf: the base with the adapters merged into its weights");
  sub->add_option("--dtype", args->dtype, "Cast weights to f32, bf16 or f16 (round to nearest even)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  sub->add_option("--max-shard-size", args->max_shard_size,
                  "Split model.safetensors into shards of at most this size (2GB, 500MB, 1GiB, bytes)");
  sub->add_flag("--model-only", args->model_only, "Write weights and config only (no generation config, tokenizer)");
  sub->add_flag("--overwrite", args->overwrite, "Replace DST if it exists (atomically)");
  sub->add_flag("-q,--quiet", args->quiet, "No progress or closing line on stderr");
  register_command(sub, [args] {
    io::ConvertOptions options;
    options.to = args->to;
    if (!args->dtype.empty()) options.dtype = parse_dtype(args->dtype);
    options.max_shard_bytes = io::parse_byte_size(args->max_shard_size);
    options.model_only = args->model_only;
    options.overwrite = args->overwrite;
    options.merge = args->merge;
    train::RunLog log("", args->quiet);
    options.progress = [&log](int64_t done, int64_t total) { log.progress("converting", done, total); };
    const io::ConvertResult result = io::convert_model(args->src, args->dst, options);
    log.clear_progress();
    if (!args->quiet)
      std::cerr << "converted " << result.architecture << " (" << result.from_format << " -> " << result.to
              << "): " << result.tensors << " tensors, " << result.bytes << " bytes\n";
    for (const auto& file : result.files) std::cout << (std::filesystem::path(args->dst) / file).string() << "\n";
    return 0;
  });
}

}  // namespace genesis::cli
