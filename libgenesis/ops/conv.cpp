// Convolution and pooling: argument checks, dispatch to the CPU or CUDA kernels, and backward
// formulas. Half types convolve in f32 on both devices.
#include "libgenesis/ops/conv.h"

#include <climits>

#include "kernels/cpu/conv.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/prologue.h"
#include "libgenesis/ops/reduce.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/conv.h"
#endif

namespace genesis {

namespace {

using kernels::cpu::Conv2dShape;
using kernels::cpu::Pool2dShape;

std::string pair_str(Pair p) { return detail::concat("(", p[0], ", ", p[1], ")"); }

// Number of window positions along one dimension: floor((in + 2 pad - dilation (kernel - 1) - 1) / stride) + 1,
// or 0 when the dilated kernel does not fit in the padded input.
int64_t window_count(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  int64_t span = in + 2 * pad - dilation * (kernel - 1);
  return span <= 0 ? 0 : (span - 1) / stride + 1;
}

// Half types convolve in f32 (the BLAS GEMM has no 16-bit form).
DType conv_compute_type(DType t) { return is_half(t) ? DType::f32 : t; }

Conv2dShape conv_shape(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  GENESIS_CHECK(x.dim() == 4, ShapeError, "conv2d: input must be 4-D [N, C_in, H, W], got shape ", x.shape());
  GENESIS_CHECK(weight.dim() == 4, ShapeError, "conv2d: weight must be 4-D [C_out, C_in / groups, kH, kW], got shape ",
                weight.shape());
  detail::check_floating("conv2d", x);
  detail::check_same_dtype("conv2d", x, weight);
  GENESIS_CHECK(o.groups >= 1, ValueError, "conv2d: groups must be positive (got ", o.groups, ")");
  GENESIS_CHECK(o.stride[0] >= 1 && o.stride[1] >= 1, ValueError, "conv2d: stride must be positive (got ",
                pair_str(o.stride), ")");
  GENESIS_CHECK(o.dilation[0] >= 1 && o.dilation[1] >= 1, ValueError, "conv2d: dilation must be positive (got ",
                pair_str(o.dilation), ")");
  GENESIS_CHECK(o.padding[0] >= 0 && o.padding[1] >= 0, ValueError, "conv2d: padding must be non-negative (got ",
                pair_str(o.padding), ")");
  const int64_t in_channels = x.size(1), out_channels = weight.size(0);
  GENESIS_CHECK(weight.numel() > 0, ShapeError, "conv2d: weight of shape ", weight.shape(), " is empty");
  GENESIS_CHECK(out_channels % o.groups == 0, ShapeError, "conv2d: groups = ", o.groups,
                " does not divide the weight's ", out_channels, " output channels (weight shape ", weight.shape(), ")");
  GENESIS_CHECK(weight.size(1) * o.groups == in_channels, ShapeError, "conv2d: weight of shape ", weight.shape(),
                " with groups = ", o.groups, " expects ", weight.size(1) * o.groups,
                " input channels, but the input of shape ", x.shape(), " has ", in_channels);
  if (bias.defined()) {
    detail::check_same_dtype("conv2d", x, bias);
    GENESIS_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, ShapeError, "conv2d: bias of shape ", bias.shape(),
                  " does not match the weight's ", out_channels, " output channels");
  }
  Conv2dShape s;
  s.batch = x.size(0);
  s.in_channels = in_channels;
  s.height = x.size(2);
  s.width = x.size(3);
  s.out_channels = out_channels;
  s.kernel_h = weight.size(2);
  s.kernel_w = weight.size(3);
  s.stride_h = o.stride[0];
  s.stride_w = o.stride[1];
  s.pad_h = o.padding[0];
  s.pad_w = o.padding[1];
  s.dilation_h = o.dilation[0];
  s.dilation_w = o.dilation[1];
  s.groups = o.groups;
  s.out_h = window_count(s.height, s.kernel_h, s.stride_h, s.pad_h, s.dilation_h);
  s.out_w = window_count(s.width, s.kernel_w, s.stride_w, s.pad_w, s.dilation_w);
  GENESIS_CHECK(s.out_h > 0 && s.out_w > 0, ShapeError, "conv2d: input of shape ", x.shape(), " with padding ",
                pair_str(o.padding), " is smaller than the kernel ", pair_str({s.kernel_h, s.kernel_w}),
                " dilated by ", pair_str(o.dilation));
  GENESIS_CHECK(s.out_h * s.out_w <= INT_MAX && weight.numel() / o.groups <= INT_MAX, ShapeError,
                "conv2d: input of shape ", x.shape(), " and weight of shape ", weight.shape(),
                " exceed the 32-bit sizes of the BLAS GEMM");
  return s;
}

Pool2dShape pool_shape(const char* op, const Tensor& x, const Pool2dOptions& o) {
  detail::check_defined(op, x, "input");
  detail::check_floating(op, x);
  GENESIS_CHECK(x.dim() == 4, ShapeError, op, ": input must be 4-D [N, C, H, W], got shape ", x.shape());
  const Pair stride = o.stride == Pair{0, 0} ? o.kernel : o.stride;
  GENESIS_CHECK(o.kernel[0] >= 1 && o.kernel[1] >= 1, ValueError, op, ": kernel must be positive (got ",
                pair_str(o.kernel), ")");
  GENESIS_CHECK(stride[0] >= 1 && stride[1] >= 1, ValueError, op, ": stride must be positive (got ", pair_str(stride),
                ")");
  // Every window then holds at least one input element, so max pooling always has a real argmax.
  GENESIS_CHECK(o.padding[0] >= 0 && o.padding[1] >= 0 && 2 * o.padding[0] <= o.kernel[0] &&
                    2 * o.padding[1] <= o.kernel[1],
                ValueError, op, ": padding ", pair_str(o.padding), " must be between 0 and half the kernel ",
                pair_str(o.kernel));
  Pool2dShape s;
  s.planes = x.size(0) * x.size(1);
  s.height = x.size(2);
  s.width = x.size(3);
  s.kernel_h = o.kernel[0];
  s.kernel_w = o.kernel[1];
  s.stride_h = stride[0];
  s.stride_w = stride[1];
  s.pad_h = o.padding[0];
  s.pad_w = o.padding[1];
  s.out_h = window_count(s.height, s.kernel_h, s.stride_h, s.pad_h, 1);
  s.out_w = window_count(s.width, s.kernel_w, s.stride_w, s.pad_w, 1);
  GENESIS_CHECK(s.out_h > 0 && s.out_w > 0, ShapeError, op, ": input of shape ", x.shape(), " with padding ",
                pair_str(o.padding), " is smaller than the kernel ", pair_str(o.kernel));
  return s;
}

Shape pooled_shape(const Tensor& x, const Pool2dShape& s) { return {x.size(0), x.size(1), s.out_h, s.out_w}; }

Tensor conv2d_forward_cpu(const Conv2dShape& s, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const DType compute = conv_compute_type(x.dtype());
  Tensor xc = x.to(compute).contiguous(), wc = weight.to(compute).contiguous();
  Tensor bc = bias.defined() ? bias.to(compute).contiguous() : Tensor();
  Tensor y = empty({s.batch, s.out_channels, s.out_h, s.out_w}, {.dtype = compute});
  kernels::cpu::conv2d_forward(compute, s, xc.data_ptr(), wc.data_ptr(), bc.defined() ? bc.data_ptr() : nullptr,
                               y.data_ptr());
  return y.to(x.dtype());
}

struct ConvGrads {
  Tensor x, w, b;
};

// What conv2d's backward keeps of its operands: the input only for the weight's gradient, the
// weight only for the input's.
struct ConvSaved {
  Tensor x, weight;  // undefined where not kept
  Shape x_shape, w_shape;
  DType x_dtype, w_dtype;
  Device device;
};

// Gradients of the input, weight and bias (where asked) from grad_y `gy`, contiguous in the
// compute type: one kernel call (on oneDNN's path, grad_y is reordered once and the weight's
// primitive sums the bias).
ConvGrads conv2d_backward_cpu(const Conv2dShape& s, const ConvSaved& in, const Tensor& gy, bool need_x, bool need_w,
                              bool need_b) {
  const DType compute = gy.dtype();
  ConvGrads grads;
  Tensor wc = need_x ? in.weight.to(compute).contiguous() : Tensor();
  Tensor xc = need_w ? in.x.to(compute).contiguous() : Tensor();
  kernels::cpu::Conv2dGradients out;
  if (need_x) out.x = (grads.x = empty(in.x_shape, {.dtype = compute})).data_ptr();
  if (need_w) out.w = (grads.w = empty(in.w_shape, {.dtype = compute})).data_ptr();
  if (need_b) out.bias = (grads.b = empty({s.out_channels}, {.dtype = compute})).data_ptr();
  kernels::cpu::conv2d_backward(compute, s, gy.data_ptr(), need_w ? xc.data_ptr() : nullptr,
                                need_x ? wc.data_ptr() : nullptr, out);
  if (need_x) grads.x = grads.x.to(in.x_dtype);
  if (need_w) grads.w = grads.w.to(in.w_dtype);
  if (need_b) grads.b = grads.b.to(in.x_dtype);
  return grads;
}

#if GENESIS_WITH_CUDA
// The CUDA kernels read x through its strides and widen half types while gathering columns.
Tensor conv2d_forward_cuda(const Conv2dShape& s, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const DType dtype = x.dtype(), compute = conv_compute_type(dtype);
  const TensorOptions scratch{.dtype = compute, .device = x.device()};
  Tensor wc = weight.to(compute).contiguous();
  Tensor bc = bias.defined() ? bias.to(compute).contiguous() : Tensor();
  Tensor y = empty({s.batch, s.out_channels, s.out_h, s.out_w}, {.dtype = dtype, .device = x.device()});
  Tensor y_acc = dtype == compute ? y : empty(y.shape(), scratch);
  Tensor columns = empty({kernels::cuda::conv2d_column_elements(s)}, scratch);
  kernels::cuda::conv2d_forward(dtype, s, x.data_ptr(), x.strides().data(), wc.data_ptr(),
                                bc.defined() ? bc.data_ptr() : nullptr, columns.data_ptr(), y_acc.data_ptr(),
                                y.data_ptr(), cuda::current_stream());
  return y;
}

ConvGrads conv2d_backward_cuda(const Conv2dShape& s, const ConvSaved& in, const Tensor& gy, bool need_x, bool need_w,
                               bool need_b) {
  const DType compute = gy.dtype();
  ConvGrads grads;
  if (need_b) grads.b = sum(gy, {0, 2, 3}).to(in.x_dtype);
  if (!need_x && !need_w) return grads;
  Tensor columns = empty({kernels::cuda::conv2d_column_elements(s)}, {.dtype = compute, .device = in.device});
  if (need_x) {
    Tensor wc = in.weight.to(compute).contiguous();
    grads.x = empty(in.x_shape, {.dtype = in.x_dtype, .device = in.device});
    kernels::cuda::conv2d_backward_input(in.x_dtype, s, gy.data_ptr(), wc.data_ptr(), columns.data_ptr(),
                                         grads.x.data_ptr(), cuda::current_stream());
  }
  if (need_w) {
    // [C_out, N, oH, oW]: one GEMM per group then sums over every sample of a block.
    Tensor gy_t = gy.transpose(0, 1).contiguous();
    grads.w = empty(in.w_shape, {.dtype = compute, .device = in.device});
    kernels::cuda::conv2d_backward_weight(in.x_dtype, s, in.x.data_ptr(), in.x.strides().data(), gy_t.data_ptr(),
                                          columns.data_ptr(), grads.w.data_ptr(), cuda::current_stream());
    grads.w = grads.w.to(in.w_dtype);
  }
  return grads;
}
#endif

}  // namespace

