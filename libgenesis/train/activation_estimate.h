#pragma once
// The activation part of train/memory_estimate.h: what a language model's forward keeps for its
// backward, block by block, in each activation checkpointing mode, and the working memory of its
// loss head, from the config's widths, the batch and the dtypes. An estimate: it follows what the
// ops save (linear: its input for the weight's gradient and its weight for the input's; the norms:
// their input; attention: q, k, v and its output, with the logsumexp in the flash kernels or the
// [T, T] probabilities elsewhere; SwiGLU: both inputs), not every temporary of the backward.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "libgenesis/train/memory_estimate.h"

namespace genesis::train::detail {

// How one linear layer (or the head's weight) of the model is stored and trained: what decides
// what the forward keeps for it.
struct LinearLayer {
  bool trains = false;       // its weight has a gradient
  int64_t adapter_rank = 0;  // LoRA's r; 0 without an adapter
  bool weight_f32 = true;    // stored in f32: autocast casts it, and its backward keeps the cast
  bool nf4 = false;          // QLoRA: dequantized for each product, kept by nothing
  // Its input is kept: for the weight's gradient, or for its adapter's.
  bool keeps_input() const { return trains || adapter_rank > 0; }
};

struct ActivationInputs {
  nlohmann::json config;  // the model's config.json
  int64_t batch = 0, seq_len = 0;
  int64_t act_bytes = 4;       // the dtype the blocks compute in: amp.dtype's, else the residual's
  int64_t residual_bytes = 4;  // the residual stream's dtype (the embedding's)
  bool autocast = false;
  bool cuda = false;
  double dropout = 0;            // model.dropout
  double lora_dropout = 0;       // lora.dropout
  int64_t every = 1;             // training.activation_checkpointing_every
  bool gradient_buffers = true;  // gradients live between steps (a weight's new gradient is added into one)
  bool classifier_head = false;  // a text classifier's head (pooled rows) instead of the language-model loss
  // The layer of a dotted module name ("model.layers.0.self_attn.q_proj"; the head: "lm_head", or the
  // tied embedding's module).
  std::function<LinearLayer(const std::string& module)> layer;
};

struct ModeActivations {
  ActivationBytes none, full, selective;
};

ModeActivations language_model_activations(const ActivationInputs& in);

}  // namespace genesis::train::detail
