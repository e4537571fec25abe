#include "libgenesis/models/llama.h"

#include "libgenesis/core/error.h"
#include "libgenesis/models/blocks.h"
#include "libgenesis/models/config_json.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/nn.h"
#include "libgenesis/ops/transformer.h"

namespace genesis::models {

namespace {

// Only the default (unscaled) RoPE is implemented: `rope` is a rope_scaling / rope_parameters
// object; returns its rope_theta when it carries one.
std::optional<double> check_default_rope(const nlohmann::json& rope, const std::string& type, const char* key) {
  std::string kind = "default";
  if (rope.contains("rope_type") && rope["rope_type"].is_string())
    kind = rope["rope_type"].get<std::string>();
  else if (rope.contains("type") && rope["type"].is_string())
    kind = rope["type"].get<std::string>();
  GENESIS_CHECK(rope.is_object() && kind == "default", UsageError, type, " config: ", key, " ", rope.dump(),
                " is not supported (supported: null or rope_type \"default\")");
  if (rope.contains("rope_theta") && rope["rope_theta"].is_number()) return rope["rope_theta"].get<double>();
  return std::nullopt;
}

}  // namespace

DecoderConfig decoder_config_from_json(std::string_view json_text) {
  const nlohmann::json json = detail::parse_config_object(json_text, "model config");
  const std::string type = detail::ConfigReader(json, "model").string("model_type");
  GENESIS_CHECK(type == "llama" || type == "qwen2" || type == "qwen3", UsageError, "model_type '", type,
                "' is not supported (supported: gpt2, llama, qwen2, qwen3)");
  const detail::ConfigReader config(json, type);
  DecoderConfig c;
  c.model_type = type;
  c.vocab_size = config.size("vocab_size");
  c.hidden_size = config.size("hidden_size");
  c.intermediate_size = config.size("intermediate_size");
  c.num_hidden_layers = config.size("num_hidden_layers");
  c.num_attention_heads = config.size("num_attention_heads");
  c.num_key_value_heads = config.size("num_key_value_heads", c.num_attention_heads);
  GENESIS_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, UsageError, type, " config: num_attention_heads (",
                c.num_attention_heads, ") must be a multiple of num_key_value_heads (", c.num_key_value_heads, ")");
  if (type == "qwen3" || config.has("head_dim")) {
    c.head_dim = config.size("head_dim", int64_t{128});
  } else {
    GENESIS_CHECK(c.hidden_size % c.num_attention_heads == 0, UsageError, type, " config: hidden_size (", c.hidden_size,
                  ") must be divisible by num_attention_heads (", c.num_attention_heads, ") or head_dim must be given");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  GENESIS_CHECK(c.head_dim % 2 == 0, UsageError, type, " config: head_dim (", c.head_dim, ") must be even for RoPE");
  c.max_position_embeddings = config.size("max_position_embeddings", type == "llama" ? 2048 : 32768);
  c.rms_norm_eps = config.number("rms_norm_eps", 1e-6);
  c.rope_theta = config.number("rope_theta", 10000.0);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (config.has(key)) {
      if (std::optional<double> theta = check_default_rope(json.at(key), type, key)) c.rope_theta = *theta;
    }
  }
  GENESIS_CHECK(c.rope_theta > 0, UsageError, type, " config: rope_theta must be positive, got ", c.rope_theta);
  c.tie_word_embeddings = config.boolean("tie_word_embeddings", false);
  const std::string act = config.string("hidden_act", "silu");
  GENESIS_CHECK(act == "silu", UsageError, type, " config: hidden_act '", act, "' is not supported (supported: silu)");
  GENESIS_CHECK(!config.boolean("mlp_bias", false), UsageError, type,
                " config: mlp_bias = true is not supported (supported: false)");
  GENESIS_CHECK(!config.boolean("use_sliding_window", false), UsageError, type,
                " config: use_sliding_window = true is not supported (supported: false, full attention)");
  if (type == "qwen2") {
    GENESIS_CHECK(config.boolean("attention_bias", true), UsageError,
                  "qwen2 config: attention_bias = false is not supported (Qwen2 always has q/k/v biases; use llama)");
  } else {
    c.attention_bias = config.boolean("attention_bias", false);
  }
  c.attention_dropout = config.number("attention_dropout", 0.0);
  GENESIS_CHECK(c.attention_dropout >= 0.0 && c.attention_dropout < 1.0, UsageError, type,
                " config: attention_dropout must be in [0, 1), got ", c.attention_dropout);
  return c;
}