Tensor conv2d(const Tensor& x_arg, const Tensor& weight_arg, const Tensor& bias_arg, Conv2dOptions options) {
  auto [x, weight, bias] = detail::op_prologue<OpId::conv2d>(x_arg, weight_arg, bias_arg);
  detail::check_defined("conv2d", x, "input");
  detail::check_defined("conv2d", weight, "weight");
  const Conv2dShape s = conv_shape(x, weight, bias, options);
  Tensor y;
  {
    NoGradGuard forward_only;
    if (x.device().is_cpu()) {
      y = conv2d_forward_cpu(s, x, weight, bias);
    } else {
      GENESIS_ON_CUDA(y = conv2d_forward_cuda(s, x, weight, bias));
    }
  }
  if (needs_grad({x, weight, bias})) {
    const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
    const bool need_b = bias.defined() && bias.requires_grad();
    ConvSaved in{.x = need_w ? saved(x) : Tensor(),
                 .weight = need_x ? saved(weight) : Tensor(),
                 .x_shape = x.shape(),
                 .w_shape = weight.shape(),
                 .x_dtype = x.dtype(),
                 .w_dtype = weight.dtype(),
                 .device = x.device()};
    record("conv2d", {x, weight, bias}, {y},
           [s, in = std::move(in), need_x, need_w, need_b](const TensorList& g) {
             const DType compute = conv_compute_type(in.x_dtype);
             Tensor gy = g[0].to(compute).contiguous();
             ConvGrads grads;
             if (in.device.is_cpu()) {
               grads = conv2d_backward_cpu(s, in, gy, need_x, need_w, need_b);
             } else {
               GENESIS_ON_CUDA(grads = conv2d_backward_cuda(s, in, gy, need_x, need_w, need_b));
             }
             return TensorList{grads.x, grads.w, grads.b};
           });
  }
  return y;
}

