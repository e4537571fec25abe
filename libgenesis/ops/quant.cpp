// NF4 weights: argument checks, dispatch to the CPU or CUDA kernels, and nf4_linear's backward
// (the input's gradient through the weight dequantized again, so no dense copy outlives a call).
// Not rows of the op table: they take an Nf4Weight, not tensors, and nf4_linear is linear on a
// dequantized weight (linear's row gives it autocast and the device check).
#include "libgenesis/ops/quant.h"

#include <cmath>
#include <optional>

#include "kernels/common/nf4_format.h"
#include "kernels/cpu/nf4.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/reduce.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/nf4.h"
#include "libgenesis/cuda/device_guard.h"
#endif

namespace genesis {

namespace {

using kernels::nf4::kBlock;
using kernels::nf4::kStatsBlock;

// genesis's one-byte dtype, holding raw bytes here (see quant.h).
constexpr DType kByteDType = DType::boolean;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The sizes of an NF4 weight's parts for n elements.
struct Nf4Sizes {
  int64_t code_bytes, blocks, groups;
  explicit Nf4Sizes(int64_t n)
      : code_bytes(ceil_div(n, 2)), blocks(ceil_div(n, kBlock)), groups(ceil_div(ceil_div(n, kBlock), kStatsBlock)) {}
};

uint8_t* bytes_of(const Tensor& t) {
  return static_cast<uint8_t*>(t.data_ptr());
}

void check_weight_dtype(const char* op, DType dtype, const char* what) {
  GENESIS_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, DTypeError, op, ": ", what, " is ",
                dtype_name(dtype), "; NF4 weights are quantized from and dequantized to f32, bf16 or f16");
}

// Every part of `weight` present, contiguous, on one device, and sized for its shape.
void check_nf4(const char* op, const Nf4Weight& weight) {
  GENESIS_CHECK(weight.shape.size() == 2, ShapeError, op, ": the NF4 weight has shape ", weight.shape,
                "; it must be 2-D [out, in], as quantize_nf4 makes it");
  GENESIS_CHECK(weight.codes.defined(), ValueError, op, ": the NF4 weight has no codes; make it with quantize_nf4");
  const Nf4Sizes sizes(weight.numel());
  auto check_part = [&](const Tensor& part, const char* name, DType dtype, int64_t count) {
    GENESIS_CHECK(part.defined() && part.dtype() == dtype && part.numel() == count && part.is_contiguous() &&
                      part.device() == weight.codes.device(),
                  ValueError, op, ": the NF4 weight's ", name, " must be ", count, " contiguous ",
                  dtype == kByteDType ? "bytes" : "f32 values", " on ", weight.codes.device().str(),
                  " for a weight of shape ", weight.shape, "; make the weight with quantize_nf4");
  };
  check_part(weight.codes, "codes", kByteDType, sizes.code_bytes);
  check_part(weight.absmax_codes, "absmax_codes", kByteDType, sizes.blocks);
  check_part(weight.absmax_scale, "absmax_scale", DType::f32, sizes.groups);
  check_weight_dtype(op, weight.compute_dtype, "compute_dtype");
}

// Makes `device`'s CUDA device current for the scope (what the op prologue does for table ops).
class OnDevice {
 public:
  explicit OnDevice([[maybe_unused]] Device device) {
#if GENESIS_WITH_CUDA
    if (device.is_cuda()) guard_.emplace(device.index);
#endif
  }

 private:
#if GENESIS_WITH_CUDA
  std::optional<cuda::DeviceGuard> guard_;
#endif
};

}  // namespace

int64_t Nf4Weight::bytes() const {
  return codes.numel() + absmax_codes.numel() + absmax_scale.numel() * static_cast<int64_t>(sizeof(float)) +
         static_cast<int64_t>(sizeof(absmax_offset));
}

int64_t Nf4Weight::bytes_for(int64_t numel) {
  const Nf4Sizes s(numel);
  return s.code_bytes + s.blocks + (s.groups + 1) * static_cast<int64_t>(sizeof(float));  // + the offset
}

Nf4Weight Nf4Weight::to(Device device) const {
  Nf4Weight moved = *this;
  moved.codes = codes.to(device);
  moved.absmax_codes = absmax_codes.to(device);
  moved.absmax_scale = absmax_scale.to(device);
  return moved;
}

