#include "libgenesis/models/gpt2.h"

#include <cmath>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/models/blocks.h"
#include "libgenesis/models/config_json.h"
#include "libgenesis/nn/init.h"
#include "libgenesis/nn/lora.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/index.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/nn.h"
#include "libgenesis/ops/transformer.h"

namespace genesis::models {

Gpt2Config gpt2_config_from_json(std::string_view json_text) {
  const nlohmann::json json = detail::parse_config_object(json_text, "gpt2 config");
  const detail::ConfigReader config(json, "gpt2");
  const std::string type = config.string("model_type", "gpt2");
  GENESIS_CHECK(type == "gpt2", UsageError, "gpt2 config: model_type is '", type, "', expected 'gpt2'");
  Gpt2Config c;
  c.vocab_size = config.size("vocab_size");
  c.n_positions = config.size("n_positions", c.n_positions);
  c.n_embd = config.size("n_embd");
  c.n_layer = config.size("n_layer");
  c.n_head = config.size("n_head");
  c.n_inner = config.has("n_inner") ? config.size("n_inner") : 0;
  c.layer_norm_epsilon = config.number("layer_norm_epsilon", c.layer_norm_epsilon);
  c.attn_pdrop = config.number("attn_pdrop", 0.0);
  c.resid_pdrop = config.number("resid_pdrop", 0.0);
  c.embd_pdrop = config.number("embd_pdrop", 0.0);
  for (const auto& [key, value] : {std::pair{"attn_pdrop", c.attn_pdrop}, std::pair{"resid_pdrop", c.resid_pdrop},
                                   std::pair{"embd_pdrop", c.embd_pdrop}})
    GENESIS_CHECK(value >= 0.0 && value < 1.0, UsageError, "gpt2 config: ", key, " must be in [0, 1), got ", value);
  GENESIS_CHECK(c.n_embd % c.n_head == 0, UsageError, "gpt2 config: n_embd (", c.n_embd,
                ") must be divisible by n_head (", c.n_head, ")");
  const std::string activation = config.string("activation_function", "gelu_new");
  GENESIS_CHECK(activation == "gelu_new" || activation == "gelu_pytorch_tanh", UsageError,
                "gpt2 config: activation_function '", activation,
                "' is not supported (supported: gelu_new, gelu_pytorch_tanh)");
  GENESIS_CHECK(config.boolean("tie_word_embeddings", true), UsageError,
                "gpt2 config: tie_word_embeddings = false is not supported (GPT-2's head is tied to wte)");
  GENESIS_CHECK(!config.boolean("add_cross_attention", false), UsageError,
                "gpt2 config: add_cross_attention is not supported (decoder-only models)");
  GENESIS_CHECK(config.boolean("scale_attn_weights", true), UsageError,
                "gpt2 config: scale_attn_weights = false is not supported (attention is scaled by 1/sqrt(head_dim))");
  GENESIS_CHECK(!config.boolean("scale_attn_by_inverse_layer_idx", false), UsageError,
                "gpt2 config: scale_attn_by_inverse_layer_idx = true is not supported");
  return c;
}

namespace {

// Hugging Face's Conv1D: y = x W + b with W stored [in, out], a LoRA target like nn::Linear. One
// linear over the transposed view of W: the rows of x stay one GEMM (the weight gradient too,
// instead of a batched GEMM plus a reduction), and under autocast the bias joins the
// low-precision product as torch.addmm's does.
class Conv1D final : public nn::LoraTarget {
 public:
  Conv1D(int64_t in, int64_t out, TensorOptions options)
      : nn::LoraTarget(empty({in, out}, options), zeros({out}, options), /*transposed=*/true) {}
  // gelu_tanh(forward(x)): with the weight as it is stored and no adapter, in one op, the bias and
  // GELU riding on the GEMM (a cuBLASLt epilogue on CUDA); otherwise GELU follows the sum.
  Tensor forward_gelu(const Tensor& x) {
    if (!lora_ && !nf4()) return linear_gelu(x, stored_weight().t(), *bias());
    return gelu(forward(x), GeluApproximation::tanh);
  }
  std::string describe() const override {
    return "Conv1D(" + std::to_string(in_features()) + " -> " + std::to_string(out_features()) + ")";
  }
};

}  // namespace

class Gpt2Block final : public nn::Module {
 public:
  Gpt2Block(const Gpt2Config& c, TensorOptions options) : heads_(c.n_head), head_dim_(c.n_embd / c.n_head) {
    const nn::LayerOptions layer{.dtype = options.dtype, .device = options.device};
    const int64_t inner = c.n_inner > 0 ? c.n_inner : 4 * c.n_embd;
    ln_1_ =
        register_module("ln_1", std::make_shared<nn::LayerNorm>(Shape{c.n_embd}, c.layer_norm_epsilon, true, layer));
    auto attn = register_module("attn", std::make_shared<detail::Container>("GPT2Attention"));
    c_attn_ = attn->add_module("c_attn", std::make_shared<Conv1D>(c.n_embd, 3 * c.n_embd, options));
    attn_proj_ = attn->add_module("c_proj", std::make_shared<Conv1D>(c.n_embd, c.n_embd, options));
    ln_2_ =
        register_module("ln_2", std::make_shared<nn::LayerNorm>(Shape{c.n_embd}, c.layer_norm_epsilon, true, layer));
    auto mlp = register_module("mlp", std::make_shared<detail::Container>("GPT2MLP"));
    c_fc_ = mlp->add_module("c_fc", std::make_shared<Conv1D>(c.n_embd, inner, options));
    mlp_proj_ = mlp->add_module("c_proj", std::make_shared<Conv1D>(inner, c.n_embd, options));
  }

