// Neural-network functions: argument checks, dispatch to the CPU or CUDA kernels, and backward
// formulas (fused kernels for softmax and the norms, a deterministic scatter-add for
// embedding, the saved keep-mask for dropout).
#include "libgenesis/ops/nn.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "kernels/cpu/nn.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/prologue.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/index.h"
#include "kernels/cuda/nn.h"
#endif

namespace genesis {

namespace detail {

int64_t check_index_values(std::string_view op, const Tensor& index, int64_t bound, std::optional<int64_t> ignore,
                           std::string_view what, std::string_view bound_name) {
  Tensor idx = index.contiguous();
  kernels::cpu::IndexStats s = kernels::cpu::index_stats(idx.dtype(), idx.numel(), idx.data_ptr(), ignore);
  if (s.count > 0) {
    const int64_t bad = s.min < 0 ? s.min : s.max;
    GENESIS_CHECK(s.min >= 0 && s.max < bound, IndexError, op, ": ", what, " ", bad, " is out of range for ", bound,
                  " ", bound_name);
  }
  return s.count;
}

}  // namespace detail

namespace {

// Row statistics (and dropout's scale) live in the accumulator dtype, so half inputs round once.
DType acc_dtype(DType dtype) {
  return dtype == DType::f64 ? DType::f64 : DType::f32;
}

#if GENESIS_WITH_CUDA
// The CUDA softmax kernels work on the last axis: another axis is swapped with the last one
// (a contiguous copy) and swapped back afterwards.
Tensor with_axis_last(const Tensor& t, int64_t axis) {
  const bool last = t.dim() == 0 || axis == t.dim() - 1;
  return (last ? t : t.transpose(axis, t.dim() - 1)).contiguous();
}

Tensor softmax_cuda(bool log, const Tensor& x, int64_t axis, int64_t dim) {
  Tensor xt = with_axis_last(x, axis);
  Tensor yt = empty(xt.shape(), {.dtype = x.dtype(), .device = x.device()});
  kernels::cuda::softmax(x.dtype(), log, dim == 0 ? 0 : xt.numel() / dim, dim, xt.data_ptr(), yt.data_ptr(),
                         cuda::current_stream());
  return with_axis_last(yt, axis);
}

Tensor softmax_backward_cuda(bool log, const Tensor& y, const Tensor& grad_y, int64_t axis, int64_t dim) {
  Tensor yt = with_axis_last(y, axis);
  Tensor gyt = with_axis_last(grad_y, axis);
  Tensor gxt = empty(yt.shape(), {.dtype = y.dtype(), .device = y.device()});
  kernels::cuda::softmax_backward(y.dtype(), log, dim == 0 ? 0 : yt.numel() / dim, dim, yt.data_ptr(), gyt.data_ptr(),
                                  gxt.data_ptr(), cuda::current_stream());
  return with_axis_last(gxt, axis);
}
#endif

Tensor softmax_family(const char* name, bool log, const Tensor& x, int64_t axis_in) {
  detail::check_defined(name, x, "input");
  detail::check_floating(name, x);
  const int64_t axis = normalize_axis(axis_in, std::max<int64_t>(x.dim(), 1), name);
  int64_t outer = 1, dim = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) (d < axis ? outer : d == axis ? dim : inner) *= x.size(d);
  Tensor y;
  {
    NoGradGuard forward_only;
    if (x.device().is_cpu()) {
      y = empty(x.shape(), {.dtype = x.dtype()});
      Tensor xc = x.contiguous();
      kernels::cpu::softmax(x.dtype(), log, outer, dim, inner, xc.data_ptr(), y.data_ptr());
    } else {
      GENESIS_ON_CUDA(y = softmax_cuda(log, x, axis, dim));
    }
  }
  if (needs_grad({x})) {
    record(name, {x}, {y}, [log, axis, outer, dim, inner, ys = saved(y)](const TensorList& g) {
      Tensor gy = g[0].to(ys.dtype());
      Tensor gx;
      if (ys.device().is_cpu()) {
        gy = gy.contiguous();
        gx = empty_like(ys);
        kernels::cpu::softmax_backward(ys.dtype(), log, outer, dim, inner, ys.data_ptr(), gy.data_ptr(), gx.data_ptr());
      } else {
        GENESIS_ON_CUDA(gx = softmax_backward_cuda(log, ys, gy, axis, dim));
      }
      return TensorList{gx};
    });
  }
  return y;
}

// Layer norm (centered) or RMS norm over the trailing `normalized_shape` dimensions. x is read
// in its own dtype and the parameters in theirs (f32 parameters with a 16-bit x need no cast);
// the result has x's dtype, or under autocast (the low_out policy) the autocast dtype, which is
// what the matrix product after a norm reads.
Tensor normalize(const char* name, bool centered, const Tensor& x, const Shape& normalized_shape,
                 const Tensor& weight_arg, const Tensor& bias_arg, double eps) {
  detail::check_defined(name, x, "input");
  detail::check_floating(name, x);
  const auto k = static_cast<int64_t>(normalized_shape.size());
  const bool trailing =
      k >= 1 && k <= x.dim() && std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape().end() - k);
  GENESIS_CHECK(trailing, ShapeError, name, ": normalized_shape ", normalized_shape,
                " must be non-empty and match the trailing dimensions of the input of shape ", x.shape());
  auto check_shape = [&](const Tensor& t, const char* arg) {
    GENESIS_CHECK(!t.defined() || t.shape() == normalized_shape, ShapeError, name, ": ", arg, " of shape ", t.shape(),
                  " does not match normalized_shape ", normalized_shape);
  };
  check_shape(weight_arg, "weight");
  check_shape(bias_arg, "bias");
  GENESIS_CHECK(!weight_arg.defined() || !bias_arg.defined() || weight_arg.dtype() == bias_arg.dtype(), DTypeError,
                name, ": weight has dtype ", dtype_name(weight_arg.dtype()), " but bias has ",
                dtype_name(bias_arg.dtype()));
  GENESIS_CHECK(eps >= 0.0 && std::isfinite(eps), ValueError, name, ": eps must be finite and >= 0 (got ", eps, ")");
  // f64 stays f64 under autocast, as for the other policies.
  const std::optional<DType> autocast = detail::current_op_autocast();
  const DType y_dtype = autocast && x.dtype() != DType::f64 ? *autocast : x.dtype();
  // Without parameters, the weight dtype only picks the kernel: x's, or f32 for a mixed one.
  const Tensor& param = weight_arg.defined() ? weight_arg : bias_arg;
  const DType param_dtype = param.defined() ? param.dtype() : y_dtype == x.dtype() ? x.dtype() : DType::f32;
  kernels::NormDTypes dtypes{x.dtype(), param_dtype, y_dtype};
  Tensor weight = weight_arg, bias = bias_arg;
  if (autocast && !kernels::norm_dtypes_supported(dtypes) && is_floating(dtypes.weight)) {
    // Parameters the kernels do not pair with x (bf16 ones with an f32 input, ...): cast them, not
    // x, to f32 rather than fail.
    if (weight.defined()) weight = weight.to(DType::f32);
    if (bias.defined()) bias = bias.to(DType::f32);
    dtypes.weight = DType::f32;
  }
  GENESIS_CHECK(kernels::norm_dtypes_supported(dtypes), DTypeError, name, ": ", weight.defined() ? "weight" : "bias",
                " has dtype ", dtype_name(dtypes.weight), " but the input has ", dtype_name(x.dtype()),
                " (parameters take the input's dtype, or f32 with an f32, f16 or bf16 input)");
  const int64_t cols = numel_of(normalized_shape);
  const int64_t rows = numel_of(Shape(x.shape().begin(), x.shape().end() - k));
  Tensor xc, wc, bc;
  Tensor y = empty(x.shape(), {.dtype = y_dtype, .device = x.device()});
  Tensor mean = empty({rows}, {.dtype = acc_dtype(x.dtype()), .device = x.device()});
  Tensor rstd = empty({rows}, {.dtype = acc_dtype(x.dtype()), .device = x.device()});
  {
    NoGradGuard forward_only;
    xc = x.contiguous();
    if (weight.defined()) wc = weight.contiguous();
    if (bias.defined()) bc = bias.contiguous();
    const void* w = wc.defined() ? wc.data_ptr() : nullptr;
    const void* b = bc.defined() ? bc.data_ptr() : nullptr;
    if (x.device().is_cpu()) {
      kernels::cpu::norm_rows(dtypes, centered, rows, cols, xc.data_ptr(), w, b, eps, y.data_ptr(), mean.data_ptr(),
                              rstd.data_ptr());
    } else {
      GENESIS_ON_CUDA(kernels::cuda::norm_rows(dtypes, centered, rows, cols, xc.data_ptr(), w, b, eps, y.data_ptr(),
                                               mean.data_ptr(), rstd.data_ptr(), cuda::current_stream()));
    }
  }
  // The backward reads x, the weight and the row statistics (never y): grad_x in x's dtype, the
  // parameter gradients in theirs, from grad_y in y's dtype.
  TensorList inputs = centered ? TensorList{x, weight, bias} : TensorList{x, weight};
  if (needs_grad(inputs)) {
    record(name, inputs, {y},
           [dtypes, centered, rows, cols, normalized_shape, has_bias = bias.defined(), xs = saved(xc), ws = saved(wc),
            means = saved(mean), rstds = saved(rstd)](const TensorList& g) {
             const Device device = xs.device();
             Tensor gy = g[0].to(dtypes.y).contiguous();
             Tensor gx = empty_like(xs);
             const TensorOptions param_options{.dtype = dtypes.weight, .device = device};
             Tensor gw = ws.defined() ? empty(normalized_shape, param_options) : Tensor();
             Tensor gb = has_bias ? empty(normalized_shape, param_options) : Tensor();
             const void* w = ws.defined() ? ws.data_ptr() : nullptr;
             void* gw_ptr = gw.defined() ? gw.data_ptr() : nullptr;
             void* gb_ptr = gb.defined() ? gb.data_ptr() : nullptr;
             if (device.is_cpu()) {
               kernels::cpu::norm_rows_backward(dtypes, centered, rows, cols, xs.data_ptr(), w, means.data_ptr(),
                                                rstds.data_ptr(), gy.data_ptr(), gx.data_ptr(), gw_ptr, gb_ptr);
             } else {
               GENESIS_ON_CUDA({
                 // Per-chunk column sums of the weight and bias gradients, added in chunk order.
                 const int64_t partial_count =
                     gw.defined() || gb.defined() ? 2 * kernels::cuda::norm_backward_chunks(dtypes.x, rows, cols) * cols
                                                  : 0;
                 Tensor partials = empty({partial_count}, {.dtype = acc_dtype(dtypes.x), .device = device});
                 kernels::cuda::norm_rows_backward(dtypes, centered, rows, cols, xs.data_ptr(), w, means.data_ptr(),
                                                   rstds.data_ptr(), gy.data_ptr(), gx.data_ptr(), gw_ptr, gb_ptr,
                                                   partials.data_ptr(), cuda::current_stream());
               });
             }
             return centered ? TensorList{gx, gw, gb} : TensorList{gx, gw};
           });
  }
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x_arg, int64_t axis) {
  auto [x] = detail::op_prologue<OpId::softmax>(x_arg);
  return softmax_family("softmax", false, x, axis);
}
Tensor log_softmax(const Tensor& x_arg, int64_t axis) {
  auto [x] = detail::op_prologue<OpId::log_softmax>(x_arg);
  return softmax_family("log_softmax", true, x, axis);
}

