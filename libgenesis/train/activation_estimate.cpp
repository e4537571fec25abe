// What a language model's training step keeps besides its parameters (train/activation_estimate.h).
// Sizes are bytes per token of the micro-batch unless named otherwise; a: the compute dtype's
// bytes, r: the residual stream's.
#include "libgenesis/train/activation_estimate.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "libgenesis/models/gpt2.h"
#include "libgenesis/models/llama.h"
#include "libgenesis/ops/loss.h"
#include "libgenesis/ops/transformer.h"

namespace genesis::train::detail {

namespace {

// One decoder block, in bytes per token unless named otherwise: what it keeps in each mode (none;
// checkpointed under selective and full), what its recomputation under selective makes besides the
// kept products, and the gradients in flight at the worst point of its backward; in bytes, the
// autocast weight copies its linears keep and the largest weight gradient in flight.
struct BlockBytes {
  double none = 0, selective = 0, full = 0;
  double selective_recompute = 0, backward = 0;
  double casts = 0, weight_grad = 0;
};

// The linear layers of a block: module name, in and out features.
struct BlockLinear {
  std::string name;
  int64_t in = 0, out = 0;
};

class Estimator {
 public:
  explicit Estimator(const ActivationInputs& in)
      : in_(in),
        a_(static_cast<double>(in.act_bytes)),
        r_(static_cast<double>(in.residual_bytes)),
        tokens_(static_cast<double>(in.batch * in.seq_len)) {}

  // Whether attention runs in the flash kernels: CUDA, 16 bits, the head sizes of
  // kernels::cuda::flash_attention_supported.
  bool flash(int64_t head_dim) const {
    return in_.cuda && a_ == 2 && (head_dim == 32 || head_dim == 64 || head_dim == 96 || head_dim == 128) &&
           flash_attention_enabled();
  }
  // What attention keeps besides q, k, v and its output, for `heads` query heads.
  double attention_extra(int64_t heads, int64_t head_dim) const {
    const double h = static_cast<double>(heads), t = static_cast<double>(in_.seq_len);
    const bool dropout = in_.dropout > 0;
    if (flash(head_dim)) return 4 * h + (dropout ? h * t / 8 : 0);  // logsumexp, and the dropout mask's bits
    // The probabilities [T, T] per head: on CUDA in the compute dtype, on the CPU in f32; with
    // dropout the composite keeps the dropped ones and the mask besides.
    const double probs = in_.cuda ? a_ * h * t : 4 * h * t;
    return dropout ? probs + (4 + 1) * h * t : probs;
  }

  // An adapter's share of a block: without checkpointing its rank-r product (and with dropout the
  // dropped input, with a mask on the CPU); under selective checkpointing its two products.
  void add_adapters(BlockBytes& b, const std::vector<BlockLinear>& linears) const {
    for (const BlockLinear& l : linears) {
      const LinearLayer layer = in_.layer(l.name);
      const auto rank = static_cast<double>(layer.adapter_rank);
      if (rank == 0) continue;
      b.none += a_ * rank;
      if (in_.lora_dropout > 0) b.none += (a_ + (in_.cuda ? 0 : 1)) * static_cast<double>(l.in);
      b.selective += a_ * (rank + static_cast<double>(l.out));
    }
  }
  // The autocast copies of f32 weights that the linears' backward keeps, and the largest weight
  // gradient in flight: in the compute dtype, then widened to f32, which is added into a gradient
  // buffer where one lives between steps (else it becomes the gradient).
  void add_weights(BlockBytes& b, const std::vector<BlockLinear>& linears) const {
    for (const BlockLinear& l : linears) {
      const LinearLayer layer = in_.layer(l.name);
      const auto numel = static_cast<double>(l.in * l.out);
      if (in_.autocast && layer.weight_f32 && !layer.nf4) b.casts += a_ * numel;
      if (layer.trains)
        b.weight_grad = std::max(b.weight_grad, ((a_ != 4 ? a_ : 0) + (in_.gradient_buffers ? 4 : 0)) * numel);
    }
  }
  double keeps(const std::string& module) const { return in_.layer(module).keeps_input() ? 1.0 : 0.0; }
  // Whether linear_gelu runs fused (no adapter, not NF4): on CUDA it then keeps its output too.
  bool fused_gelu(const std::string& module) const {
    const LinearLayer l = in_.layer(module);
    return l.adapter_rank == 0 && !l.nf4;
  }