Nf4Weight quantize_nf4(const Tensor& weight, DType compute_dtype) {
  detail::check_defined("quantize_nf4", weight, "weight");
  GENESIS_CHECK(weight.dim() == 2, ShapeError, "quantize_nf4: the weight has shape ", weight.shape(),
                "; NF4 quantizes 2-D weights [out, in] (reshape it to 2-D first)");
  check_weight_dtype("quantize_nf4", weight.dtype(), "the weight's dtype");
  check_weight_dtype("quantize_nf4", compute_dtype, "compute_dtype");
  const Device device = weight.device();
  OnDevice on_device(device);
  const int64_t n = weight.numel();
  const Nf4Sizes sizes(n);
  Nf4Weight q;
  q.shape = weight.shape();
  q.compute_dtype = compute_dtype;
  q.codes = empty({sizes.code_bytes}, {.dtype = kByteDType, .device = device});
  q.absmax_codes = empty({sizes.blocks}, {.dtype = kByteDType, .device = device});
  q.absmax_scale = empty({sizes.groups}, {.dtype = DType::f32, .device = device});
  if (n == 0) return q;
  const Tensor x = weight.detach().contiguous();
  const Tensor absmax = empty({sizes.blocks}, {.dtype = DType::f32, .device = device});
  if (device.is_cpu()) {
    q.absmax_offset =
        kernels::cpu::nf4_quantize(x.dtype(), n, x.data_ptr(), bytes_of(q.codes), bytes_of(q.absmax_codes),
                                   q.absmax_scale.data<float>(), absmax.data<float>());
  } else {
    GENESIS_ON_CUDA({
      const Tensor offset = empty({1}, {.dtype = DType::f32, .device = device});
      const Tensor partial = empty({sizes.groups}, {.dtype = DType::f64, .device = device});
      kernels::cuda::nf4_quantize(x.dtype(), n, x.data_ptr(), bytes_of(q.codes), bytes_of(q.absmax_codes),
                                  q.absmax_scale.data<float>(), offset.data<float>(), absmax.data<float>(),
                                  partial.data<double>(), cuda::current_stream());
      q.absmax_offset = offset.to(kCPU).data<float>()[0];
    });
  }
  GENESIS_CHECK(std::isfinite(q.absmax_offset), ValueError, "quantize_nf4: the weight of shape ", weight.shape(),
                " has a NaN or infinite element; NF4 stores finite weights only (fix or clip the weight first)");
  return q;
}

Tensor dequantize_nf4(const Nf4Weight& weight, DType dtype) {
  check_nf4("dequantize_nf4", weight);
  check_weight_dtype("dequantize_nf4", dtype, "dtype");
  OnDevice on_device(weight.device());
  Tensor out = empty(weight.shape, {.dtype = dtype, .device = weight.device()});
  const int64_t n = weight.numel();
  if (weight.device().is_cpu()) {
    kernels::cpu::nf4_dequantize(dtype, n, bytes_of(weight.codes), bytes_of(weight.absmax_codes),
                                 weight.absmax_scale.data<float>(), weight.absmax_offset, out.data_ptr());
  } else {
    GENESIS_ON_CUDA(kernels::cuda::nf4_dequantize(dtype, n, bytes_of(weight.codes), bytes_of(weight.absmax_codes),
                                                  weight.absmax_scale.data<float>(), weight.absmax_offset,
                                                  out.data_ptr(), cuda::current_stream()));
  }
  return out;
}

Tensor nf4_absmax(const Nf4Weight& weight) {
  check_nf4("nf4_absmax", weight);
  OnDevice on_device(weight.device());
  const int64_t blocks = Nf4Sizes(weight.numel()).blocks;
  Tensor absmax = empty({blocks}, {.dtype = DType::f32, .device = weight.device()});
  if (weight.device().is_cpu()) {
    kernels::cpu::nf4_dequantize_absmax(blocks, bytes_of(weight.absmax_codes), weight.absmax_scale.data<float>(),
                                        weight.absmax_offset, absmax.data<float>());
  } else {
    GENESIS_ON_CUDA(kernels::cuda::nf4_dequantize_absmax(blocks, bytes_of(weight.absmax_codes),
                                                         weight.absmax_scale.data<float>(), weight.absmax_offset,
                                                         absmax.data<float>(), cuda::current_stream()));
  }
  return absmax;
}

Tensor nf4_linear(const Tensor& x, const Nf4Weight& weight, const Tensor& bias) {
  detail::check_defined("nf4_linear", x, "input");
  check_nf4("nf4_linear", weight);
  const Tensor operands[] = {x, bias, weight.codes};
  detail::check_same_device("nf4_linear", operands);
  const int64_t out_features = weight.shape[0], in_features = weight.shape[1];
  GENESIS_CHECK(x.dim() >= 1 && x.size(-1) == in_features, ShapeError, "nf4_linear: the input of shape ", x.shape(),
                " must end in the weight's ", in_features, " input features (weight ", weight.shape, ")");
  Tensor out;
  {
    NoGradGuard forward_only;
    out = linear(x, dequantize_nf4(weight, weight.compute_dtype), bias);
  }
  if (needs_grad({x, bias})) {
    record("nf4_linear", {x, bias}, {out},
           [weight, out_features, rows = numel_of(Shape(x.shape().begin(), x.shape().end() - 1)), x_shape = x.shape(),
            x_dtype = x.dtype(), bias_dtype = bias.defined() ? bias.dtype() : x.dtype(), need_x = x.requires_grad(),
            need_b = bias.defined() && bias.requires_grad()](const TensorList& g) {
             const Tensor grad_out = g[0].reshape({rows, out_features});
             Tensor grad_x, grad_b;
             if (need_x) {
               const Tensor w = dequantize_nf4(weight, weight.compute_dtype).to(grad_out.dtype());
               grad_x = matmul(grad_out, w).reshape(x_shape).to(x_dtype);
             }
             if (need_b) grad_b = sum(grad_out, {0}).to(bias_dtype);
             return TensorList{grad_x, grad_b};
           });
  }
  return out;
}

}  // namespace genesis
