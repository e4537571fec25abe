#pragma once
// CPU kernels of the class-index losses. Inputs are contiguous [outer, classes, inner]
// (the class axis second, like PyTorch's [N, C, d...]); each of the outer * inner rows has
// one target. Targets must be validated (kernels::cpu::index_stats) before these run.
// Per-row losses come out in the accumulator type (f64 for f64, f32 otherwise).
#include <cstdint>

#include "kernels/common/class_rows.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cpu {

using kernels::ClassRows;


// loss[r] = (1 - s) * (lse - x[t]) + s * (lse - mean_c x[c]) with s = label_smoothing and
// lse = log sum_c exp(x[c]); rows whose target is ignore_index get loss 0. lse[r] is kept
// for the backward pass.
void cross_entropy(DType dtype, DType target_dtype, ClassRows shape, const void* logits, const void* target,
                   int64_t ignore_index, double label_smoothing, void* loss, void* lse);
// grad_logits = (softmax - (1 - s) * onehot(t) - s / C) * grad_loss[r * grad_stride] * scale;
// zero on ignored rows. grad_loss has the logits' dtype; grad_stride is 0 for a reduced loss.
void cross_entropy_backward(DType dtype, DType target_dtype, ClassRows shape, const void* logits, const void* target,
                            const void* lse, int64_t ignore_index, double label_smoothing, const void* grad_loss,
                            int64_t grad_stride, double scale, void* grad_logits);

// loss[r] = -log_probs[t]; 0 on ignored rows.
void nll_loss(DType dtype, DType target_dtype, ClassRows shape, const void* log_probs, const void* target,
              int64_t ignore_index, void* loss);
// grad_log_probs = -grad_loss[r * grad_stride] * scale at the target class, zero elsewhere.
void nll_loss_backward(DType dtype, DType target_dtype, ClassRows shape, const void* target, int64_t ignore_index,
                       const void* grad_loss, int64_t grad_stride, double scale, void* grad_log_probs);

}  // namespace genesis::kernels::cpu
