// Reductions: forward dispatch and backward formulas.
#include "libgenesis/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "kernels/cpu/reduce.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/prologue.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/reduce.h"
#endif

namespace genesis {

using kernels::cpu::Extreme;

namespace {

// The permutation that as_rows applies: kept dimensions first, then the reduced ones.
std::vector<int64_t> rows_permutation(int64_t ndim, const Axes& axes) {
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < ndim; ++d)
    if (!std::binary_search(axes.begin(), axes.end(), d)) perm.push_back(d);
  perm.insert(perm.end(), axes.begin(), axes.end());
  return perm;
}

}  // namespace

namespace detail {

Axes reduction_axes(const Axes& axes, int64_t ndim, const char* op) {
  Axes out;
  if (ndim == 0) {
    // A 0-d tensor accepts axis 0 / -1 and reduces over its single element.
    for (int64_t a : axes) normalize_axis(a, ndim, op);
    return out;
  }
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
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (std::binary_search(axes.begin(), axes.end(), d)) inner *= x.size(d);
    else outer *= x.size(d);
  }
  return x.permute(rows_permutation(x.dim(), axes)).contiguous().view({outer, inner});
}

Tensor from_rows(const Tensor& rows, const Shape& shape, const Axes& axes) {
  std::vector<int64_t> perm = rows_permutation(static_cast<int64_t>(shape.size()), axes);
  Shape permuted;
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    permuted.push_back(shape[static_cast<size_t>(perm[i])]);
    inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  }
  return rows.view(permuted).permute(inverse);
}

std::optional<ReductionLayout> strided_layout(const Tensor& x, const Axes& axes) {
  int64_t kept = 1, reduced = 1;
  struct Dim {
    int64_t axis, size, stride;
    bool reduced;
  };
  std::vector<Dim> dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const bool is_reduced = std::binary_search(axes.begin(), axes.end(), d);
    (is_reduced ? reduced : kept) *= x.size(d);
    if (x.size(d) != 1) dims.push_back({d, x.size(d), x.stride(d), is_reduced});
  }
  if (x.numel() == 0) return ReductionLayout{x, kept, reduced, 1};  // nothing is read
  // Memory order: the strides, largest first, must tile the elements without gaps.
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) { return a.stride > b.stride; });
  int64_t expected_stride = 1;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    if (it->stride != expected_stride) return std::nullopt;
    expected_stride *= it->size;
  }
  // Then kept dims, the reduced block, kept dims; the kept ones in their logical order so the
  // [outer, inner] results are the output in row-major order.
  ReductionLayout layout{x, 1, 1, 1};
  bool after_block = false;
  int64_t last_kept_axis = -1;
  for (const Dim& d : dims) {
    if (d.reduced) {
      if (after_block && layout.inner > 1) return std::nullopt;
      layout.extent *= d.size;
      after_block = true;
      continue;
    }
    if (d.axis < last_kept_axis) return std::nullopt;
    last_kept_axis = d.axis;
    (after_block ? layout.inner : layout.outer) *= d.size;
  }
  return layout;
}

Tensor unsqueeze_reduced(const Tensor& t, const Shape& input_shape, const Axes& axes, bool keepdim) {
  if (keepdim) return t;
  return t.reshape(reduced_shape(input_shape, axes, /*keepdim=*/true));
}

}  // namespace detail