  BlockBytes gpt2_block(const models::Gpt2Config& c, int64_t index) const {
    const std::string p = "transformer.h." + std::to_string(index) + ".";
    const auto C = static_cast<double>(c.n_embd);
    const int64_t inner = c.n_inner > 0 ? c.n_inner : 4 * c.n_embd;
    const auto I = static_cast<double>(inner);
    const int64_t head_dim = c.n_embd / c.n_head;
    const double extra = attention_extra(c.n_head, head_dim);
    const std::vector<BlockLinear> linears{{p + "attn.c_attn", c.n_embd, 3 * c.n_embd},
                                           {p + "attn.c_proj", c.n_embd, c.n_embd},
                                           {p + "mlp.c_fc", c.n_embd, inner},
                                           {p + "mlp.c_proj", inner, c.n_embd}};
    const bool cpu = !in_.cuda;
    BlockBytes b;
    b.none = r_ * C + 8                                                   // x and ln_1's statistics
             + keeps(linears[0].name) * a_ * C                            // ln_1's output
             + 3 * a_ * C                                                 // q, k, v
             + (flash(head_dim) ? 1.0 : keeps(linears[1].name)) * a_ * C  // the attention's output
             + extra + r_ * C + 8                                         // h and ln_2's statistics
             + keeps(linears[2].name) * a_ * C                            // ln_2's output
             + a_ * I                                                     // the pre-activation GELU reads
             + keeps(linears[3].name) * a_ * I;                           // GELU's output
    if (cpu && in_.dropout > 0) b.none += 2 * C;                          // the residual dropouts' masks
    // Selective: the input and the products of the GEMMs and the attention (on CUDA linear_gelu's
    // output besides its pre-activation). The recomputation makes the norms' outputs, h, and on the
    // CPU the attention's contiguous q, k, v and output and GELU's output.
    const bool gelu_kept = in_.cuda && fused_gelu(linears[2].name);
    b.selective = r_ * C + 3 * a_ * C + a_ * C + extra + a_ * C + a_ * I + a_ * C + (gelu_kept ? a_ * I : 0);
    b.selective_recompute = 2 * a_ * C + r_ * C + 16 + (cpu ? 4 * a_ * C : 0) + (gelu_kept ? 0 : a_ * I);
    b.full = r_ * C;
    // The MLP's backward: the residual's gradient, GELU's input and output gradients, ln_2's.
    b.backward = r_ * C + 2 * a_ * I + a_ * C;
    add_adapters(b, linears);
    add_weights(b, linears);
    return b;
  }

  BlockBytes decoder_block(const models::DecoderConfig& c, int64_t index) const {
    const std::string p = "model.layers." + std::to_string(index) + ".";
    const auto h = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
    const int64_t q_width = c.num_attention_heads * c.head_dim, kv_width = c.num_key_value_heads * c.head_dim;
    const auto q = static_cast<double>(q_width), kv = static_cast<double>(kv_width);
    const double extra = attention_extra(c.num_attention_heads, c.head_dim);
    const std::vector<BlockLinear> linears{{p + "self_attn.q_proj", c.hidden_size, q_width},
                                           {p + "self_attn.k_proj", c.hidden_size, kv_width},
                                           {p + "self_attn.v_proj", c.hidden_size, kv_width},
                                           {p + "self_attn.o_proj", q_width, c.hidden_size},
                                           {p + "mlp.gate_proj", c.hidden_size, c.intermediate_size},
                                           {p + "mlp.up_proj", c.hidden_size, c.intermediate_size},
                                           {p + "mlp.down_proj", c.intermediate_size, c.hidden_size}};
    const double keeps_normed = std::max({keeps(linears[0].name), keeps(linears[1].name), keeps(linears[2].name)});
    const double keeps_m = std::max(keeps(linears[4].name), keeps(linears[5].name));
    // down_proj computes SwiGLU itself (ops/linalg.h's swiglu_linear) unless its base is NF4 or its
    // adapter has dropout: then h is never kept, and its backward writes h again for a moment.
    const LinearLayer down = in_.layer(linears[6].name);
    const bool fused_swiglu = !down.nf4 && !(down.adapter_rank > 0 && in_.lora_dropout > 0);
    const double keeps_swiglu_output = fused_swiglu ? 0.0 : keeps(linears[6].name);
    BlockBytes b;
    b.none = r_ * h + 4                                                     // x and the norm's statistic
             + keeps_normed * a_ * h                                        // the normed input of q, k, v
             + a_ * (q + 2 * kv)                                            // q and k (rotated), v
             + (flash(c.head_dim) ? 1.0 : keeps(linears[3].name)) * a_ * q  // the attention's output
             + extra + r_ * h + 4                                           // h and the norm's statistic
             + keeps_m * a_ * h                                             // the normed input of gate, up
             + 2 * a_ * I                                                   // gate and up, which SwiGLU reads
             + keeps_swiglu_output * a_ * I;                                // SwiGLU's output
    if (c.qk_norm())  // q_norm and k_norm keep their inputs and statistics
      b.none += a_ * (q + kv) + 4 * static_cast<double>(c.num_attention_heads + c.num_key_value_heads);
    // Selective: the input and the products of the GEMMs and the attention. The recomputation makes
    // the norms' outputs, q and k rotated (normed first in Qwen3), h, SwiGLU's output, and on the CPU
    // the attention's contiguous v and its output.
    b.selective = r_ * h + a_ * (q + 2 * kv) + a_ * q + extra + a_ * h + 2 * a_ * I + a_ * h;
    b.selective_recompute = 2 * a_ * h + a_ * (q + kv) + r_ * h + 8 + (fused_swiglu ? 0 : a_ * I) +
                            (in_.cuda ? 0 : a_ * (kv + q)) + (c.qk_norm() ? a_ * (q + kv) : 0);
    b.full = r_ * h;
    // The MLP's backward: the residual's gradient, SwiGLU's two input gradients, and h written again.
    b.backward = r_ * h + 2 * a_ * I + (fused_swiglu ? a_ * I : 0);
    add_adapters(b, linears);
    add_weights(b, linears);
    return b;
  }