std::string cpu_conv2d_kernels() {
  const kernels::cpu::Conv2dShape s{.batch = 128, .in_channels = 32, .height = 14, .width = 14, .out_channels = 64,
                                    .kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1, .out_h = 14, .out_w = 14};
  return kernels::cpu::conv2d_implementation(s);
}

Tensor max_pool2d(const Tensor& x_arg, Pool2dOptions options) {
  auto [x] = detail::op_prologue<OpId::max_pool2d>(x_arg);
  const Pool2dShape s = pool_shape("max_pool2d", x, options);
  const DType dtype = x.dtype();
  Tensor y = empty(pooled_shape(x, s), {.dtype = dtype, .device = x.device()});
  Tensor argmax = empty(y.shape(), {.dtype = DType::i64, .device = x.device()});
  if (x.device().is_cpu()) {
    NoGradGuard forward_only;
    Tensor xc = x.contiguous();
    kernels::cpu::max_pool2d_forward(dtype, s, xc.data_ptr(), y.data_ptr(), argmax.data<int64_t>());
  } else {
    GENESIS_ON_CUDA(kernels::cuda::max_pool2d_forward(dtype, s, x.size(1), x.data_ptr(), x.strides().data(),
                                                      y.data_ptr(), argmax.data<int64_t>(), cuda::current_stream()));
  }
  if (needs_grad({x})) {
    record("max_pool2d", {x}, {y}, [s, in = x.shape(), dtype, argmax = saved(argmax)](const TensorList& g) {
      Tensor gy = g[0].to(dtype).contiguous();
      Tensor gx = empty(in, {.dtype = dtype, .device = gy.device()});
      if (gy.device().is_cpu()) {
        kernels::cpu::max_pool2d_backward(dtype, s, gy.data_ptr(), argmax.data<int64_t>(), gx.data_ptr());
      } else {
        GENESIS_ON_CUDA(kernels::cuda::max_pool2d_backward(dtype, s, gy.data_ptr(), argmax.data<int64_t>(),
                                                           gx.data_ptr(), cuda::current_stream()));
      }
      return TensorList{gx};
    });
  }
  return y;
}

