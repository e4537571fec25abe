#pragma once
// Reductions over any set of axes (empty axes = all; negative axes count from the end),
// with keepdim. The CPU kernels accumulate in double and return the input's floating dtype;
// integer and bool sums and prods give i64; max/min keep the input dtype and propagate NaN;
// var, std, logsumexp and norm of integers compute in f32. Every reduction runs on CUDA too,
// accumulating in f32 (f64 for f64, i64 for integer sums and products), deterministically.
#include <optional>
#include <vector>

#include "libgenesis/core/tensor.h"

namespace genesis {

using Axes = std::vector<int64_t>;

Tensor sum(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const Axes& axes = {}, bool keepdim = false);

struct ValuesIndices {
  Tensor values;
  Tensor indices;  // i64
};
// Over one axis; ties pick the first index (a NaN counts as the extreme); the gradient
// flows to that index. Reducing an empty axis (or an empty tensor) throws ValueError.
ValuesIndices max(const Tensor& x, int64_t axis, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t axis, bool keepdim = false);
// Over all elements; the gradient is shared evenly between tied maxima (as in PyTorch).
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t axis, bool keepdim = false);

Tensor var(const Tensor& x, const Axes& axes = {}, bool unbiased = true, bool keepdim = false);
Tensor std(const Tensor& x, const Axes& axes = {}, bool unbiased = true, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Axes& axes, bool keepdim = false);
// p-norm over axes (p = 2 by default; p = inf gives the max-abs norm, p = -inf the min-abs
// one, p = 0 the number of non-zeros). The gradient of a zero vector is zero.
Tensor norm(const Tensor& x, double p = 2.0, const Axes& axes = {}, bool keepdim = false);

namespace detail {
// Sorted, de-duplicated, normalized axes; all axes when `axes` is empty; none for a 0-d
// tensor (whose axis 0 / -1 is accepted and stands for its single element).
Axes reduction_axes(const Axes& axes, int64_t ndim, const char* op);
// Shape after reducing `axes` (kept as 1 with keepdim).
Shape reduced_shape(const Shape& shape, const Axes& axes, bool keepdim);
// Moves `axes` last and makes the result contiguous: returns [outer, inner] as a 2-D tensor
// with inner = product of the reduced dimensions.
Tensor as_rows(const Tensor& x, const Axes& axes);
// The inverse of as_rows: a [outer, inner] tensor back to `shape` (a permuted view).
Tensor from_rows(const Tensor& rows, const Shape& shape, const Axes& axes);
// A tensor's elements read as a contiguous [outer, extent, inner] block reduced over extent.
struct ReductionLayout {
  Tensor source;
  int64_t outer = 1, extent = 1, inner = 1;
};
// x itself as such a block when its memory holds the reduced axes as one run between the kept
// axes (any dense layout whose kept axes keep their order: contiguous tensors, transposes);
// nullopt otherwise (as_rows then makes a copy that is).
std::optional<ReductionLayout> strided_layout(const Tensor& x, const Axes& axes);
// Re-inserts reduced axes as size 1 so a keepdim=false result broadcasts against the input.
Tensor unsqueeze_reduced(const Tensor& t, const Shape& input_shape, const Axes& axes, bool keepdim);
}  // namespace detail

}  // namespace genesis
