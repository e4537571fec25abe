#include "libgenesis/models/causal_lm.h"

#include <set>

#include "libgenesis/autograd/checkpoint.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/index.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/loss.h"
#include "libgenesis/ops/reduce.h"

namespace genesis::models {

Tensor CausalLM::forward_with_cache(const Tensor& ids, KVCache* cache) {
  return linear(hidden_states(ids, cache), head_weight());
}

Tensor CausalLM::hidden_states(const Tensor& ids, KVCache* cache, const Tensor& doc_start) {
  detail::check_lm_input(*this, ids, cache ? cache->length : 0);
  if (unit_hooks_) unit_hooks_->begin_forward();
  if (!doc_start.defined()) return compute_hidden_states(ids, cache, {}, {});
  GENESIS_CHECK(cache == nullptr, ValueError, "causal LM: packed rows (doc_start) cannot use a KV cache");
  GENESIS_CHECK(doc_start.shape() == ids.shape() && doc_start.dtype() == DType::i32, ShapeError,
                "causal LM: doc_start must be i32 ", ids.shape(), " like the ids, got ", dtype_name(doc_start.dtype()), " ",
                doc_start.shape());
  // A position's place in its document: t - doc_start[b, t].
  const Tensor positions =
      sub(arange(0.0, static_cast<double>(ids.size(1)), 1.0, {.dtype = DType::i64, .device = ids.device()}),
          doc_start.to(DType::i64));
  return compute_hidden_states(ids, nullptr, doc_start, positions);
}

Tensor CausalLM::loss(const Tensor& ids, const Tensor& targets, Reduction reduction, const Tensor& doc_start) {
  GENESIS_CHECK(targets.shape() == ids.shape(), ShapeError, "causal LM loss: targets ", targets.shape(),
                " must match ids ", ids.shape());
  Tensor hidden = hidden_states(ids, nullptr, doc_start);
  const int64_t rows = hidden.size(0) * hidden.size(1);
  return linear_cross_entropy(hidden.reshape({rows, hidden.size(2)}), head_weight(), targets.reshape({rows}),
                              {.reduction = reduction});
}

void CausalLM::set_activation_checkpointing(ActivationCheckpointing mode, int64_t every) {
  GENESIS_CHECK(every >= 1, ValueError, model_type(), ": activation checkpointing every ", every,
                " blocks: it must be >= 1");
  checkpointing_ = mode;
  checkpoint_every_ = every;
}

Tensor CausalLM::run_block(size_t layer, const nn::Module& module, const KVCache* cache, const Tensor& x,
                           std::function<Tensor(const Tensor&)> block) {
  const bool checkpointed = checkpointing_ != ActivationCheckpointing::none && cache == nullptr && grad_enabled() &&
                            static_cast<int64_t>(layer) % checkpoint_every_ == 0;
  const Tensor input = unit_hooks_ ? unit_hooks_->enter_block(layer, x) : x;
  Tensor y;
  if (!checkpointed) {
    y = block(input);
  } else {
    const CheckpointOptions options{.keep_products = checkpointing_ == ActivationCheckpointing::selective,
                                    .inner_requires_grad = !module.parameters(nn::Params::trainable).empty()};
    y = checkpoint([run = std::move(block)](const TensorList& in) { return TensorList{run(in[0])}; }, {input},
                   options)[0];
  }
  return unit_hooks_ ? unit_hooks_->leave_block(layer, y) : y;
}

std::vector<std::vector<Tensor>> CausalLM::units_of(
    const std::function<std::vector<Tensor>(const nn::Module&)>& of) const {
  const std::vector<const nn::Module*> layers = blocks();
  std::vector<std::vector<Tensor>> units(1 + layers.size());
  std::set<const TensorImpl*> in_blocks;
  for (size_t i = 0; i < layers.size(); ++i) {
    units[1 + i] = of(*layers[i]);
    for (const Tensor& p : units[1 + i]) in_blocks.insert(p.impl_ptr().get());
  }
  for (const Tensor& p : of(*this))
    if (!in_blocks.contains(p.impl_ptr().get())) units[0].push_back(p);
  return units;
}

std::vector<std::vector<Tensor>> CausalLM::shard_units(nn::Params which) const {
  return units_of([which](const nn::Module& m) { return m.parameters(which); });
}

std::vector<std::vector<Tensor>> CausalLM::frozen_units() const {
  return units_of([](const nn::Module& m) { return m.frozen_storage(); });
}

Tensor causal_lm_loss(const Tensor& logits, const Tensor& ids) {
  GENESIS_CHECK(logits.dim() == 3 && ids.dim() == 2 && logits.size(0) == ids.size(0) && logits.size(1) == ids.size(1),
                ShapeError, "causal_lm_loss: logits must be [B, T, V] and ids [B, T], got ", logits.shape(), " and ",
                ids.shape());
  const int64_t batch = ids.size(0), steps = ids.size(1) - 1, vocab = logits.size(2);
  GENESIS_CHECK(steps >= 1, ShapeError, "causal_lm_loss: sequences need at least 2 tokens, got ", ids.shape());
  Tensor predictions = logits.narrow(1, 0, steps).reshape({batch * steps, vocab});
  Tensor targets = ids.narrow(1, 1, steps).reshape({batch * steps});
  return cross_entropy(predictions, targets);
}

Tensor greedy_generate(CausalLM& model, const Tensor& prompt, int64_t max_new_tokens, bool use_cache) {
  GENESIS_CHECK(max_new_tokens >= 0, ValueError, "generate: max_new_tokens must be >= 0 (got ", max_new_tokens, ")");
  GENESIS_CHECK(prompt.dim() == 2 && prompt.size(1) >= 1, ShapeError,
                "generate: prompt must be [B, T] with T >= 1, got ", prompt.shape());
  const int64_t total = prompt.size(1) + max_new_tokens;
  GENESIS_CHECK(total <= model.max_positions(), ValueError, "generate: prompt (", prompt.size(1), " tokens) plus ",
                max_new_tokens, " new tokens exceeds the model's context of ", model.max_positions(), " positions");
  NoGradGuard no_grad;
  const Device device = model.parameters().front().device();
  Tensor sequence = prompt.to(DType::i64).to(device);
  KVCache cache = use_cache ? model.make_cache(prompt.size(0), total) : KVCache{};
  Tensor step_input = sequence;
  std::vector<Tensor> generated;
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    Tensor logits = use_cache ? model.forward_with_cache(step_input, &cache) : model.forward(sequence);
    Tensor last = logits.narrow(1, logits.size(1) - 1, 1).to(kCPU);
    Tensor next = argmax(last, 2);  // [B, 1]
    generated.push_back(next);
    step_input = next.to(device);
    if (!use_cache) sequence = cat({sequence, step_input}, 1);
  }
  if (generated.empty()) return empty({prompt.size(0), 0}, {.dtype = DType::i64});
  return cat(generated, 1);
}