Tensor layer_norm(const Tensor& x_arg, const Shape& normalized_shape, const Tensor& weight_arg, const Tensor& bias_arg,
                  double eps) {
  auto [x, weight, bias] = detail::op_prologue<OpId::layer_norm>(x_arg, weight_arg, bias_arg);
  return normalize("layer_norm", true, x, normalized_shape, weight, bias, eps);
}

Tensor rms_norm(const Tensor& x_arg, const Shape& normalized_shape, const Tensor& weight_arg, double eps) {
  auto [x, weight] = detail::op_prologue<OpId::rms_norm>(x_arg, weight_arg);
  return normalize("rms_norm", false, x, normalized_shape, weight, Tensor(), eps);
}

Tensor embedding(const Tensor& indices_arg, const Tensor& weight_arg, std::optional<int64_t> padding_idx) {
  auto [indices, weight] = detail::op_prologue<OpId::embedding>(indices_arg, weight_arg);
  detail::check_defined("embedding", indices, "indices");
  detail::check_defined("embedding", weight, "weight");
  detail::check_index_dtype("embedding", indices);
  detail::check_floating("embedding", weight);
  GENESIS_CHECK(weight.dim() == 2, ShapeError, "embedding: weight must be 2-D [num_embeddings, dim], got shape ",
                weight.shape());
  const int64_t num = weight.size(0), dim = weight.size(1);
  int64_t pad = -1;
  if (padding_idx) {
    GENESIS_CHECK(*padding_idx >= -num && *padding_idx < num, ValueError, "embedding: padding_idx ", *padding_idx,
                  " is out of range for ", num, " embeddings");
    pad = *padding_idx < 0 ? *padding_idx + num : *padding_idx;
  }
  Tensor idx = indices.contiguous();
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  Tensor out = empty(out_shape, {.dtype = weight.dtype(), .device = weight.device()});
  {
    NoGradGuard forward_only;
    Tensor wc = weight.contiguous();
    if (weight.device().is_cpu()) {
      detail::check_index_values("embedding", idx, num, std::nullopt, "index", "embeddings");
      kernels::cpu::embedding(weight.dtype(), idx.dtype(), idx.numel(), idx.data_ptr(), dim, wc.data_ptr(),
                              out.data_ptr());
    } else {
      // The gather checks the indices as it goes and reports a bad one asynchronously.
      GENESIS_ON_CUDA({
        static const int fault_op = cuda::fault_op_id("embedding");
        kernels::cuda::embedding(weight.dtype(), idx.dtype(), idx.numel(), idx.data_ptr(), num, dim, wc.data_ptr(),
                                 out.data_ptr(), cuda::kernel_fault_slot(), fault_op, cuda::current_stream());
      });
    }
  }
  if (needs_grad({weight})) {
    record("embedding", {weight}, {out},
           [num, dim, pad, dt = weight.dtype(), device = weight.device(), idxs = saved(idx)](const TensorList& g) {
             Tensor gy = g[0].to(dt).contiguous();
             Tensor gw = empty({num, dim}, {.dtype = dt, .device = device});
             if (device.is_cpu()) {
               kernels::cpu::embedding_backward(dt, idxs.dtype(), idxs.numel(), idxs.data_ptr(), num, dim,
                                                gy.data_ptr(), pad, gw.data_ptr());
             } else {
               GENESIS_ON_CUDA({
                 const size_t bytes = kernels::cuda::embedding_backward_workspace_bytes(idxs.numel(), num);
                 Tensor workspace = empty({static_cast<int64_t>(bytes)}, {.dtype = DType::boolean, .device = device});
                 kernels::cuda::embedding_backward(dt, idxs.dtype(), idxs.numel(), idxs.data_ptr(), num, dim,
                                                   gy.data_ptr(), pad, gw.data_ptr(), workspace.data_ptr(), bytes,
                                                   cuda::current_stream());
               });
             }
             return TensorList{gw};
           });
  }
  return out;
}