  // The loss head: the last norm's input and output, then linear_cross_entropy's working memory.
  int64_t head(int64_t width, int64_t vocab, const std::string& head_module) const {
    const LinearLayer weight = in_.layer(head_module);
    const auto C = static_cast<double>(width), V = static_cast<double>(vocab);
    const double cast = in_.autocast && weight.weight_f32 ? a_ * V * C : 0;
    double bytes = tokens_ * (r_ * C + 8);  // the last block's output, kept by the final norm
    // A classifier's head reads one pooled row per example (its mean pooling an f32 copy of the states).
    if (in_.classifier_head) return static_cast<int64_t>(bytes + tokens_ * 4 * C);
    if (!in_.cuda) {
      // linear + cross_entropy: the logits in f32, kept, and their gradient beside them.
      bytes += tokens_ * ((weight.trains ? a_ * C : 0) + 8 * V) + cast;
      return static_cast<int64_t>(bytes);
    }
    // Fused on CUDA: chunks of logits padded to 64 classes, the input's gradient (f32) and the
    // weight's (f32, summed over the chunks) made in the forward and kept for the backward.
    const int64_t ld = (vocab + 63) / 64 * 64;
    const double rows = static_cast<double>(in_.batch * in_.seq_len);
    const int64_t chunk_bytes = linear_cross_entropy_chunk_bytes();
    const int64_t logits = in_.batch * in_.seq_len * ld * in_.act_bytes;
    const int64_t chunks = std::max<int64_t>(1, (logits + chunk_bytes - 1) / chunk_bytes);
    const double chunk_rows = std::ceil(rows / static_cast<double>(chunks));
    const double weight_grad = weight.trains ? 4 * static_cast<double>(ld) * C : 0;
    bytes += tokens_ * (4 * C + 4) + weight_grad;
    const double padded = ld != vocab ? a_ * static_cast<double>(ld) * C : 0;
    const double forward = tokens_ * a_ * C + chunk_rows * static_cast<double>(ld) * a_ + padded + cast;
    const double backward = (weight.trains ? 4 * V * C : 0) + tokens_ * (4 + a_) * C;
    return static_cast<int64_t>(bytes + std::max(forward, backward));
  }

  // Sums the blocks over the layers for each mode.
  template <class BlockFn>
  ModeActivations sum(int64_t layers, BlockFn block, int64_t head_bytes) const {
    double none = 0, full = 0, selective = 0, backward = 0, backward_full = 0, backward_selective = 0;
    for (int64_t i = 0; i < layers; ++i) {
      const BlockBytes b = block(i);
      const double plain = tokens_ * b.none + b.casts, gradients = tokens_ * b.backward + b.weight_grad;
      none += plain;
      backward = std::max(backward, gradients);
      const bool checkpointed = i % std::max<int64_t>(1, in_.every) == 0;
      full += checkpointed ? tokens_ * b.full : plain;
      selective += checkpointed ? tokens_ * b.selective : plain;
      // The backward of a checkpointed block rebuilds its graph first; under selective the kept
      // products are taken back, not made again.
      backward_full = std::max(backward_full, gradients + (checkpointed ? plain : 0));
      backward_selective =
          std::max(backward_selective, gradients + (checkpointed ? tokens_ * b.selective_recompute + b.casts : 0));
    }
    auto bytes = [head_bytes](double saved, double in_backward) {
      return ActivationBytes{static_cast<int64_t>(saved), head_bytes, static_cast<int64_t>(in_backward)};
    };
    return {bytes(none, backward), bytes(full, backward_full), bytes(selective, backward_selective)};
  }

 private:
  const ActivationInputs& in_;
  double a_, r_, tokens_;
};

}  // namespace

ModeActivations language_model_activations(const ActivationInputs& in) {
  const Estimator e(in);
  const std::string text = in.config.dump();
  if (in.config.value("model_type", "") == "gpt2") {
    const models::Gpt2Config c = models::gpt2_config_from_json(text);
    return e.sum(
        c.n_layer, [&](int64_t i) { return e.gpt2_block(c, i); }, e.head(c.n_embd, c.vocab_size, "transformer.wte"));
  }
  const models::DecoderConfig c = models::decoder_config_from_json(text);
  return e.sum(
      c.num_hidden_layers, [&](int64_t i) { return e.decoder_block(c, i); },
      e.head(c.hidden_size, c.vocab_size, c.tie_word_embeddings ? "model.embed_tokens" : "lm_head"));
}

}  // namespace genesis::train::detail
