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
// log_probs [N, C] (or [N, C, d...]); same target rules as cross_entropy.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::mean,
                int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// Numerically stable sigmoid + binary cross-entropy; pos_weight optional (broadcast over the last axis).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::mean, const Tensor& pos_weight = Tensor());

}  // namespace genesis