namespace {

using detail::unsqueeze_reduced;

// On the CPU the as_rows copy (inner = 1); on CUDA x itself where its layout allows.
detail::ReductionLayout layout_of(const Tensor& x, const Axes& axes) {
  if (x.device().is_cuda()) {
    if (auto layout = detail::strided_layout(x, axes)) return *layout;
  }
  Tensor rows = detail::as_rows(x, axes);
  return {rows, rows.size(0), rows.size(1), 1};
}

#if GENESIS_WITH_CUDA
kernels::cuda::ReduceShape shape_of(const detail::ReductionLayout& l) { return {l.outer, l.extent, l.inner}; }
#endif

// A reduction of x over axes into a new tensor of out_dtype: cpu_kernel(rows, cols, in, out) over
// the as_rows layout, cuda_kernel(shape, in, out, stream) over layout_of. No autograd.
template <class CpuKernel, class CudaKernel>
Tensor reduce_into(const Tensor& x, const Axes& axes, bool keepdim, DType out_dtype, CpuKernel&& cpu_kernel,
                   [[maybe_unused]] CudaKernel&& cuda_kernel) {
  NoGradGuard forward_only;
  detail::ReductionLayout l = layout_of(x, axes);
  Tensor out = empty({l.outer * l.inner}, {.dtype = out_dtype, .device = x.device()});
  if (x.device().is_cpu()) {
    cpu_kernel(l.outer, l.extent, l.source.data_ptr(), out.data_ptr());
  } else {
    GENESIS_ON_CUDA(cuda_kernel(shape_of(l), l.source.data_ptr(), out.data_ptr(), cuda::current_stream()));
  }
  return out.view(detail::reduced_shape(x.shape(), axes, keepdim));
}

// Argument checks shared by the reductions; returns the normalized axes.
Axes checked_axes(const char* op, const Tensor& x, const Axes& axes) {
  detail::check_defined(op, x, "input");
  return detail::reduction_axes(axes, x.dim(), op);
}

int64_t reduced_count(const Shape& shape, const Axes& axes) {
  int64_t n = 1;
  for (int64_t a : axes) n *= shape[static_cast<size_t>(a)];
  return n;
}

Tensor to_floating(const Tensor& x) { return is_floating(x.dtype()) ? x : x.to(DType::f32); }

DType sum_dtype(DType t) { return is_floating(t) ? t : DType::i64; }

// A contiguous floating CPU tensor whose kept dims are one block with reduced dims on both
// sides, the trailing ones at least kMinInner elements (a bias gradient: sum over {0, 2, 3} of
// N, C, H, W): its [outer, kept, inner] extents, summed in place by sum_channels. as_rows would
// first copy it kept-major.
struct KeptBlock {
  int64_t outer = 1, kept = 1, inner = 1;
};
std::optional<KeptBlock> kept_block(const Tensor& x, const Axes& axes) {
  constexpr int64_t kMinInner = 16;  // shorter rows: the tiled copy and row sums are faster
  if (!x.device().is_cpu() || !is_floating(x.dtype()) || !x.is_contiguous() || axes.empty()) return std::nullopt;
  auto reduced = [&](int64_t d) { return std::binary_search(axes.begin(), axes.end(), d); };
  int64_t first = 0, last = x.dim() - 1;  // the kept block [first, last]
  while (first < x.dim() && reduced(first)) ++first;
  while (last >= 0 && reduced(last)) --last;
  if (first == 0 || last == x.dim() - 1 || first > last) return std::nullopt;  // not reduced on both sides
  KeptBlock b;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d >= first && d <= last && reduced(d)) return std::nullopt;  // a reduced dim inside the block
    (d < first ? b.outer : d <= last ? b.kept : b.inner) *= x.size(d);
  }
  if (b.inner < kMinInner) return std::nullopt;
  return b;
}

Tensor sum_forward(const Tensor& x, const Axes& axes, bool keepdim) {
  if (auto b = kept_block(x, axes)) {
    NoGradGuard forward_only;
    Tensor out = empty({b->kept}, {.dtype = x.dtype(), .device = x.device()});
    kernels::cpu::sum_channels(x.dtype(), b->outer, b->kept, b->inner, x.data_ptr(), out.data_ptr());
    return out.view(detail::reduced_shape(x.shape(), axes, keepdim));
  }
  return reduce_into(
      x, axes, keepdim, sum_dtype(x.dtype()),
      [&](int64_t rows, int64_t cols, const void* in, void* out) {
        kernels::cpu::sum_rows(x.dtype(), rows, cols, in, out);
      },
      [&](auto shape, const void* in, void* out, auto stream) {
        GENESIS_ON_CUDA(kernels::cuda::sum(x.dtype(), shape, in, out, stream));
      });
}

// max/min values and first indices over `axes`, which must not be empty. No autograd.
ValuesIndices extreme_forward(Extreme which, const Tensor& x, const Axes& axes, bool keepdim) {
  NoGradGuard forward_only;
  detail::ReductionLayout l = layout_of(x, axes);
  Tensor values = empty({l.outer * l.inner}, {.dtype = x.dtype(), .device = x.device()});
  Tensor indices = empty({l.outer * l.inner}, {.dtype = DType::i64, .device = x.device()});
  if (x.device().is_cpu()) {
    kernels::cpu::extreme_rows(which, x.dtype(), l.outer, l.extent, l.source.data_ptr(), values.data_ptr(),
                               indices.data<int64_t>());
  } else {
    GENESIS_ON_CUDA(kernels::cuda::extreme(which, x.dtype(), shape_of(l), l.source.data_ptr(), values.data_ptr(),
                                           indices.data<int64_t>(), cuda::current_stream()));
  }
  Shape shape = detail::reduced_shape(x.shape(), axes, keepdim);
  return {values.view(shape), indices.view(shape)};
}

