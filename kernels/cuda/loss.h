#pragma once
// CUDA kernels of the class-index losses; same contracts as kernels/cpu/loss.h plus a stream.
// Targets must be validated before these run. Per-row losses and logsumexps are in the
// accumulator type (f64 for f64, f32 otherwise).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cpu/loss.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cuda {

using cpu::ClassRows;

void cross_entropy(DType dtype, DType target_dtype, ClassRows shape, const void* logits, const void* target,
                   int64_t ignore_index, double label_smoothing, void* loss, void* lse, cudaStream_t stream);
void cross_entropy_backward(DType dtype, DType target_dtype, ClassRows shape, const void* logits, const void* target,
                            const void* lse, int64_t ignore_index, double label_smoothing, const void* grad_loss,
                            int64_t grad_stride, double scale, void* grad_logits, cudaStream_t stream);

// Smallest and largest class index among the n targets not equal to ignore_index, and how many
// there are: three int64 written to device memory `stats` (min and max are 0 when none). Lets
// the op validate targets by copying 24 bytes to the host instead of the targets.
void target_stats(DType target_dtype, int64_t n, const void* target, int64_t ignore_index, void* stats,
                  cudaStream_t stream);

void nll_loss(DType dtype, DType target_dtype, ClassRows shape, const void* log_probs, const void* target,
              int64_t ignore_index, void* loss, cudaStream_t stream);
void nll_loss_backward(DType dtype, DType target_dtype, ClassRows shape, const void* target, int64_t ignore_index,
                       const void* grad_loss, int64_t grad_stride, double scale, void* grad_log_probs,
                       cudaStream_t stream);

}  // namespace genesis::kernels::cuda
