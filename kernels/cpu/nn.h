#pragma once
// CPU kernels of the neural-network functions: softmax family, layer/RMS norm, embedding,
// one_hot, and the index validation pass shared with the losses. All buffers are
// contiguous; f16/bf16 compute in f32, f64 in f64. Index values must be validated with
// index_stats before any kernel that reads through them.
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include "kernels/common/norm_dtypes.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cpu {

// Softmax (log_softmax when `log`) over the middle axis of x seen as [outer, dim, inner].
void softmax(DType dtype, bool log, int64_t outer, int64_t dim, int64_t inner, const void* x, void* y);
// grad_x from the forward output y: softmax y * (g - sum(g * y)), log_softmax g - exp(y) * sum(g).
void softmax_backward(DType dtype, bool log, int64_t outer, int64_t dim, int64_t inner, const void* y,
                      const void* grad_y, void* grad_x);

// Layer norm (centered) or RMS norm (not centered) of each row of x [rows, cols], then
// * weight + bias (either may be null), in the dtypes `dtypes` (norm_dtypes_supported; weight
// is ignored when both are null). mean and rstd [rows] receive the row statistics in the
// accumulator type of x (f64 for f64, f32 otherwise); mean is 0 when not centered.
void norm_rows(NormDTypes dtypes, bool centered, int64_t rows, int64_t cols, const void* x, const void* weight,
               const void* bias, double eps, void* y, void* mean, void* rstd);
// grad_x [rows, cols] from grad_y (of y's dtype), and grad_weight / grad_bias [cols] when
// non-null. The column sums reduce fixed row chunks in a fixed order, so results do not depend
// on the thread count.
void norm_rows_backward(NormDTypes dtypes, bool centered, int64_t rows, int64_t cols, const void* x, const void* weight,
                        const void* mean, const void* rstd, const void* grad_y, void* grad_x, void* grad_weight,
                        void* grad_bias);

// Smallest and largest of the n index values other than `skip`, and how many there are.
struct IndexStats {
  int64_t min = 0;
  int64_t max = 0;
  int64_t count = 0;
};
IndexStats index_stats(DType index_dtype, int64_t n, const void* index, std::optional<int64_t> skip);

// out[i, :] = weight[index[i], :] for n indices into weight [num, dim].
void embedding(DType dtype, DType index_dtype, int64_t n, const void* index, int64_t dim, const void* weight,
               void* out);
// grad_weight [num, dim] = sum of the grad_out rows that picked each row; the row
// padding_idx (when >= 0) stays zero. Deterministic: each row sums its picks in order.
void embedding_backward(DType dtype, DType index_dtype, int64_t n, const void* index, int64_t num, int64_t dim,
                        const void* grad_out, int64_t padding_idx, void* grad_weight);

// out [n, num_classes] (i64) = 1 at each index, 0 elsewhere.
void one_hot(DType index_dtype, int64_t n, const void* index, int64_t num_classes, int64_t* out);

}  // namespace genesis::kernels::cpu
