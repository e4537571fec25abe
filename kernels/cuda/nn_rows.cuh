#pragma once
// Register-row kernels of the softmax family and the norms (nn_rows.cu), used by nn.cu when a
// row is a whole number of 16-byte packs, every pointer is 16-byte aligned, the dtype (x's for
// the norms) is f32, f16 or bf16, and the row fits in the registers of a warp or a block. Each
// returns false (launching nothing) when it does not apply.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/norm_dtypes.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cuda {

namespace rows {
// Threads of a block of the row kernels (nn.cu, nn_rows.cu): a row takes a warp or the whole block.
inline constexpr int kThreads = 256;
}  // namespace rows

bool softmax_in_registers(DType dtype, bool log, int64_t rows, int64_t dim, const void* x, void* y,
                          cudaStream_t stream);
// out[r] = the log-sum-exp of row r (m + log sum exp(x - m), or m when the max m is infinite or NaN).
bool logsumexp_in_registers(DType dtype, int64_t rows, int64_t cols, const void* x, void* out, cudaStream_t stream);
bool softmax_backward_in_registers(DType dtype, bool log, int64_t rows, int64_t dim, const void* y, const void* grad_y,
                                   void* grad_x, cudaStream_t stream);
// The norms in the dtypes `dtypes` (kernels::norm_dtypes_supported): a 16-byte pack of x sets
// the register layout, its weights and outputs are read and written in their own types.
bool norm_rows_in_registers(NormDTypes dtypes, bool centered, int64_t rows, int64_t cols, const void* x,
                            const void* weight, const void* bias, double eps, void* y, void* mean, void* rstd,
                            cudaStream_t stream);
// Blocks per multiprocessor that norm_backward_in_registers runs for rows of `cols` x elements.
int norm_backward_blocks_per_sm(DType x_dtype, int64_t cols);
// grad_x, and the column partials of the weight / bias gradients of `chunks` row chunks
// (partial_w / partial_b [chunks, cols], f32, either may be null) in one pass over x and grad_y.
bool norm_backward_in_registers(NormDTypes dtypes, bool centered, int64_t rows, int64_t cols, int64_t chunks,
                                const void* x, const void* weight, const void* mean, const void* rstd,
                                const void* grad_y, void* grad_x, float* partial_w, float* partial_b,
                                cudaStream_t stream);

}  // namespace genesis::kernels::cuda