// The single normalized axis of max/min/argmax/argmin (none for a 0-d input); refuses an empty axis.
Axes extreme_axis(const char* op, const Tensor& x, int64_t axis) {
  Axes axes = checked_axes(op, x, {axis});
  GENESIS_CHECK(reduced_count(x.shape(), axes) > 0, ValueError, op, ": cannot reduce over axis ", axis,
                " of size 0 (input shape ", x.shape(), ")");
  return axes;
}

ValuesIndices extreme_along(Extreme which, const char* op, const Tensor& x, int64_t axis, bool keepdim) {
  Axes axes = extreme_axis(op, x, axis);
  ValuesIndices out = extreme_forward(which, x, axes, keepdim);
  if (needs_grad({x})) {
    record(op, {x}, {out.values}, [in = x.shape(), axes, keepdim, idx = saved(out.indices)](const TensorList& g) {
      if (axes.empty()) return TensorList{g[0]};  // 0-d input
      // The gradient goes to the selected position of each reduced line.
      const auto ax = static_cast<size_t>(axes[0]);
      Shape position_shape(in.size(), 1);
      position_shape[ax] = in[ax];
      Tensor positions = arange(in[ax], {.dtype = DType::i64, .device = idx.device()}).view(position_shape);
      Tensor selected = eq(positions, unsqueeze_reduced(idx, in, axes, keepdim));
      return TensorList{where(selected, unsqueeze_reduced(g[0], in, axes, keepdim), 0.0)};
    });
  }
  return out;
}

Tensor extreme_all(Extreme which, const char* op, const Tensor& x) {
  detail::check_defined(op, x, "input");
  GENESIS_CHECK(x.numel() > 0, ValueError, op, ": cannot reduce an empty tensor (shape ", x.shape(), ")");
  Tensor out = extreme_forward(which, x, detail::reduction_axes({}, x.dim(), op), false).values;
  if (needs_grad({x})) {
    record(op, {x}, {out}, [xs = saved(x), os = saved(out)](const TensorList& g) {
      // Every element equal to the result (NaNs when it is NaN) gets an equal share.
      Tensor ties = add(eq(xs, os), mul(ne(xs, xs), ne(os, os)));
      return TensorList{where(ties, div(g[0], sum(ties)), 0.0)};
    });
  }
  return out;
}

Tensor var_forward(const Tensor& x, const Axes& axes, int64_t correction, bool keepdim) {
  Tensor xf = to_floating(x);
  return reduce_into(
      xf, axes, keepdim, xf.dtype(),
      [&](int64_t rows, int64_t cols, const void* in, void* out) {
        kernels::cpu::var_rows(xf.dtype(), rows, cols, correction, in, out);
      },
      [&](auto shape, const void* in, void* out, auto stream) {
        GENESIS_ON_CUDA(kernels::cuda::var(xf.dtype(), shape, correction, in, out, stream));
      });
}

// x - mean(x) over axes (kept as size 1) and the divisor n - correction of var.
Tensor centered(const Tensor& x, const Axes& axes) { return sub(x, mean(x, axes, /*keepdim=*/true)); }
double var_divisor(const Tensor& x, const Axes& axes, int64_t correction) {
  return static_cast<double>(reduced_count(x.shape(), axes) - correction);
}

Tensor norm_backward(const Tensor& x, const Tensor& norm_out, const Tensor& g, double p, const Axes& axes) {
  if (p == 0.0) return zeros_like(x);
  if (p == 1.0) return mul(sign(x), g);  // sign(0) = 0 is the subgradient at zero
  if (std::isinf(p)) {
    // The entries whose |x| equals the norm share the gradient evenly.
    Tensor hits = eq(abs(x), norm_out);
    return where(hits, div(mul(sign(x), g), sum(hits, axes, /*keepdim=*/true)), 0.0);
  }
  // d/dx (sum |x|^p)^(1/p) = sign(x) |x|^(p-1) / norm^(p-1), taken as 0 where x = 0 or the
  // norm is 0 (so a zero vector gets a zero gradient).
  Tensor scaled_x = where(ne(x, 0.0), mul(sign(x), pow(abs(x), p - 1.0)), 0.0);
  Tensor scale = where(ne(norm_out, 0.0), div(g, pow(norm_out, p - 1.0)), 0.0);
  return mul(scaled_x, scale);
}

}  // namespace

Tensor sum(const Tensor& x_arg, const Axes& axes_in, bool keepdim) {
  auto [x] = detail::op_prologue<OpId::sum>(x_arg);
  detail::check_defined("sum", x, "input");
  Axes axes = detail::reduction_axes(axes_in, x.dim(), "sum");
  Tensor out = sum_forward(x, axes, keepdim);
  if (needs_grad({x})) {
    record("sum", {x}, {out}, [in = x.shape(), axes, keepdim](const TensorList& g) {
      return TensorList{unsqueeze_reduced(g[0], in, axes, keepdim).expand(in).contiguous()};
    });
  }
  return out;
}

