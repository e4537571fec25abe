#pragma once
// Model formats in and out of genesis: `genesis inspect` and `genesis convert`.
//   huggingface         config.json + model.safetensors (or a sharded model.safetensors.index.json)
//   genesis-checkpoint  a checkpoint directory: model.safetensors (metadata format=genesis) and either
//                       config.json (language models, Hugging Face keys) or recipe.toml (classifiers),
//                       with optimizer.safetensors + trainer.json when it comes from training
//   genesis-run         a run directory; its checkpoints/latest is used
//   classifier-export   an MLP/CNN written by `convert --to hf`: model.safetensors + config.json
//                       whose "genesis_classifier" key names the architecture
//   safetensors         a single .safetensors file (inspect only)
// A LoRA run's checkpoint holds its adapters only and names its base (trainer.json "base"):
// `--to peft` writes the adapters in PEFT's format (io/peft.h), `--to hf --merge` the base
// with the adapters merged into its weights (W + scale B A).
// Parameter names and layouts are Hugging Face's in every format (GPT-2 keeps Conv1D's [in, out]
// weights, the decoders keep transformers' rotate-half q/k layout), so conversion renames nothing:
// it validates the tensors against the model the config describes, casts, drops tied copies and
// writes the other side's metadata.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "libgenesis/core/dtype.h"
#include "libgenesis/io/hf_shards.h"

namespace genesis::io {

struct ModelSource {
  std::string format;          // huggingface, genesis-checkpoint, genesis-run, classifier-export, safetensors
  std::filesystem::path path;  // as given
  std::filesystem::path dir;   // the directory holding the weights (a run's resolved checkpoint)
  WeightSet weights;
  std::string architecture;  // gpt2, llama, qwen2, qwen3 (any config.json model_type), mlp, cnn; "" unknown
  nlohmann::json config;     // config.json, or a classifier's model section; null when unknown
  std::string recipe_toml;   // the checkpoint's (or run's) recipe.toml, when there is one
  bool training = false;     // trainer.json is present
  bool is_language_model() const { return config.is_object() && config.contains("model_type"); }
};

// Detects the format of `path`. UsageError (naming what was looked for) when it is none of them;
// FormatError / IoError for files that break their format.
ModelSource open_model_source(const std::filesystem::path& path);

// The `genesis inspect` report: format, architecture, config, every tensor (name, dtype, shape,
// bytes, file), parameter and byte totals, and for training checkpoints the step, optimizer and
// scheduler summary. Reads headers only.
nlohmann::json inspect_model(const std::filesystem::path& path);
// The report as aligned text, one tensor a line.
std::string format_inspect_report(const nlohmann::json& report);

struct ConvertOptions {
  std::string to = "";  // "hf", "genesis" or "peft"; empty: the other side of the source's format
  std::optional<DType> dtype =
      std::nullopt;  // f32, bf16 or f16 (round to nearest even); unset keeps each tensor's dtype
  uint64_t max_shard_bytes = 2'000'000'000;
  bool model_only = false;  // skip generation_config.json and tokenizer files
  bool overwrite = false;   // replace an existing destination (atomically)
  bool merge = false;       // a LoRA checkpoint to hf: merge the adapters into the base's weights
  // Told as each tensor is read for writing: tensors done and in all.
  std::function<void(int64_t done, int64_t total)> progress = {};
};

struct ConvertResult {
  std::string from_format;
  std::string to;  // "hf", "genesis" or "peft"
  std::string architecture;
  std::vector<std::filesystem::path> files;  // under the destination, relative
  int64_t tensors = 0;
  uint64_t bytes = 0;
};

// Converts `src` into the new directory `dst`, written into a temporary sibling renamed at the end
// (nothing is left at `dst` on failure). UsageError when `dst` exists without `overwrite`, for an
// unsupported model_type (listing the supported ones) or options that do not apply.
ConvertResult convert_model(const std::filesystem::path& src, const std::filesystem::path& dst,
                            const ConvertOptions& options);

// The tensors of the language model a config.json describes (Hugging Face names and shapes, as the
// genesis model holds them) and which extra checkpoint tensors the model rebuilds itself (a tied
// lm_head.weight, GPT-2's mask buffers, rotary inv_freq). Computed from the config alone, so checking
// a checkpoint allocates no model; tests tie it to models::CausalLM::state_dict(). UsageError for an
// unsupported model_type (listing the supported ones) or config.
struct LanguageModelLayout {
  std::vector<std::pair<std::string, Shape>> tensors;
  std::function<bool(const std::string&)> rebuilt;
};
LanguageModelLayout language_model_layout(const nlohmann::json& config);

// Hugging Face's config.json for a language model: the source's keys, completed with the
// architecture's canonical ones (architectures, sizes, rope_theta in both the flat and the
// transformers-5 rope_parameters form, tie_word_embeddings) and `dtype` set to `dtype`.
nlohmann::json hf_config_for(const nlohmann::json& source_config, std::optional<DType> dtype);

}  // namespace genesis::io
