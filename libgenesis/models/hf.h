#pragma once
// Hugging Face model directories: config.json picks and configures the model (model_type gpt2,
// llama, qwen2 or qwen3), and the weights come from model.safetensors or the shards listed in
// model.safetensors.index.json (any of f32 / f16 / bf16, cast to the model's dtype).
#include <filesystem>
#include <memory>
#include <string_view>

#include "libgenesis/models/causal_lm.h"
#include "libgenesis/nn/layers.h"

namespace genesis::models {

// A freshly initialized model from config.json text. Unknown model_type or unsupported
// settings throw UsageError listing what is supported.
std::shared_ptr<CausalLM> causal_lm_from_config(std::string_view config_json, nn::LayerOptions options = {});

// Copies the weights of the Hugging Face directory `dir` into `model` (cast to its dtype, moved
// to its device). Strict: missing, unexpected and mis-shaped tensors are all listed in one
// error; tensors the model rebuilds itself (a tied lm_head.weight, GPT-2's mask buffers) are skipped.
void load_hf_weights(CausalLM& model, const std::filesystem::path& dir);

// Writes `model` as a Hugging Face directory: config.json and model.safetensors (the parameters
// under their Hugging Face names, in their dtype), which load_hf_model and transformers read.
// The directory is created when missing.
void save_hf_model(const CausalLM& model, const std::filesystem::path& dir);

// The parameters the model of config.json text holds (a tied head counted once), computed from
// the config alone, without building the model.
double config_parameter_count(std::string_view config_json);

// A fingerprint of the model directory's config.json and weights that tells one base model from
// another in a fraction of a second however large: FNV-1a over config.json, each weight file's
// name, size and safetensors header, and 64 KiB of its bytes at every 64 MiB (and its last 64 KiB).
// Equal for copies of a directory; a fine-tune of the same architecture differs in the samples.
std::string model_dir_fingerprint(const std::filesystem::path& dir);
// causal_lm_from_config(dir/config.json) + load_hf_weights(dir). Before building the model, its
// config is checked against the weight files' headers: a config describing a far larger model
// than the weights hold (a damaged or mismatched config.json) is a UsageError naming both counts,
// not gigabytes allocated for a model that cannot load.
std::shared_ptr<CausalLM> load_hf_model(const std::filesystem::path& dir, nn::LayerOptions options = {});

}  // namespace genesis::models