Tensor mean(const Tensor& x_arg, const Axes& axes_in, bool keepdim) {
  auto [x] = detail::op_prologue<OpId::mean>(x_arg);
  detail::check_defined("mean", x, "input");
  Axes axes = detail::reduction_axes(axes_in, x.dim(), "mean");
  Tensor xf = to_floating(x);
  Tensor out = reduce_into(
      xf, axes, keepdim, xf.dtype(),
      [&](int64_t rows, int64_t cols, const void* in, void* o) { kernels::cpu::mean_rows(xf.dtype(), rows, cols, in, o); },
      [&](auto shape, const void* in, void* o, auto stream) {
        GENESIS_ON_CUDA(kernels::cuda::mean(xf.dtype(), shape, in, o, stream));
      });
  if (needs_grad({xf})) {
    record("mean", {xf}, {out}, [in = xf.shape(), axes, keepdim](const TensorList& g) {
      const auto count = static_cast<double>(reduced_count(in, axes));
      return TensorList{div(unsqueeze_reduced(g[0], in, axes, keepdim), count).expand(in).contiguous()};
    });
  }
  return out;
}

Tensor prod(const Tensor& x_arg, const Axes& axes_in, bool keepdim) {
  auto [x] = detail::op_prologue<OpId::prod>(x_arg);
  Axes axes = checked_axes("prod", x, axes_in);
  Tensor out = reduce_into(
      x, axes, keepdim, sum_dtype(x.dtype()),
      [dtype = x.dtype()](int64_t rows, int64_t cols, const void* in, void* o) {
        kernels::cpu::prod_rows(dtype, rows, cols, in, o);
      },
      [dtype = x.dtype()](auto shape, const void* in, void* o, auto stream) {
        GENESIS_ON_CUDA(kernels::cuda::prod(dtype, shape, in, o, stream));
      });
  if (needs_grad({x})) {
    record("prod", {x}, {out}, [xs = saved(x), axes](const TensorList& g) {
      // Each element's gradient is the product of the others in its row (exact with zeros).
      // CUDA computes f16/bf16 in f32, as its prefix products are kept in the output buffer.
      const bool on_cpu = xs.device().is_cpu();
      const DType compute = on_cpu || xs.dtype() == DType::f64 ? xs.dtype() : DType::f32;
      Tensor rows = detail::as_rows(xs.to(compute), axes);
      Tensor grad_out = g[0].to(compute).contiguous();
      Tensor grad_rows = empty(rows.shape(), {.dtype = compute, .device = xs.device()});
      if (on_cpu) {
        kernels::cpu::prod_rows_backward(compute, rows.size(0), rows.size(1), rows.data_ptr(), grad_out.data_ptr(),
                                         grad_rows.data_ptr());
      } else {
        GENESIS_ON_CUDA(kernels::cuda::prod_rows_backward(compute, rows.size(0), rows.size(1), rows.data_ptr(),
                                                          grad_out.data_ptr(), grad_rows.data_ptr(),
                                                          cuda::current_stream()));
      }
      return TensorList{detail::from_rows(grad_rows.to(xs.dtype()), xs.shape(), axes)};
    });
  }
  return out;
}

ValuesIndices max(const Tensor& x_arg, int64_t axis, bool keepdim) {
  auto [x] = detail::op_prologue<OpId::max>(x_arg);
  return extreme_along(Extreme::max, "max", x, axis, keepdim);
}
ValuesIndices min(const Tensor& x_arg, int64_t axis, bool keepdim) {
  auto [x] = detail::op_prologue<OpId::min>(x_arg);
  return extreme_along(Extreme::min, "min", x, axis, keepdim);
}
Tensor max(const Tensor& x_arg) {
  auto [x] = detail::op_prologue<OpId::max>(x_arg);
  return extreme_all(Extreme::max, "max", x);
}
Tensor min(const Tensor& x_arg) {
  auto [x] = detail::op_prologue<OpId::min>(x_arg);
  return extreme_all(Extreme::min, "min", x);
}

Tensor argmax(const Tensor& x_arg, int64_t axis, bool keepdim) {
  auto [x] = detail::op_prologue<OpId::argmax>(x_arg);
  return extreme_forward(Extreme::max, x, extreme_axis("argmax", x, axis), keepdim).indices;
}
Tensor argmin(const Tensor& x_arg, int64_t axis, bool keepdim) {
  auto [x] = detail::op_prologue<OpId::argmin>(x_arg);
  return extreme_forward(Extreme::min, x, extreme_axis("argmin", x, axis), keepdim).indices;
}