namespace detail {

void check_lm_input(const CausalLM& model, const Tensor& ids, int64_t start) {
  GENESIS_CHECK(ids.dim() == 2 && ids.size(1) >= 1, ShapeError, model.model_type(),
                ": input ids must be [batch, seq] with seq >= 1, got shape ", ids.shape());
  GENESIS_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32, DTypeError, model.model_type(),
                ": input ids must be i32 or i64, got ", dtype_name(ids.dtype()));
  GENESIS_CHECK(start + ids.size(1) <= model.max_positions(), ValueError, model.model_type(), ": positions ", start,
                "..", start + ids.size(1) - 1, " exceed the model's context of ", model.max_positions(),
                " positions (shorten seq_len or the prompt)");
}

std::pair<Tensor, Tensor> append_to_cache(KVCache& cache, size_t layer, const Tensor& k, const Tensor& v) {
  GENESIS_CHECK(layer < cache.keys.size(), ValueError, "KV cache: layer ", layer, " is missing (the cache has ",
                cache.keys.size(), " layers)");
  Tensor& keys = cache.keys[layer];
  Tensor& values = cache.values[layer];
  const int64_t steps = k.size(2), end = cache.length + steps;
  GENESIS_CHECK(keys.size(0) == k.size(0) && end <= cache.capacity(), ValueError, "KV cache: cannot append ", steps,
                " positions of batch ", k.size(0), " to a cache of batch ", keys.size(0), " holding ", cache.length,
                " of ", cache.capacity(), " positions");
  NoGradGuard no_grad;
  keys.narrow(2, cache.length, steps).copy_(k);
  values.narrow(2, cache.length, steps).copy_(v);
  return {keys.narrow(2, 0, end), values.narrow(2, 0, end)};
}

}  // namespace detail

}  // namespace genesis::models