  Tensor forward(const Tensor& x) override { return run(x, nullptr, 0, {}, {}); }
  std::string describe() const override { return "GPT2Block"; }

  // The dropout probabilities a block applies (zero outside training).
  struct Dropout {
    double attention = 0.0, residual = 0.0;
  };

  // x [B, T, C] -> [B, T, C]; appends this layer's keys and values to `cache` when given;
  // doc_start keeps attention inside the documents of packed rows.
  Tensor run(const Tensor& x, KVCache* cache, size_t layer, Dropout drop, const Tensor& doc_start) {
    const int64_t batch = x.size(0), steps = x.size(1), width = x.size(2);
    std::vector<Tensor> qkv = split((*c_attn_)((*ln_1_)(x)), width, 2);
    auto heads = [&](const Tensor& t) { return t.reshape({batch, steps, heads_, head_dim_}).transpose(1, 2); };
    Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    if (cache) std::tie(k, v) = detail::append_to_cache(*cache, layer, k, v);
    Tensor attended = scaled_dot_product_attention(q, k, v, true, std::nullopt, drop.attention, nullptr, doc_start)
                          .transpose(1, 2)
                          .reshape({batch, steps, width});
    Tensor h = add(x, dropout((*attn_proj_)(attended), drop.residual));
    Tensor hidden = c_fc_->forward_gelu((*ln_2_)(h));
    return add(h, dropout((*mlp_proj_)(hidden), drop.residual));
  }

