#pragma once
// Causal language models (GPT-2, the Llama / Qwen2 / Qwen3 decoders): the interface the
// trainer, `genesis generate` and the Hugging Face loader share, a KV cache, the shifted
// next-token loss and greedy decoding.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "libgenesis/nn/module.h"
#include "libgenesis/ops/loss.h"

namespace genesis::models {

// What the decoder blocks keep for the backward while training (training.activation_checkpointing):
// every activation (none); only each block's input, the block recomputed in the backward (full);
// each block's input and its GEMM and attention results, the cheap ops between them recomputed
// (selective). Losses and gradients are the same in every mode.
enum class ActivationCheckpointing { none, full, selective };

// Keys and values of the positions seen so far: per layer [batch, kv_heads, capacity, head_dim],
// of which the first `length` positions are filled. Filled under no-grad (generation only).
struct KVCache {
  std::vector<Tensor> keys;
  std::vector<Tensor> values;
  int64_t length = 0;
  int64_t capacity() const { return keys.empty() ? 0 : keys.front().size(2); }
};

// What sharded data parallel (ZeRO-3) hangs on a model's forward: the parameters of the model
// are cut into units (unit 0: what lies outside the decoder blocks, the embeddings, final norm
// and head; unit 1 + i: decoder block i), each gathered whole just before it computes and
// released after. The model calls these around its computation; CausalLM::shard_units names the
// units' parameters.
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // Before hidden_states computes anything: unit 0 is whole when it returns.
  virtual void begin_forward() = 0;
  // Before block `block` computes x: its unit is whole when it returns. Returns x, or x through
  // a step whose backward tells the hooks that the block's backward has passed.
  virtual Tensor enter_block(size_t block, const Tensor& x) = 0;
  // After the block's forward gave y: returns y, or y through a step whose backward gathers the
  // unit again before the block's backward runs.
  virtual Tensor leave_block(size_t block, const Tensor& y) = 0;
};

class CausalLM : public nn::Module {
 public:
  // ids [B, T] (i32 or i64) -> logits [B, T, vocab_size].
  Tensor forward(const Tensor& ids) override { return forward_with_cache(ids, nullptr); }
  // With a cache, ids continue the cached sequence (positions cache->length ...), attend to the
  // cached keys, and their keys and values are appended.
  Tensor forward_with_cache(const Tensor& ids, KVCache* cache);
  // The next-token cross-entropy of ids [B, T] against targets [B, T] (position t predicts
  // targets[t]; ignore_index -100), mean or sum over the counted targets, through the fused
  // head (linear_cross_entropy): the [B, T, V] logits are never kept. Training and evaluation
  // use it. doc_start: rows that pack several documents (see hidden_states).
  Tensor loss(const Tensor& ids, const Tensor& targets, Reduction reduction = Reduction::mean,
              const Tensor& doc_start = {});
  // The final hidden states [B, T, hidden] (after the last norm) that the head maps to logits.
  // doc_start, for rows that pack several documents (data::Batch::doc_start): i32 [B, T] on the
  // model's device, where each position's document starts; attention stays inside a document
  // and positions restart at its start, so each document is computed as if alone. Not with a
  // cache. Undefined: each row is one sequence.
  Tensor hidden_states(const Tensor& ids, KVCache* cache, const Tensor& doc_start = {});
  // The head's weight [vocab_size, hidden] (the token embedding when tied, as GPT-2's is).
  virtual const Tensor& head_weight() const = 0;
  // An empty cache for `batch` sequences of up to `capacity` positions, on the model's device and dtype.
  virtual KVCache make_cache(int64_t batch, int64_t capacity) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_positions() const = 0;
  // Hugging Face's model_type ("gpt2", "llama", "qwen2", "qwen3").
  virtual std::string model_type() const = 0;
  // The model's Hugging Face config.json (JSON text): read back by causal_lm_from_config, and
  // by transformers' AutoModelForCausalLM beside the model's weights.
  virtual std::string hf_config_json() const = 0;
  // The prefix of the base model's parameters ("transformer" for GPT-2, "model" for the decoders):
  // checkpoints saved from the base model alone (GPT2Model, as the original gpt2 files are) name
  // their tensors without it.
  virtual std::string base_model_prefix() const = 0;
  // Names a Hugging Face checkpoint may hold that the model rebuilds itself (GPT-2's causal mask
  // buffers, a tied lm_head.weight): the loader skips them.
  virtual bool ignores_checkpoint_tensor(const std::string& name) const = 0;
  // Sets every dropout probability of the model (GPT-2: attention, residual and embedding;
  // Llama/Qwen: attention), applied while the model is training; p in [0, 1).
  virtual void set_dropout(double p) = 0;
  // Checkpoints every `every`-th decoder block (blocks 0, every, 2 * every, ...) while a graph is
  // recorded without a cache; every >= 1.
  void set_activation_checkpointing(ActivationCheckpointing mode, int64_t every = 1);
  ActivationCheckpointing activation_checkpointing() const { return checkpointing_; }
  // The parameters `which` selects, by sharding unit (see UnitHooks): [0] those outside the
  // decoder blocks, [1 + i] block i's. Every parameter lies in exactly one unit.
  std::vector<std::vector<Tensor>> shard_units(nn::Params which) const;
  // The same units of the tensors that hold the frozen parameters (nn::Module::frozen_storage: a
  // LoRA base's weights, QLoRA's NF4 codes and scales).
  std::vector<std::vector<Tensor>> frozen_units() const;
  // Installs (or, with null, removes) the hooks the forward calls; the model keeps them alive.
  void set_unit_hooks(std::shared_ptr<UnitHooks> hooks) { unit_hooks_ = std::move(hooks); }