#if GENESIS_WITH_CUDA
namespace {

// One fused kernel draws the mask (the bits of the CPU's bernoulli at the same generator state,
// which advances by as many counters) and scales; the backward draws it again from the same
// state instead of keeping it (a byte per element, 315 MB a GPT-2 step at B16 T1024).
Tensor dropout_cuda(const Tensor& x, double p, double scale, Generator* gen) {
  const DType dt = x.dtype();
  const int64_t n = x.numel();
  const GeneratorState state = (gen ? *gen : default_generator()).advance(static_cast<uint64_t>((n + 3) / 4));
  const kernels::cuda::DropoutDraws draws{1.0 - p, state.seed, state.offset};
  Tensor y = empty(x.shape(), {.dtype = dt, .device = x.device()});
  {
    NoGradGuard forward_only;
    Tensor xc = x.contiguous();
    kernels::cuda::dropout_forward(dt, n, xc.data_ptr(), draws, scale, y.data_ptr(), cuda::current_stream());
  }
  if (needs_grad({x})) {
    record("dropout", {x}, {y}, [dt, scale, draws, shape = x.shape()](const TensorList& g) {
      Tensor gy = g[0].to(dt).contiguous();
      Tensor gx = empty(shape, {.dtype = dt, .device = gy.device()});
      kernels::cuda::dropout_backward(dt, gy.numel(), draws, gy.data_ptr(), scale, gx.data_ptr(),
                                      cuda::current_stream());
      return TensorList{gx};
    });
  }
  return y;
}

}  // namespace
#endif