Tensor var(const Tensor& x_arg, const Axes& axes_in, bool unbiased, bool keepdim) {
  auto [x] = detail::op_prologue<OpId::var>(x_arg);
  Axes axes = checked_axes("var", x, axes_in);
  int64_t correction = unbiased ? 1 : 0;
  Tensor out = var_forward(x, axes, correction, keepdim);
  if (needs_grad({x})) {
    record("var", {x}, {out}, [xs = saved(x), axes, keepdim, correction](const TensorList& g) {
      Tensor gk = unsqueeze_reduced(g[0], xs.shape(), axes, keepdim);
      return TensorList{mul(centered(xs, axes), mul(gk, 2.0 / var_divisor(xs, axes, correction)))};
    });
  }
  return out;
}

Tensor std(const Tensor& x_arg, const Axes& axes_in, bool unbiased, bool keepdim) {
  auto [x] = detail::op_prologue<OpId::std>(x_arg);
  Axes axes = checked_axes("std", x, axes_in);
  int64_t correction = unbiased ? 1 : 0;
  Tensor out = sqrt(var_forward(x, axes, correction, keepdim));
  if (needs_grad({x})) {
    record("std", {x}, {out}, [xs = saved(x), os = saved(out), axes, keepdim, correction](const TensorList& g) {
      // d std = d var / (2 std); a zero std gives a zero gradient.
      Tensor sk = unsqueeze_reduced(os, xs.shape(), axes, keepdim);
      Tensor gk = unsqueeze_reduced(g[0], xs.shape(), axes, keepdim);
      Tensor scale = where(ne(sk, 0.0), div(gk, sk), 0.0);
      return TensorList{mul(centered(xs, axes), div(scale, var_divisor(xs, axes, correction)))};
    });
  }
  return out;
}

Tensor logsumexp(const Tensor& x_arg, const Axes& axes_in, bool keepdim) {
  auto [x] = detail::op_prologue<OpId::logsumexp>(x_arg);
  Axes axes = checked_axes("logsumexp", x, axes_in);
  Tensor xf = to_floating(x);
  Tensor out = reduce_into(
      xf, axes, keepdim, xf.dtype(),
      [&](int64_t rows, int64_t cols, const void* in, void* o) {
        kernels::cpu::logsumexp_rows(xf.dtype(), rows, cols, in, o);
      },
      [&](auto shape, const void* in, void* o, auto stream) {
        GENESIS_ON_CUDA(kernels::cuda::logsumexp(xf.dtype(), shape, in, o, stream));
      });
  if (needs_grad({x})) {
    record("logsumexp", {x}, {out}, [xs = saved(x), os = saved(out), axes, keepdim](const TensorList& g) {
      // g * softmax(x); rows that are all -inf (result -inf) get a zero gradient, not NaN.
      const double neg_inf = -std::numeric_limits<double>::infinity();
      Tensor ok = unsqueeze_reduced(os, xs.shape(), axes, keepdim);
      Tensor shift = where(ne(ok, neg_inf), ok, 0.0);
      return TensorList{mul(exp(sub(xs, shift)), unsqueeze_reduced(g[0], xs.shape(), axes, keepdim))};
    });
  }
  return out;
}

Tensor norm(const Tensor& x_arg, double p, const Axes& axes_in, bool keepdim) {
  auto [x] = detail::op_prologue<OpId::norm>(x_arg);
  Axes axes = checked_axes("norm", x, axes_in);
  GENESIS_CHECK(!std::isnan(p), ValueError, "norm: p must be a number or +-inf (got NaN)");
  Tensor xf = to_floating(x);
  Tensor out = reduce_into(
      xf, axes, keepdim, xf.dtype(),
      [&](int64_t rows, int64_t cols, const void* in, void* o) {
        kernels::cpu::norm_rows(xf.dtype(), rows, cols, p, in, o);
      },
      [&](auto shape, const void* in, void* o, auto stream) {
        GENESIS_ON_CUDA(kernels::cuda::norm(xf.dtype(), shape, p, in, o, stream));
      });
  if (needs_grad({x})) {
    record("norm", {x}, {out}, [xs = saved(x), os = saved(out), p, axes, keepdim](const TensorList& g) {
      return TensorList{norm_backward(xs, unsqueeze_reduced(os, xs.shape(), axes, keepdim),
                                      unsqueeze_reduced(g[0], xs.shape(), axes, keepdim), p, axes)};
    });
  }
  return out;
}

}  // namespace genesis
