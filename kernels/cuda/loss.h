#pragma once
// CUDA kernels of the class-index losses; the contracts of kernels/cpu/loss.h plus a stream,
// except that targets need no validation beforehand: the forward kernels report a target
// outside [0, classes) (other than ignore_index) to `fault` as op `fault_op` (cuda::KernelFault,
// raised as IndexError at the host's next synchronization), and every kernel treats its row as
// ignored, so no memory outside the inputs is touched. The mean's divisor stays on the device:
// count_valid_targets writes it, and the backward kernels read it (`valid_count`, null for the
// sum and none reductions, whose scale is 1). Per-row losses and logsumexps are in the
// accumulator type (f64 for f64, f32 otherwise).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/class_rows.h"
#include "libgenesis/core/dtype.h"
#include "kernels/cuda/check.h"

namespace genesis::kernels::cuda {


void cross_entropy(DType dtype, DType target_dtype, ClassRows shape, const void* logits, const void* target,
                   int64_t ignore_index, double label_smoothing, void* loss, void* lse,
                   ::genesis::cuda::KernelFault* fault, int fault_op, cudaStream_t stream);
// The gradient is scaled by 1 / *valid_count (computed in f64, then rounded to the accumulator
// type, as the CPU's scale) when valid_count is not null.
void cross_entropy_backward(DType dtype, DType target_dtype, ClassRows shape, const void* logits, const void* target,
                            const void* lse, int64_t ignore_index, double label_smoothing, const void* grad_loss,
                            int64_t grad_stride, const int64_t* valid_count, void* grad_logits, cudaStream_t stream);

// The row pass of the fused language-model head (linear_cross_entropy): logits [rows, ld] of
// which the first `classes` columns are real (ld a multiple of 8, rows 16-byte aligned; f32,
// f16, bf16). loss[r] (f32) = the row's cross-entropy as cross_entropy computes it (0 on ignored
// rows; bad targets reported to `fault`). With write_grad each row is overwritten by the
// gradient of loss[r]: softmax - (1 - s) onehot(t) - s / classes, zero on ignored rows and in
// columns [classes, ld).
void cross_entropy_with_grad(DType dtype, DType target_dtype, int64_t rows, int64_t classes, int64_t ld, void* logits,
                             const void* target, int64_t ignore_index, double label_smoothing, bool write_grad,
                             float* loss, ::genesis::cuda::KernelFault* fault, int fault_op, cudaStream_t stream);

// *count (a device int64) = how many of the n targets lie in [0, classes) and differ from
// ignore_index: the rows a mean divides by.
void count_valid_targets(DType target_dtype, int64_t n, const void* target, int64_t classes, int64_t ignore_index,
                         int64_t* count, cudaStream_t stream);

void nll_loss(DType dtype, DType target_dtype, ClassRows shape, const void* log_probs, const void* target,
              int64_t ignore_index, void* loss, ::genesis::cuda::KernelFault* fault, int fault_op, cudaStream_t stream);
void nll_loss_backward(DType dtype, DType target_dtype, ClassRows shape, const void* target, int64_t ignore_index,
                       const void* grad_loss, int64_t grad_stride, const int64_t* valid_count, void* grad_log_probs,
                       cudaStream_t stream);

}  // namespace genesis::kernels::cuda
