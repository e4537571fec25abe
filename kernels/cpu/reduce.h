#pragma once
// CPU reductions over the last dimension of a contiguous [rows, cols] buffer. Floating
// inputs accumulate in double (f32, f16 and bf16 sums and means in float lanes per block of
// 1,024 elements first: row_reduce.h's float_sum) and write their own dtype. Rows longer than
// a fixed column chunk are split across threads; the chunk partials are combined in column
// order, so results do not depend on the number of threads.
#include <cstdint>

#include "kernels/common/extreme.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cpu {

using kernels::Extreme;

// out[r] = sum_c in[r, c]. Integers and bool accumulate in i64 (out is i64).
void sum_rows(DType dtype, int64_t rows, int64_t cols, const void* in, void* out);
// out[r] = sum_c in[r, c] / cols, rounded once from the double accumulator (a 0 / 0 NaN for
// empty rows). Floating only.
void mean_rows(DType dtype, int64_t rows, int64_t cols, const void* in, void* out);
// out[c] = sum over o, i of in[o, c, i] for a contiguous [outer, channels, inner] buffer (e.g.
// a bias gradient: the sum over batch and pixels of each channel), read in place. Each channel
// adds its outer rows in order, so results do not depend on the number of threads. Floating only.
void sum_channels(DType dtype, int64_t outer, int64_t channels, int64_t inner, const void* in, void* out);
// out[r] = prod_c in[r, c], with the types of sum_rows (integer products wrap around).
void prod_rows(DType dtype, int64_t rows, int64_t cols, const void* in, void* out);
// grad_in[r, c] = grad_out[r] * prod_{j != c} in[r, j], from prefix and suffix products so
// that zeros in the row give exact results. Floating only.
void prod_rows_backward(DType dtype, int64_t rows, int64_t cols, const void* in, const void* grad_out, void* grad_in);

// values[r] = the max (min) of row r in the input dtype, indices[r] = the first column that
// holds it. A NaN beats every number (the first NaN is taken). Requires cols > 0.
void extreme_rows(Extreme which, DType dtype, int64_t rows, int64_t cols, const void* in, void* values,
                  int64_t* indices);

// out[r] = sum_c (in[r, c] - mean_r)^2 / max(cols - correction, 0), two passes. Floating only.
void var_rows(DType dtype, int64_t rows, int64_t cols, int64_t correction, const void* in, void* out);
// out[r] = m + log sum_c exp(in[r, c] - m) with m the row max; when m is infinite (rows of
// -inf, empty rows, or a +inf entry) out[r] = m. Floating only.
void logsumexp_rows(DType dtype, int64_t rows, int64_t cols, const void* in, void* out);
// out[r] = the p-norm of row r: p = inf gives max |x|, p = -inf min |x|, p = 0 the count of
// non-zeros, otherwise (sum |x|^p)^(1/p). Floating only.
void norm_rows(DType dtype, int64_t rows, int64_t cols, double p, const void* in, void* out);

// The sum of x^2 over every element of `count` contiguous floating buffers, in double, each
// in the fixed chunk order of the row reductions: the square of a global gradient norm in one
// call (clip_grad_norm), instead of three ops per tensor.
struct SquaresInput {
  DType dtype;
  int64_t n;
  const void* data;
};
double sum_of_squares(const SquaresInput* inputs, int64_t count);

}  // namespace genesis::kernels::cpu
