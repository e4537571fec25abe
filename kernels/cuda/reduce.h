#pragma once
// CUDA reductions with the contracts of kernels/cpu/reduce.h. The input is a contiguous
// [outer, extent, inner] block reduced over `extent` into [outer, inner] outputs (a full
// reduction is {1, n, 1}, a last-axis one {rows, cols, 1}). f16/bf16/f32 accumulate in f32,
// f64 in f64, integers in i64. Deterministic: no atomics, a fixed combination order for a
// given shape and device.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/extreme.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cuda {


struct ReduceShape {
  int64_t outer = 1;
  int64_t extent = 1;
  int64_t inner = 1;
};

// The mean: the f32 (f64) sum divided by extent before the one rounding to the output dtype,
// in the same pass. Floating only.
void mean(DType dtype, ReduceShape shape, const void* in, void* out, cudaStream_t stream);
// Sum and product; integers and bool give i64 (products wrap around).
void sum(DType dtype, ReduceShape shape, const void* in, void* out, cudaStream_t stream);
void prod(DType dtype, ReduceShape shape, const void* in, void* out, cudaStream_t stream);
// out[r] = sum_c in[r, c] of a [rows, cols] buffer: sum with {rows, cols, 1}.
void sum_rows(DType dtype, int64_t rows, int64_t cols, const void* in, void* out, cudaStream_t stream);

// The max (min) in the input dtype and its first index along extent; a NaN beats every number
// (the first NaN is taken). Either output may be null. Requires extent > 0.
void extreme(Extreme which, DType dtype, ReduceShape shape, const void* in, void* values, int64_t* indices,
             cudaStream_t stream);

// Floating only (f32/f64/f16/bf16), output in the input dtype.
// sum of squared deviations / max(extent - correction, 0), by Welford updates merged pairwise.
void var(DType dtype, ReduceShape shape, int64_t correction, const void* in, void* out, cudaStream_t stream);
// m + log sum exp(x - m) with the running max m (one pass); m itself when it is infinite or NaN.
void logsumexp(DType dtype, ReduceShape shape, const void* in, void* out, cudaStream_t stream);
// The p-norm with the CPU's special cases (inf: max |x|, -inf: min |x|, 0: count of non-zeros).
void norm(DType dtype, ReduceShape shape, double p, const void* in, void* out, cudaStream_t stream);

// grad_in[r, c] = grad_out[r] * prod_{j != c} in[r, j] over a [rows, cols] buffer, from prefix
// and suffix products (exact with zeros). Floating only.
void prod_rows_backward(DType dtype, int64_t rows, int64_t cols, const void* in, const void* grad_out, void* grad_in,
                        cudaStream_t stream);

}  // namespace genesis::kernels::cuda
