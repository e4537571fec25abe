#pragma once
// The Llama decoder family as transformers builds it (LlamaForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM): RMSNorm pre-norm blocks, rotary positions (default RoPE, rope_theta),
// grouped-query attention, SwiGLU MLP, optional q/k/v(/o) biases, Qwen3's per-head RMSNorm
// of q and k, tied or untied head. Parameter names are Hugging Face's ("model.layers.0.
// self_attn.q_proj.weight", "lm_head.weight").
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "libgenesis/models/causal_lm.h"
#include "libgenesis/nn/layers.h"

namespace genesis::models {

// Hugging Face LlamaConfig / Qwen2Config / Qwen3Config key names, read from a config.json
// (decoder_config_from_json) or from a recipe's [model] keys of the same names; the model type
// implies the rest: Qwen2 has q/k/v biases, Qwen3 normalizes q and k per head.
struct DecoderConfig {
  std::string model_type = "llama";  // llama, qwen2 or qwen3
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;     // llama, qwen3: biases on q, k, v and o (qwen2 ignores it)
  double attention_dropout = 0.0;  // attention probabilities, while training
  bool qkv_bias() const { return model_type == "qwen2" || attention_bias; }
  bool o_bias() const { return model_type != "qwen2" && attention_bias; }
  bool qk_norm() const { return model_type == "qwen3"; }
  bool operator==(const DecoderConfig&) const = default;
};

// Reads a llama / qwen2 / qwen3 config.json object (JSON text) with Hugging Face's defaults
// for absent keys. Unsupported settings (rope_scaling other than the default, hidden_act other
// than silu, mlp_bias, sliding-window attention) throw UsageError naming the key and what is
// supported.
DecoderConfig decoder_config_from_json(std::string_view json_text);
// The config as config.json text, as transformers writes it; decoder_config_from_json reads it back.
std::string to_config_json(const DecoderConfig& config);

class DecoderLayer;

class DecoderLM final : public CausalLM {
 public:
  explicit DecoderLM(const DecoderConfig& config, nn::LayerOptions options = {});
  const Tensor& head_weight() const override { return *lm_head_; }
  KVCache make_cache(int64_t batch, int64_t capacity) const override;
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_positions() const override { return config_.max_position_embeddings; }
  std::string model_type() const override { return config_.model_type; }
  std::string base_model_prefix() const override { return "model"; }
  std::string hf_config_json() const override;
  bool ignores_checkpoint_tensor(const std::string& name) const override;
  void set_dropout(double p) override;
  std::string describe() const override { return config_.model_type + " decoder"; }
  const DecoderConfig& config() const { return config_; }

 protected:
  Tensor compute_hidden_states(const Tensor& ids, KVCache* cache, const Tensor& doc_start,
                               const Tensor& positions) override;
  std::vector<const nn::Module*> blocks() const override;

 private:
  DecoderConfig config_;
  Tensor* embed_tokens_;
  Tensor* lm_head_;  // embed_tokens_ when tied
  std::vector<std::shared_ptr<DecoderLayer>> layers_;
  std::shared_ptr<nn::RMSNorm> norm_;
};

}  // namespace genesis::models
