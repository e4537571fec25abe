#pragma once
// GPT-2 (Radford et al. 2019) as transformers' GPT2LMHeadModel: learned positions, pre-LayerNorm
// blocks, GELU-tanh MLP, biases everywhere, the head tied to the token embedding. Parameter
// names and layouts are Hugging Face's, including Conv1D's [in, out] weights, so checkpoints
// load and save without conversion. Dropout where transformers has it (attention
// probabilities, the residual branches, the embeddings), while training.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "libgenesis/models/causal_lm.h"
#include "libgenesis/nn/layers.h"

namespace genesis::models {

// Hugging Face GPT2Config key names: read from a config.json (gpt2_config_from_json) or from a
// recipe's [model] keys of the same names.
struct Gpt2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_inner = 0;  // MLP width; 0 means 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  double attn_pdrop = 0.0;   // attention probabilities
  double resid_pdrop = 0.0;  // each block's two residual branches
  double embd_pdrop = 0.0;   // the summed token and position embeddings
  bool operator==(const Gpt2Config&) const = default;
};

// Reads a GPT-2 config.json object (JSON text). Unsupported settings (an activation other
// than gelu_new, untied embeddings, cross-attention, unscaled or layer-scaled attention)
// throw UsageError naming the key and what is supported.
Gpt2Config gpt2_config_from_json(std::string_view json_text);
// The config as config.json text, as transformers writes it; gpt2_config_from_json reads it back.
std::string to_config_json(const Gpt2Config& config);

class Gpt2Block;

class Gpt2LM final : public CausalLM {
 public:
  explicit Gpt2LM(const Gpt2Config& config, nn::LayerOptions options = {});
  const Tensor& head_weight() const override { return *wte_; }
  KVCache make_cache(int64_t batch, int64_t capacity) const override;
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_positions() const override { return config_.n_positions; }
  std::string model_type() const override { return "gpt2"; }
  std::string base_model_prefix() const override { return "transformer"; }
  std::string hf_config_json() const override;
  bool ignores_checkpoint_tensor(const std::string& name) const override;
  void set_dropout(double p) override;
  std::string describe() const override { return "GPT-2"; }
  const Gpt2Config& config() const { return config_; }

 protected:
  Tensor compute_hidden_states(const Tensor& ids, KVCache* cache, const Tensor& doc_start,
                               const Tensor& positions) override;
  std::vector<const nn::Module*> blocks() const override;

 private:
  Gpt2Config config_;
  Tensor* wte_;
  Tensor* wpe_;
  std::vector<std::shared_ptr<Gpt2Block>> blocks_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
};

}  // namespace genesis::models