Tensor dropout(const Tensor& x_arg, double p, bool training, Generator* gen) {
  auto [x] = detail::op_prologue<OpId::dropout>(x_arg);
  detail::check_defined("dropout", x, "input");
  detail::check_floating("dropout", x);
  GENESIS_CHECK(p >= 0.0 && p <= 1.0, ValueError, "dropout: p must be in [0, 1] (got ", p, ")");
  if (!training || p == 0.0) return x;
  const DType dt = x.dtype();
  const double scale_value = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  if (!x.device().is_cpu()) GENESIS_ON_CUDA(return dropout_cuda(x, p, scale_value, gen));
  Tensor scale = scalar_tensor(scale_value, {.dtype = acc_dtype(dt)});
  Tensor keep, y;
  {
    NoGradGuard forward_only;
    keep = bernoulli(x.shape(), 1.0 - p, {.dtype = DType::boolean}, gen);
    y = where(keep, mul(x, scale).to(dt), 0.0);
  }
  if (needs_grad({x})) {
    record("dropout", {x}, {y}, [dt, scale, keeps = saved(keep)](const TensorList& g) {
      return TensorList{where(keeps, mul(g[0], scale).to(dt), 0.0)};
    });
  }
  return y;
}

Tensor one_hot(const Tensor& indices_arg, int64_t num_classes) {
  auto [indices] = detail::op_prologue<OpId::one_hot>(indices_arg);
  detail::check_defined("one_hot", indices, "indices");
  detail::check_index_dtype("one_hot", indices);
  Tensor idx = indices.contiguous();
  if (num_classes < 0) {
    GENESIS_CHECK(idx.numel() > 0, ValueError,
                  "one_hot: cannot infer num_classes from an empty index tensor; pass num_classes");
    // The output shape depends on the largest index, so CUDA indices are read on the host: the
    // one synchronizing path of the index-taking ops (PyTorch's one_hot waits here as well).
    Tensor host_idx = idx.to(kCPU);
    kernels::cpu::IndexStats s =
        kernels::cpu::index_stats(host_idx.dtype(), host_idx.numel(), host_idx.data_ptr(), std::nullopt);
    GENESIS_CHECK(s.min >= 0, IndexError, "one_hot: index ", s.min, " is negative");
    num_classes = s.max + 1;
  } else if (idx.device().is_cpu()) {
    detail::check_index_values("one_hot", idx, num_classes, std::nullopt, "index", "classes");
  } else {
    // The kernel checks the indices and reports a bad one asynchronously; with no classes every
    // index is bad, yet the output is empty and no kernel runs, so that is caught here.
    GENESIS_CHECK(num_classes > 0 || idx.numel() == 0, IndexError, "one_hot: ", idx.numel(),
                  " indices given for 0 classes; every index is out of range");
  }
  Shape out_shape = indices.shape();
  out_shape.push_back(num_classes);
  Tensor out = empty(out_shape, {.dtype = DType::i64, .device = idx.device()});
  if (idx.device().is_cpu()) {
    kernels::cpu::one_hot(idx.dtype(), idx.numel(), idx.data_ptr(), num_classes, out.data<int64_t>());
  } else {
    GENESIS_ON_CUDA({
      static const int fault_op = cuda::fault_op_id("one_hot");
      kernels::cuda::one_hot(idx.dtype(), idx.numel(), idx.data_ptr(), num_classes, out.data<int64_t>(),
                             cuda::kernel_fault_slot(), fault_op, cuda::current_stream());
    });
  }
  return out;
}

}  // namespace genesis
