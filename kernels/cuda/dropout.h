#pragma once
// Fused CUDA dropout. The keep mask is kernels/cpu/random.cpp's Bernoulli draw at the same
// (seed, offset): element i keeps when lane i % 4 of Philox counter offset + i / 4 maps to a
// uniform <= keep_prob, so a CPU and a CUDA run with one generator state drop the same elements.
// Kept values are x * scale computed in f32 (f64 for f64) and rounded once, as the CPU's
// where(keep, mul(x, scale).to(dtype), 0) does.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cuda {

// The draws of one dropout call: element i is kept when draw i <= keep_prob.
struct DropoutDraws {
  double keep_prob;
  uint64_t seed, offset;
};

// y[i] = kept(i) ? x[i] * scale : 0 for contiguous x, y [n].
void dropout_forward(DType dtype, int64_t n, const void* x, const DropoutDraws& draws, double scale, void* y,
                     cudaStream_t stream);
// grad_x[i] = kept(i) ? grad_y[i] * scale : 0 for contiguous buffers [n], the mask drawn again
// from the forward's (seed, offset) rather than kept in memory (a byte per element).
void dropout_backward(DType dtype, int64_t n, const DropoutDraws& draws, const void* grad_y, double scale,
                      void* grad_x, cudaStream_t stream);

}  // namespace genesis::kernels::cuda
