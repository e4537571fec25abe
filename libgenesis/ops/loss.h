#pragma once
// Loss functions. Inputs are [N, C] (or [N, C, d1, ...] for class-index losses with
// the class axis second, like PyTorch); reductions mean, sum or none.
#include "libgenesis/core/tensor.h"

namespace genesis {

enum class Reduction { none, mean, sum };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;   // targets equal to this contribute nothing (and are not counted by mean)
  double label_smoothing = 0.0;  // in [0, 1)
};

// logits [N, C] or [N, C, d...]; target class indices [N] or [N, d...] (i32/i64).
// Out-of-range targets (other than ignore_index) throw IndexError: from the op on the CPU; on
// CUDA at the next synchronization (the op does not wait; the row counts as ignored).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions options = {});
// cross_entropy(linear(x, weight), target) without keeping the logits: the loss of a language
// model's head, x [N, K] (hidden states) and weight [V, K]. On CUDA (f32, f16, bf16) the logits
// go into one buffer whose rows are padded to a multiple of 64 classes (so the GEMMs run on
// aligned tensor-core kernels for any V, GPT-2's odd 50257 included), one row pass turns each
// row into its loss and, in place, into the logits' gradient (the backward is two GEMMs over
// it, as llm.c does): one [N, V] buffer in x's dtype instead of logits plus their f32 gradient.
// Elsewhere, and for Reduction::none, it runs as the composition. Under autocast x and weight
// run in the low dtype; the loss of 16-bit inputs is f32.
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& target,
                            CrossEntropyOptions options = {});
// The most bytes of logits linear_cross_entropy computes at once on CUDA (its rows go in chunks):
// 1 GiB, or GENESIS_LOGITS_CHUNK_MB MiB (for measurements).
int64_t linear_cross_entropy_chunk_bytes();
// log_probs [N, C] (or [N, C, d...]); same target rules as cross_entropy.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::mean,
                int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// Numerically stable sigmoid + binary cross-entropy; pos_weight optional (broadcast over the last axis).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::mean, const Tensor& pos_weight = Tensor());

}  // namespace genesis
