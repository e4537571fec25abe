#pragma once
// CUDA kernels of the neural-network functions over the last axis of contiguous buffers:
// softmax family, layer/RMS norm and embedding (the contracts of kernels/cpu/nn.h). f16/bf16
// compute in f32, f64 in f64. Every sum is taken in a fixed order (no float atomics), so results
// are deterministic (the one atomic is an integer minimum in the index check).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/norm_dtypes.h"
#include "libgenesis/core/dtype.h"
#include "kernels/cuda/check.h"

namespace genesis::kernels::cuda {

// Softmax (log_softmax when `log`) of each row of x [rows, dim].
void softmax(DType dtype, bool log, int64_t rows, int64_t dim, const void* x, void* y, cudaStream_t stream);
// grad_x from the forward output y: softmax y * (g - sum(g * y)), log_softmax g - exp(y) * sum(g).
void softmax_backward(DType dtype, bool log, int64_t rows, int64_t dim, const void* y, const void* grad_y, void* grad_x,
                      cudaStream_t stream);

// Layer norm (centered) or RMS norm of each row of x [rows, cols], then * weight + bias (either
// may be null), in the dtypes `dtypes` (kernels::norm_dtypes_supported). mean and rstd [rows]
// are in the accumulator type of x (f64 for f64, f32 otherwise).
void norm_rows(NormDTypes dtypes, bool centered, int64_t rows, int64_t cols, const void* x, const void* weight,
               const void* bias, double eps, void* y, void* mean, void* rstd, cudaStream_t stream);
// Row chunks of the weight/bias gradient: norm_rows_backward needs a `partials` buffer of
// 2 * norm_backward_chunks(x_dtype, rows, cols) * cols accumulator-type elements when grad_weight
// or grad_bias is set (a chunk per resident block of the backward).
int64_t norm_backward_chunks(DType x_dtype, int64_t rows, int64_t cols);
// grad_x [rows, cols] from grad_y (of y's dtype), and grad_weight / grad_bias [cols] when
// non-null: each chunk of rows sums its column partials, then every column adds its chunks in order.
void norm_rows_backward(NormDTypes dtypes, bool centered, int64_t rows, int64_t cols, const void* x, const void* weight,
                        const void* mean, const void* rstd, const void* grad_y, void* grad_x, void* grad_weight,
                        void* grad_bias, void* partials, cudaStream_t stream);

// out[i, :] = weight[index[i], :] for n indices into weight [num, dim]. The indices are checked
// on the way: an index outside [0, num) leaves its output row unwritten and is reported to
// `fault` as op `fault_op` (cuda::KernelFault: raised at the host's next synchronization).
void embedding(DType dtype, DType index_dtype, int64_t n, const void* index, int64_t num, int64_t dim,
               const void* weight, void* out, ::genesis::cuda::KernelFault* fault, int fault_op, cudaStream_t stream);
// Bytes of device workspace embedding_backward needs for n indices into num rows.
size_t embedding_backward_workspace_bytes(int64_t n, int64_t num);
// grad_weight [num, dim]: row v sums the grad_out rows at the positions i with index[i] == v
// in ascending order (a stable radix sort of the n contiguous, validated indices on the
// device); the row padding_idx (when >= 0) stays zero. `workspace` holds
// embedding_backward_workspace_bytes(n, num) bytes.
void embedding_backward(DType dtype, DType index_dtype, int64_t n, const void* index, int64_t num, int64_t dim,
                        const void* grad_out, int64_t padding_idx, void* grad_weight, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream);

}  // namespace genesis::kernels::cuda
