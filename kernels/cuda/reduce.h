#pragma once
// CUDA reductions over the last dimension of a contiguous [rows, cols] buffer.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cuda {

// out[r] = sum_c in[r, c]; f32 accumulation for f16/bf16/f32, f64 for f64, i64 for integers
// (out is i64 then). Deterministic: no atomics.
void sum_rows(DType dtype, int64_t rows, int64_t cols, const void* in, void* out, cudaStream_t stream);

}  // namespace genesis::kernels::cuda
