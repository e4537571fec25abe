#pragma once
// What `genesis generate` and `genesis chat` share: the model flags (--model / --checkpoint,
// sampling, device, dtype), loading a causal language model from a Hugging Face directory or a
// genesis checkpoint, and turning generated tokens into text as they come.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libgenesis/core/device.h"
#include "libgenesis/core/dtype.h"
#include "libgenesis/data/tokenizer.h"
#include "libgenesis/models/causal_lm.h"
#include "libgenesis/models/sampling.h"
#include "libgenesis/recipe/recipe.h"

namespace genesis::cli {

struct ModelArgs {
  std::string model_dir, checkpoint, device = "cpu";
  std::string adapter;  // a PEFT adapter directory applied to the model; "" = none
  std::string dtype;  // autocast dtype; "" = the checkpoint recipe's amp.dtype (f32 for --model)
  int64_t max_new_tokens = 64;
  models::SamplingOptions sampling;
  uint64_t seed = 0;
};

// Adds --model, --checkpoint (one of them required when the command runs: check_model_args), --adapter,
// --max-new-tokens, --temperature, --top-k, --top-p, --seed, --device and --dtype, showing the
// defaults `a` holds.
void add_model_options(CLI::App* sub, ModelArgs& a);
// Throws UsageError unless exactly one of --model / --checkpoint was given.
void check_model_args(const ModelArgs& a);

// A model ready to generate, with what it was trained with.
struct LoadedModel {
  std::shared_ptr<models::CausalLM> model;
  std::optional<data::Tokenizer> tokenizer;
  std::vector<int64_t> eos_ids;      // from config.json / generation_config.json
  std::optional<DType> autocast;     // the training recipe's amp.dtype (checkpoints)
  std::optional<RecipeSpec> recipe;  // the checkpoint's recipe.toml (checkpoints)
  std::filesystem::path checkpoint_dir;  // the one checkpoint loaded (checkpoints)
  Device device = kCPU;
};

// --model HF_DIR or --checkpoint RUN (a run directory, its checkpoints/, or one checkpoint),
// on --device. Throws UsageError naming the flag for a missing directory or a checkpoint that
// holds no language model.
LoadedModel load_model(const ModelArgs& a);

// The autocast dtype generation runs under: --dtype, else what the checkpoint trained with.
// Throws UsageError for fp16 on the CPU.
std::optional<DType> generation_autocast(const ModelArgs& a, const LoadedModel& m);

// Generated tokens as text: each token's bytes, released once their UTF-8 characters are
// complete. Tokens past the tokenizer's vocabulary (padded model rows) give nothing.
class TokenTextStream {
 public:
  explicit TokenTextStream(const data::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string push(int64_t token);
  std::string finish() { return utf8_.finish(); }

 private:
  const data::Tokenizer& tokenizer_;
  models::Utf8Stream utf8_;
};

}  // namespace genesis::cli