Tensor avg_pool2d(const Tensor& x_arg, Pool2dOptions options) {
  auto [x] = detail::op_prologue<OpId::avg_pool2d>(x_arg);
  const Pool2dShape s = pool_shape("avg_pool2d", x, options);
  const DType dtype = x.dtype();
  Tensor y = empty(pooled_shape(x, s), {.dtype = dtype, .device = x.device()});
  if (x.device().is_cpu()) {
    NoGradGuard forward_only;
    Tensor xc = x.contiguous();
    kernels::cpu::avg_pool2d_forward(dtype, s, xc.data_ptr(), y.data_ptr());
  } else {
    GENESIS_ON_CUDA(kernels::cuda::avg_pool2d_forward(dtype, s, x.size(1), x.data_ptr(), x.strides().data(),
                                                      y.data_ptr(), cuda::current_stream()));
  }
  if (needs_grad({x})) {
    record("avg_pool2d", {x}, {y}, [s, in = x.shape(), dtype](const TensorList& g) {
      Tensor gy = g[0].to(dtype).contiguous();
      Tensor gx = empty(in, {.dtype = dtype, .device = gy.device()});
      if (gy.device().is_cpu()) {
        kernels::cpu::avg_pool2d_backward(dtype, s, gy.data_ptr(), gx.data_ptr());
      } else {
        GENESIS_ON_CUDA(
            kernels::cuda::avg_pool2d_backward(dtype, s, gy.data_ptr(), gx.data_ptr(), cuda::current_stream()));
      }
      return TensorList{gx};
    });
  }
  return y;
}

}  // namespace genesis
