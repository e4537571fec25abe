// Reductions: forward dispatch and backward formulas.
#include "libgenesis/ops/reduce.h"

#include <algorithm>

#include "kernels/cpu/reduce.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/reduce.h"
#endif

namespace genesis {

namespace detail {

Axes reduction_axes(const Axes& axes, int64_t ndim, const char* op) {
  Axes out;
  if (axes.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t a : axes) out.push_back(normalize_axis(a, ndim, op));
  std::sort(out.begin(), out.end());
  GENESIS_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), ValueError, op, ": repeated axis in the list");
  return out;
}

Shape reduced_shape(const Shape& shape, const Axes& axes, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), d);
    if (!reduced) out.push_back(shape[static_cast<size_t>(d)]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

Tensor as_rows(const Tensor& x, const Axes& axes) {
  std::vector<int64_t> perm;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!std::binary_search(axes.begin(), axes.end(), d)) {
      perm.push_back(d);
      outer *= x.size(d);
    }
  }
  for (int64_t d : axes) {
    perm.push_back(d);
    inner *= x.size(d);
  }
  return x.permute(perm).contiguous().view({outer, inner});
}

Tensor unsqueeze_reduced(const Tensor& t, const Shape& input_shape, const Axes& axes, bool keepdim) {
  if (keepdim) return t;
  return t.reshape(reduced_shape(input_shape, axes, /*keepdim=*/true));
}

}  // namespace detail

namespace {

Tensor sum_forward(const Tensor& x, const Axes& axes, bool keepdim) {
  NoGradGuard forward_only;
  Tensor rows = detail::as_rows(x, axes);
  DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  Tensor out = empty({rows.size(0)}, {.dtype = out_dtype, .device = x.device()});
  if (x.device().is_cpu()) {
    kernels::cpu::sum_rows(x.dtype(), rows.size(0), rows.size(1), rows.data_ptr(), out.data_ptr());
  } else {
    GENESIS_ON_CUDA(kernels::cuda::sum_rows(x.dtype(), rows.size(0), rows.size(1), rows.data_ptr(), out.data_ptr(),
                                            cuda::current_stream()));
  }
  return out.view(detail::reduced_shape(x.shape(), axes, keepdim));
}

}  // namespace

Tensor sum(const Tensor& x, const Axes& axes_in, bool keepdim) {
  detail::check_defined("sum", x, "input");
  Axes axes = detail::reduction_axes(axes_in, x.dim(), "sum");
  Tensor out = sum_forward(x, axes, keepdim);
  if (needs_grad({x})) {
    record("sum", {x}, {out}, [in = x.shape(), axes, keepdim](const TensorList& g) {
      return TensorList{detail::unsqueeze_reduced(g[0], in, axes, keepdim).expand(in).contiguous()};
    });
  }
  return out;
}

Tensor mean(const Tensor& x, const Axes& axes_in, bool keepdim) {
  detail::check_defined("mean", x, "input");
  Axes axes = detail::reduction_axes(axes_in, x.dim(), "mean");
  int64_t count = 1;
  for (int64_t a : axes) count *= x.size(a);
  Tensor xf = is_floating(x.dtype()) ? x : x.to(DType::f32);
  return div(sum(xf, axes, keepdim), static_cast<double>(count));
}

}  // namespace genesis