class DecoderLayer final : public nn::Module {
 public:
  DecoderLayer(const DecoderConfig& c, nn::LayerOptions o)
      : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim) {
    auto attn = register_module("self_attn", std::make_shared<detail::Container>("Attention"));
    q_proj_ =
        attn->add_module("q_proj", std::make_shared<nn::Linear>(c.hidden_size, heads_ * head_dim_, c.qkv_bias(), o));
    k_proj_ =
        attn->add_module("k_proj", std::make_shared<nn::Linear>(c.hidden_size, kv_heads_ * head_dim_, c.qkv_bias(), o));
    v_proj_ =
        attn->add_module("v_proj", std::make_shared<nn::Linear>(c.hidden_size, kv_heads_ * head_dim_, c.qkv_bias(), o));
    o_proj_ =
        attn->add_module("o_proj", std::make_shared<nn::Linear>(heads_ * head_dim_, c.hidden_size, c.o_bias(), o));
    if (c.qk_norm()) {
      q_norm_ = attn->add_module("q_norm", std::make_shared<nn::RMSNorm>(Shape{head_dim_}, c.rms_norm_eps, o));
      k_norm_ = attn->add_module("k_norm", std::make_shared<nn::RMSNorm>(Shape{head_dim_}, c.rms_norm_eps, o));
    }
    auto mlp = register_module("mlp", std::make_shared<detail::Container>("SwiGLU MLP"));
    gate_proj_ =
        mlp->add_module("gate_proj", std::make_shared<nn::Linear>(c.hidden_size, c.intermediate_size, false, o));
    up_proj_ = mlp->add_module("up_proj", std::make_shared<nn::Linear>(c.hidden_size, c.intermediate_size, false, o));
    down_proj_ =
        mlp->add_module("down_proj", std::make_shared<nn::Linear>(c.intermediate_size, c.hidden_size, false, o));
    input_layernorm_ =
        register_module("input_layernorm", std::make_shared<nn::RMSNorm>(Shape{c.hidden_size}, c.rms_norm_eps, o));
    post_attention_layernorm_ = register_module("post_attention_layernorm",
                                                std::make_shared<nn::RMSNorm>(Shape{c.hidden_size}, c.rms_norm_eps, o));
  }

  Tensor forward(const Tensor&) override {
    GENESIS_THROW(NotImplementedError, "DecoderLayer needs rotary tables: call the model that owns it");
  }
  std::string describe() const override { return "DecoderLayer"; }

  // x [B, T, hidden] -> [B, T, hidden]; rope tables for the T positions ([T, D/2], or [B, T, D/2]
  // for packed rows); appends keys and values to `cache` when given; doc_start keeps attention
  // inside the documents of packed rows.
  // attention_dropout: the probability of dropping an attention weight (0 outside training).
  Tensor run(const Tensor& x, const RopeTables& rope_table, KVCache* cache, size_t layer, double attention_dropout,
             const Tensor& doc_start) {
    const int64_t batch = x.size(0), steps = x.size(1);
    Tensor normed = (*input_layernorm_)(x);
    auto heads = [&](const Tensor& t, int64_t count) {
      return t.reshape({batch, steps, count, head_dim_}).transpose(1, 2);
    };
    Tensor q = heads((*q_proj_)(normed), heads_);
    Tensor k = heads((*k_proj_)(normed), kv_heads_);
    Tensor v = heads((*v_proj_)(normed), kv_heads_);
    if (q_norm_) {
      q = (*q_norm_)(q);
      k = (*k_norm_)(k);
    }
    q = rope(q, rope_table.cos, rope_table.sin);
    k = rope(k, rope_table.cos, rope_table.sin);
    if (cache) std::tie(k, v) = detail::append_to_cache(*cache, layer, k, v);
    Tensor attended =
        scaled_dot_product_attention(q, k, v, true, std::nullopt, attention_dropout, nullptr, doc_start)
            .transpose(1, 2)
            .reshape({batch, steps, heads_ * head_dim_});
    Tensor h = add(x, (*o_proj_)(attended));
    Tensor m = (*post_attention_layernorm_)(h);
    // The down projection takes gate and up: it computes SwiGLU itself and keeps no output of it.
    return add(h, down_proj_->forward_swiglu((*gate_proj_)(m), (*up_proj_)(m)));
  }

 private:
  int64_t heads_, kv_heads_, head_dim_;
  std::shared_ptr<nn::Linear> q_proj_, k_proj_, v_proj_, o_proj_, gate_proj_, up_proj_, down_proj_;
  std::shared_ptr<nn::RMSNorm> q_norm_, k_norm_, input_layernorm_, post_attention_layernorm_;
};