 protected:
  // hidden_states for checked input: positions [B, T] (i64) given for packed rows (doc_start
  // defined), undefined otherwise (positions start at the cache's length).
  virtual Tensor compute_hidden_states(const Tensor& ids, KVCache* cache, const Tensor& doc_start,
                                       const Tensor& positions) = 0;
  // block(x) for decoder block `layer`, through a checkpoint when the model's activation
  // checkpointing picks that block (block must capture by value what it reads besides x: it may
  // run again in the backward).
  Tensor run_block(size_t layer, const nn::Module& module, const KVCache* cache, const Tensor& x,
                   std::function<Tensor(const Tensor&)> block);
  // The decoder blocks in order (what run_block's `module` is for each layer).
  virtual std::vector<const nn::Module*> blocks() const = 0;

 private:
  // Units of the tensors `of` gives for a module (the model's own for unit 0, minus the blocks').
  std::vector<std::vector<Tensor>> units_of(const std::function<std::vector<Tensor>(const nn::Module&)>& of) const;

  std::shared_ptr<UnitHooks> unit_hooks_;
  ActivationCheckpointing checkpointing_ = ActivationCheckpointing::none;
  int64_t checkpoint_every_ = 1;
};

// Mean cross-entropy of logits [B, T, V] predicting ids [B, T] shifted by one (position t
// predicts ids[t + 1]), as transformers computes `labels = input_ids`.
Tensor causal_lm_loss(const Tensor& logits, const Tensor& ids);

// Greedy decoding: appends max_new_tokens argmax tokens to prompt [B, T]; returns the new ids
// [B, max_new_tokens] (i64, CPU). With use_cache the prompt is encoded once and each step feeds
// one token; without, every step recomputes the whole sequence.
Tensor greedy_generate(CausalLM& model, const Tensor& prompt, int64_t max_new_tokens, bool use_cache = true);

namespace detail {
// Checks ids [B, T] against the model's context: T >= 1 and start + T <= max_positions.
void check_lm_input(const CausalLM& model, const Tensor& ids, int64_t start);
// Writes k, v [B, Hkv, T, D] at the end of layer `layer` of the cache and returns views of every
// filled position (the cache's length is advanced by the model after its last layer).
std::pair<Tensor, Tensor> append_to_cache(KVCache& cache, size_t layer, const Tensor& k, const Tensor& v);
}  // namespace detail

}  // namespace genesis::models