 private:
  int64_t heads_, head_dim_;
  std::shared_ptr<nn::LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<Conv1D> c_attn_, attn_proj_, c_fc_, mlp_proj_;
};

Gpt2LM::Gpt2LM(const Gpt2Config& c, nn::LayerOptions o) : config_(c) {
  const TensorOptions options{.dtype = o.dtype, .device = o.device};
  auto transformer = register_module("transformer", std::make_shared<detail::Container>("GPT2Model"));
  wte_ = &transformer->add_module("wte", std::make_shared<detail::Container>("Embedding"))
              ->add_parameter("weight", empty({c.vocab_size, c.n_embd}, options));
  wpe_ = &transformer->add_module("wpe", std::make_shared<detail::Container>("Embedding"))
              ->add_parameter("weight", empty({c.n_positions, c.n_embd}, options));
  auto layers = transformer->add_module("h", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.n_layer; ++i) {
    blocks_.push_back(std::make_shared<Gpt2Block>(c, options));
    layers->append(blocks_.back());
  }
  ln_f_ =
      transformer->add_module("ln_f", std::make_shared<nn::LayerNorm>(Shape{c.n_embd}, c.layer_norm_epsilon, true, o));
  detail::init_like_hugging_face(*this, 0.02);
  // GPT-2 scales the residual projections by 1/sqrt(2 * n_layer) at initialization.
  NoGradGuard no_grad;
  for (NamedTensor& p : named_parameters())
    if (p.name.ends_with("c_proj.weight"))
      nn::init::normal_(p.tensor, 0.0, 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer)));
}

std::vector<const nn::Module*> Gpt2LM::blocks() const {
  std::vector<const nn::Module*> out;
  for (const auto& block : blocks_) out.push_back(block.get());
  return out;
}

Tensor Gpt2LM::compute_hidden_states(const Tensor& ids, KVCache* cache, const Tensor& doc_start,
                                     const Tensor& packed_positions) {
  const int64_t start = cache ? cache->length : 0;
  const Tensor positions = packed_positions.defined()
                               ? packed_positions
                               : arange(static_cast<double>(start), static_cast<double>(start + ids.size(1)), 1.0,
                                        {.dtype = DType::i64, .device = ids.device()});
  const bool training = is_training();
  const Gpt2Block::Dropout drop{training ? config_.attn_pdrop : 0.0, training ? config_.resid_pdrop : 0.0};
  Tensor x = dropout(add(embedding(ids, *wte_), embedding(positions, *wpe_)), training ? config_.embd_pdrop : 0.0);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    x = run_block(i, *blocks_[i], cache, x, [block = blocks_[i], cache, i, drop, doc_start](const Tensor& h) {
      return block->run(h, cache, i, drop, doc_start);
    });
  }
  if (cache) cache->length += ids.size(1);
  return (*ln_f_)(x);
}

KVCache Gpt2LM::make_cache(int64_t batch, int64_t capacity) const {
  const TensorOptions options = detail::parameter_options(*this);
  const int64_t head_dim = config_.n_embd / config_.n_head;
  KVCache cache;
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    cache.keys.push_back(empty({batch, config_.n_head, capacity, head_dim}, options));
    cache.values.push_back(empty({batch, config_.n_head, capacity, head_dim}, options));
  }
  return cache;
}

std::string to_config_json(const Gpt2Config& c) {
  nlohmann::json config{{"architectures", {"GPT2LMHeadModel"}},
                        {"model_type", "gpt2"},
                        {"vocab_size", c.vocab_size},
                        {"n_positions", c.n_positions},
                        {"n_embd", c.n_embd},
                        {"n_layer", c.n_layer},
                        {"n_head", c.n_head},
                        {"n_inner", nullptr},
                        {"layer_norm_epsilon", c.layer_norm_epsilon},
                        {"activation_function", "gelu_new"},
                        {"tie_word_embeddings", true},
                        {"resid_pdrop", c.resid_pdrop},
                        {"embd_pdrop", c.embd_pdrop},
                        {"attn_pdrop", c.attn_pdrop}};
  if (c.n_inner > 0) config["n_inner"] = c.n_inner;
  return config.dump(2);
}

std::string Gpt2LM::hf_config_json() const {
  return to_config_json(config_);
}

void Gpt2LM::set_dropout(double p) {
  GENESIS_CHECK(p >= 0.0 && p < 1.0, ValueError, "gpt2: dropout must be in [0, 1), got ", p);
  config_.attn_pdrop = config_.resid_pdrop = config_.embd_pdrop = p;
}

bool Gpt2LM::ignores_checkpoint_tensor(const std::string& name) const {
  return name == "lm_head.weight" || name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

}  // namespace genesis::models