DecoderLM::DecoderLM(const DecoderConfig& c, nn::LayerOptions o) : config_(c) {
  const TensorOptions options{.dtype = o.dtype, .device = o.device};
  auto model = register_module("model", std::make_shared<detail::Container>("Decoder"));
  embed_tokens_ = &model->add_module("embed_tokens", std::make_shared<detail::Container>("Embedding"))
                       ->add_parameter("weight", empty({c.vocab_size, c.hidden_size}, options));
  auto layers = model->add_module("layers", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layers_.push_back(std::make_shared<DecoderLayer>(c, o));
    layers->append(layers_.back());
  }
  norm_ = model->add_module("norm", std::make_shared<nn::RMSNorm>(Shape{c.hidden_size}, c.rms_norm_eps, o));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_tokens_;
  } else {
    lm_head_ = &register_module("lm_head", std::make_shared<detail::Container>("LM head"))
                    ->add_parameter("weight", empty({c.vocab_size, c.hidden_size}, options));
  }
  detail::init_like_hugging_face(*this, 0.02);
}

std::vector<const nn::Module*> DecoderLM::blocks() const {
  std::vector<const nn::Module*> out;
  for (const auto& block : layers_) out.push_back(block.get());
  return out;
}

Tensor DecoderLM::compute_hidden_states(const Tensor& ids, KVCache* cache, const Tensor& doc_start,
                                        const Tensor& positions) {
  const int64_t start = cache ? cache->length : 0;
  Tensor x = embedding(ids, *embed_tokens_);
  RopeTables tables =
      rope_tables(start, ids.size(1), config_.head_dim, config_.rope_theta, {.dtype = x.dtype(), .device = x.device()});
  if (positions.defined()) tables = gather_rope_tables(tables, positions);  // packed: each document from 0
  const double attention_dropout = is_training() ? config_.attention_dropout : 0.0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    x = run_block(i, *layers_[i], cache, x,
                  [layer = layers_[i], tables, cache, i, attention_dropout, doc_start](const Tensor& h) {
                    return layer->run(h, tables, cache, i, attention_dropout, doc_start);
                  });
  }
  if (cache) cache->length += ids.size(1);
  return (*norm_)(x);
}

KVCache DecoderLM::make_cache(int64_t batch, int64_t capacity) const {
  const TensorOptions options = detail::parameter_options(*this);
  KVCache cache;
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    cache.keys.push_back(empty({batch, config_.num_key_value_heads, capacity, config_.head_dim}, options));
    cache.values.push_back(empty({batch, config_.num_key_value_heads, capacity, config_.head_dim}, options));
  }
  return cache;
}

std::string to_config_json(const DecoderConfig& c) {
  const char* architecture = c.model_type == "llama"   ? "LlamaForCausalLM"
                             : c.model_type == "qwen2" ? "Qwen2ForCausalLM"
                                                       : "Qwen3ForCausalLM";
  nlohmann::json config{{"architectures", {architecture}},
                        {"model_type", c.model_type},
                        {"vocab_size", c.vocab_size},
                        {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size},
                        {"num_hidden_layers", c.num_hidden_layers},
                        {"num_attention_heads", c.num_attention_heads},
                        {"num_key_value_heads", c.num_key_value_heads},
                        {"head_dim", c.head_dim},
                        {"max_position_embeddings", c.max_position_embeddings},
                        {"rms_norm_eps", c.rms_norm_eps},
                        {"rope_theta", c.rope_theta},
                        {"rope_scaling", nullptr},
                        {"hidden_act", "silu"},
                        {"attention_dropout", c.attention_dropout},
                        {"tie_word_embeddings", c.tie_word_embeddings}};
  if (c.model_type == "qwen2") {
    config["use_sliding_window"] = false;
  } else {
    config["attention_bias"] = c.attention_bias;
  }
  if (c.model_type == "qwen3") config["use_sliding_window"] = false;
  return config.dump(2);
}

std::string DecoderLM::hf_config_json() const {
  return to_config_json(config_);
}

void DecoderLM::set_dropout(double p) {
  GENESIS_CHECK(p >= 0.0 && p < 1.0, ValueError, config_.model_type, ": dropout must be in [0, 1), got ", p);
  config_.attention_dropout = p;
}

bool DecoderLM::ignores_checkpoint_tensor(const std::string& name) const {
  return (config_.tie_word_embeddings && name == "lm_head.weight") || name.ends_with("rotary_emb.inv_freq");
}

}  // namespace genesis::models
