// Losses: fused CPU and CUDA kernels for the class-index losses (cross_entropy, nll_loss), and
// elementwise compositions with explicit backward formulas for the regression and binary
// losses (which therefore run on any device the elementwise ops support).
#include "libgenesis/ops/loss.h"

#include <cstdlib>
#include <string_view>

#include "kernels/cpu/loss.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/nn.h"
#include "libgenesis/ops/prologue.h"
#include "libgenesis/ops/reduce.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/linalg.h"
#include "kernels/cuda/loss.h"
#endif

namespace genesis {

namespace {

using kernels::cpu::ClassRows;

constexpr const char* kBce = "binary_cross_entropy_with_logits";

DType acc_dtype(DType dtype) {
  return dtype == DType::f64 ? DType::f64 : DType::f32;
}
// The elementwise losses compute half inputs in f32 and round the result once.
DType compute_dtype(DType dtype) {
  return is_half(dtype) ? DType::f32 : dtype;
}

// Checks input [N, C, d...] against class-index target [N, d...]; returns the row layout.
ClassRows class_rows(const char* name, const Tensor& input, const Tensor& target, const char* input_name) {
  detail::check_floating(name, input);
  GENESIS_CHECK(is_integral(target.dtype()), DTypeError, name, ": target must hold class indices (i32 or i64), got ",
                dtype_name(target.dtype()));
  GENESIS_CHECK(input.dim() >= 2, ShapeError, name, ": ", input_name, " must be [N, C] or [N, C, d...], got shape ",
                input.shape());
  Shape expected = input.shape();
  expected.erase(expected.begin() + 1);
  GENESIS_CHECK(target.shape() == expected, ShapeError, name, ": target of shape ", target.shape(), " does not match ",
                input_name, " of shape ", input.shape(), " (expected ", expected, ")");
  return {input.size(0), input.size(1), numel_of(Shape(input.shape().begin() + 2, input.shape().end()))};
}

// The number of non-ignored targets, which a mean divides by. CPU targets are validated and
// counted on the host (IndexError naming the first bad value). CUDA targets are validated by the
// loss kernels (a bad one is raised at the next synchronization) and, for a mean only, counted
// on the device: the count stays there for the division and the backward's scale, so the op
// never waits on the device.
struct TargetCount {
  int64_t host = 0;  // CPU targets
  Tensor device;     // CUDA targets with reduction mean: 0-d i64
};

TargetCount count_valid_targets(const char* name, const Tensor& target, int64_t classes, int64_t ignore_index,
                                Reduction reduction) {
  if (target.device().is_cpu()) {
    return {detail::check_index_values(name, target, classes, ignore_index, "target value", "classes"), Tensor()};
  }
  if (reduction != Reduction::mean) return {};
  Tensor count = empty({}, {.dtype = DType::i64, .device = target.device()});
  GENESIS_ON_CUDA(kernels::cuda::count_valid_targets(target.dtype(), target.numel(), target.data_ptr(), classes,
                                                     ignore_index, count.data<int64_t>(), cuda::current_stream()));
  return {0, count};
}

// Per-row losses (accumulator dtype) reduced as requested, in `dtype`. Mean divides by the
// number of non-ignored rows, so an all-ignored batch gives NaN (as in PyTorch); the device
// count is divided by as a tensor of the rows' dtype, the value the host count takes there.
Tensor reduce_rows(const Tensor& rows, Reduction reduction, const TargetCount& count, const Shape& none_shape,
                   DType dtype) {
  switch (reduction) {
    case Reduction::none:
      return rows.view(none_shape).to(dtype);
    case Reduction::sum:
      return sum(rows).to(dtype);
    case Reduction::mean:
      break;
  }
  if (count.device.defined()) return div(sum(rows), count.device.to(rows.dtype())).to(dtype);
  return div(sum(rows), static_cast<double>(count.host)).to(dtype);
}

// How the incoming gradient maps onto rows: per row for none, one scalar otherwise; the CPU
// kernels take the mean's 1 / count as `scale`, the CUDA ones read the count (null: scale 1).
struct RowGrad {
  int64_t stride;
  double scale;
  const int64_t* device_count;
};
RowGrad row_grad(Reduction reduction, const TargetCount& count) {
  RowGrad rg{reduction == Reduction::none ? 1 : 0, 1.0, nullptr};
  if (reduction != Reduction::mean) return rg;
  if (count.device.defined()) {
    rg.device_count = count.device.data<int64_t>();
  } else {
    rg.scale = 1.0 / static_cast<double>(count.host);
  }
  return rg;
}

#if GENESIS_WITH_CUDA
// The fault id under which the CUDA kernels of `name` report a bad target (one lookup per op).
int fault_op(const char* name) {
  static const int cross_entropy_id = cuda::fault_op_id("cross_entropy");
  static const int nll_loss_id = cuda::fault_op_id("nll_loss");
  static const int linear_cross_entropy_id = cuda::fault_op_id("linear_cross_entropy");
  const std::string_view n(name);
  return n == "cross_entropy" ? cross_entropy_id : n == "nll_loss" ? nll_loss_id : linear_cross_entropy_id;
}

// linear_cross_entropy on CUDA: x [N, K] and weight [V, K] of one dtype (f32/f16/bf16), target
// [N], reduction mean or sum; the loss in f32 (f32 inputs: f32 too). Every GEMM runs over the
// classes padded to a multiple of 64 (the weight's padding rows zero, so are the logits' and
// their gradient's padding columns): cuBLASLt takes its slow unaligned kernels when a
// matrix's contiguous extent is odd, as GPT-2's 50257 classes are (3x slower on an H100).
// The rows go in chunks of at most 1 GiB of logits: a chunk's logits are computed,
// turned in place into their gradient (for a loss of scale 1 per row) and, with grad, at once
// multiplied into the gradients of x (f32 [N, K]) and of the weight (f32 [V, K], summed over the
// chunks), which the backward only scales. So no [N, V] matrix outlives its chunk: for GPT-2's
// B16 T1024 batch the 1.6 GB of bf16 logits a whole-batch buffer kept from the forward to the
// backward become two chunks of 0.8 GB in turn (each chunk after the first costs one more read
// and write of the f32 weight gradient).
// GENESIS_LOGITS_CHUNK_MB overrides the chunk size (linear_cross_entropy_chunk_bytes).
Tensor linear_cross_entropy_cuda(const Tensor& x, const Tensor& weight, const Tensor& target,
                                 const CrossEntropyOptions& options) {
  constexpr int64_t kClassPad = 64;
  const int64_t rows = x.size(0), in_features = x.size(1), classes = weight.size(0);
  const int64_t ld = (classes + kClassPad - 1) / kClassPad * kClassPad;
  const DType dt = x.dtype();
  const Device device = x.device();
  Tensor tc = target.contiguous();
  const TargetCount count =
      count_valid_targets("linear_cross_entropy", tc, classes, options.ignore_index, options.reduction);
  const bool grad = needs_grad({x, weight});
  const bool need_x = grad && x.requires_grad(), need_w = grad && weight.requires_grad();
  Tensor xc = x.contiguous(), wc = weight;
  if (ld != classes || !weight.is_contiguous()) {
    NoGradGuard copy_only;
    wc = empty({ld, in_features}, {.dtype = dt, .device = device});
    wc.narrow(0, 0, classes).copy_(weight);
    wc.narrow(0, classes, ld - classes).zero_();
  }
  const auto elt = static_cast<int64_t>(dtype_size(dt));
  const int64_t chunk_bytes = linear_cross_entropy_chunk_bytes();
  const int64_t chunks = std::max<int64_t>(1, (rows * ld * elt + chunk_bytes - 1) / chunk_bytes);
  const int64_t chunk_rows = std::max<int64_t>(1, (rows + chunks - 1) / chunks);
  const TensorOptions f32{.dtype = DType::f32, .device = device};
  Tensor row_loss = empty({rows}, f32);
  Tensor gx = need_x ? empty({rows, in_features}, f32) : Tensor();
  Tensor gw = need_w ? empty({ld, in_features}, f32) : Tensor();
  Tensor loss;
  {
    NoGradGuard forward_only;
    Tensor buffer = empty({std::min(rows, chunk_rows), ld}, {.dtype = dt, .device = device});
    cudaStream_t stream = cuda::current_stream();
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, rows - r0);
      const auto* x_rows = static_cast<const char*>(xc.data_ptr()) + r0 * in_features * elt;
      kernels::cuda::gemm(dt,
                          {.trans_b = true, .m = n, .n = ld, .k = in_features, .a = x_rows, .lda = in_features,
                           .b = wc.data_ptr(), .ldb = in_features, .c = buffer.data_ptr(), .ldc = ld},
                          stream);
      kernels::cuda::cross_entropy_with_grad(dt, tc.dtype(), n, classes, ld, buffer.data_ptr(),
                                             static_cast<const char*>(tc.data_ptr()) + r0 * dtype_size(tc.dtype()),
                                             options.ignore_index, options.label_smoothing, grad,
                                             row_loss.data<float>() + r0, cuda::kernel_fault_slot(),
                                             fault_op("linear_cross_entropy"), stream);
      if (need_x)
        kernels::cuda::gemm_f32_out(dt,
                                    {.m = n, .n = in_features, .k = ld, .a = buffer.data_ptr(), .lda = ld,
                                     .b = wc.data_ptr(), .ldb = in_features,
                                     .c = gx.data<float>() + r0 * in_features, .ldc = in_features},
                                    stream);
      if (need_w)  // summed over the chunks
        kernels::cuda::gemm_f32_out(dt,
                                    {.trans_a = true, .m = ld, .n = in_features, .k = n, .a = buffer.data_ptr(),
                                     .lda = ld, .b = x_rows, .ldb = in_features, .c = gw.data_ptr(),
                                     .ldc = in_features, .beta = r0 > 0 ? 1.0 : 0.0},
                                    stream);
    }
    if (need_w && rows == 0) gw.zero_();
    loss = reduce_rows(row_loss, options.reduction, count, {rows}, DType::f32);
  }
  if (grad) {
    record("linear_cross_entropy", {x, weight}, {loss},
           [need_x, need_w, options, count, classes, dt, gxs = need_x ? saved(gx) : Tensor(),
            gws = need_w ? saved(gw) : Tensor()](const TensorList& g) {
             // d loss / d row loss: the incoming gradient, divided by the count for a mean.
             Tensor scale = g[0].to(DType::f32);
             if (options.reduction == Reduction::mean) scale = div(scale, count.device.to(DType::f32));
             TensorList out(2);
             if (need_x) out[0] = mul(gxs, scale).to(dt);
             // Left in f32: the weight is usually an f32 parameter cast for the GEMMs, whose
             // cast would only widen a 16-bit gradient again.
             if (need_w) out[1] = mul(gws.narrow(0, 0, classes), scale);
             return out;
           });
  }
  return loss;
}
#endif

// Single-sample form: a [C] input with a 0-d target runs as a batch of one (the caller squeezes
// an unreduced loss back); returns whether it does.
bool as_batch_of_one(Tensor& input, Tensor& target) {
  if (input.dim() != 1 || target.dim() != 0) return false;
  input = input.unsqueeze(0);
  target = target.unsqueeze(0);
  return true;
}

void check_pair(const char* name, const Tensor& input, const Tensor& target, const char* input_name) {
  detail::check_defined(name, input, input_name);
  detail::check_defined(name, target, "target");
  detail::check_floating(name, input);
  GENESIS_CHECK(target.dtype() == input.dtype(), DTypeError, name, ": target has dtype ", dtype_name(target.dtype()),
                " but ", input_name, " has ", dtype_name(input.dtype()));
  GENESIS_CHECK(target.shape() == input.shape(), ShapeError, name, ": target of shape ", target.shape(),
                " does not match ", input_name, " of shape ", input.shape());
}

Tensor reduce_elements(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::none:
      return loss;
    case Reduction::sum:
      return sum(loss);
    case Reduction::mean:
      break;
  }
  return mean(loss);
}

// d(reduced loss)/d(elementwise loss), broadcastable against the elementwise loss.
Tensor reduction_grad(const Tensor& g, Reduction reduction, int64_t numel, DType compute) {
  Tensor gc = g.to(compute);
  return reduction == Reduction::mean ? div(gc, static_cast<double>(numel)) : gc;
}

// log(1 + exp(-x)) without overflow.
Tensor softplus_of_neg(const Tensor& x) {
  return add(log1p(exp(neg(abs(x)))), relu(neg(x)));
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_arg, const Tensor& target_arg, CrossEntropyOptions options) {
  auto [logits, target] = detail::op_prologue<OpId::cross_entropy>(logits_arg, target_arg);
  detail::check_defined("cross_entropy", logits, "logits");
  detail::check_defined("cross_entropy", target, "target");
  const bool single = as_batch_of_one(logits, target);
  ClassRows s = class_rows("cross_entropy", logits, target, "logits");
  GENESIS_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing < 1.0, ValueError,
                "cross_entropy: label_smoothing must be in [0, 1) (got ", options.label_smoothing, ")");
  Tensor tc = target.contiguous();
  const TargetCount count =
      count_valid_targets("cross_entropy", tc, s.classes, options.ignore_index, options.reduction);
  const DType dt = logits.dtype();
  Tensor row_loss = empty({s.outer * s.inner}, {.dtype = acc_dtype(dt), .device = logits.device()});
  Tensor lse = empty({s.outer * s.inner}, {.dtype = acc_dtype(dt), .device = logits.device()});
  Tensor xc, loss;
  {
    NoGradGuard forward_only;
    xc = logits.contiguous();
    if (xc.device().is_cpu()) {
      kernels::cpu::cross_entropy(dt, tc.dtype(), s, xc.data_ptr(), tc.data_ptr(), options.ignore_index,
                                  options.label_smoothing, row_loss.data_ptr(), lse.data_ptr());
    } else {
      GENESIS_ON_CUDA(kernels::cuda::cross_entropy(dt, tc.dtype(), s, xc.data_ptr(), tc.data_ptr(),
                                                   options.ignore_index, options.label_smoothing, row_loss.data_ptr(),
                                                   lse.data_ptr(), cuda::kernel_fault_slot(), fault_op("cross_entropy"),
                                                   cuda::current_stream()));
    }
    // Autocast policy f32_math: the kernels read 16-bit logits as they are and the loss comes out in f32.
    const DType loss_dtype = is_half(dt) && detail::current_op_autocast() ? DType::f32 : dt;
    loss = reduce_rows(row_loss, options.reduction, count, target.shape(), loss_dtype);
  }
  if (needs_grad({logits})) {
    record("cross_entropy", {logits}, {loss},
           [s, options, count, xs = saved(xc), ts = saved(tc), lses = saved(lse)](const TensorList& g) {
             Tensor gl = g[0].to(xs.dtype()).contiguous();
             RowGrad rg = row_grad(options.reduction, count);
             Tensor gx = empty_like(xs);
             if (xs.device().is_cpu()) {
               kernels::cpu::cross_entropy_backward(xs.dtype(), ts.dtype(), s, xs.data_ptr(), ts.data_ptr(),
                                                    lses.data_ptr(), options.ignore_index, options.label_smoothing,
                                                    gl.data_ptr(), rg.stride, rg.scale, gx.data_ptr());
             } else {
               GENESIS_ON_CUDA(kernels::cuda::cross_entropy_backward(
                   xs.dtype(), ts.dtype(), s, xs.data_ptr(), ts.data_ptr(), lses.data_ptr(), options.ignore_index,
                   options.label_smoothing, gl.data_ptr(), rg.stride, rg.device_count, gx.data_ptr(),
                   cuda::current_stream()));
             }
             return TensorList{gx};
           });
  }
  return single && options.reduction == Reduction::none ? loss.squeeze(0) : loss;
}

int64_t linear_cross_entropy_chunk_bytes() {
  static const int64_t bytes = [] {
    const char* value = std::getenv("GENESIS_LOGITS_CHUNK_MB");
    return value ? std::max<int64_t>(1, std::atoll(value)) << 20 : int64_t{1} << 30;
  }();
  return bytes;
}

Tensor linear_cross_entropy(const Tensor& x_arg, const Tensor& weight_arg, const Tensor& target_arg,
                            CrossEntropyOptions options) {
  auto [x, weight, target] = detail::op_prologue<OpId::linear_cross_entropy>(x_arg, weight_arg, target_arg);
  const char* op = "linear_cross_entropy";
  detail::check_defined(op, x, "x");
  detail::check_defined(op, weight, "weight");
  detail::check_defined(op, target, "target");
  detail::check_floating(op, x);
  detail::check_same_dtype(op, x, weight);
  GENESIS_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), ShapeError, op,
                ": x must be [N, K] and weight [V, K], got x ", x.shape(), " and weight ", weight.shape());
  GENESIS_CHECK(is_integral(target.dtype()), DTypeError, op, ": target must hold class indices (i32 or i64), got ",
                dtype_name(target.dtype()));
  GENESIS_CHECK(target.dim() == 1 && target.size(0) == x.size(0), ShapeError, op, ": target must be [N] = [", x.size(0),
                "], got ", target.shape());
  GENESIS_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing < 1.0, ValueError, op,
                ": label_smoothing must be in [0, 1) (got ", options.label_smoothing, ")");
  const DType loss_dtype = is_half(x.dtype()) ? DType::f32 : x.dtype();
  const bool fused = !x.device().is_cpu() && x.dtype() != DType::f64 && options.reduction != Reduction::none &&
                     weight.size(0) > 0 && weight.size(1) > 0;
  if (fused) {
    Tensor loss;
    GENESIS_ON_CUDA(loss = linear_cross_entropy_cuda(x, weight, target, options));
    return loss;
  }
  return cross_entropy(linear(x, weight).to(loss_dtype), target, options);
}

Tensor nll_loss(const Tensor& log_probs_arg, const Tensor& target_arg, Reduction reduction, int64_t ignore_index) {
  auto [log_probs, target] = detail::op_prologue<OpId::nll_loss>(log_probs_arg, target_arg);
  detail::check_defined("nll_loss", log_probs, "log_probs");
  detail::check_defined("nll_loss", target, "target");
  const bool single = as_batch_of_one(log_probs, target);
  ClassRows s = class_rows("nll_loss", log_probs, target, "log_probs");
  Tensor tc = target.contiguous();
  const TargetCount count = count_valid_targets("nll_loss", tc, s.classes, ignore_index, reduction);
  const DType dt = log_probs.dtype();
  const Device device = log_probs.device();
  Tensor row_loss = empty({s.outer * s.inner}, {.dtype = acc_dtype(dt), .device = device});
  Tensor loss;
  {
    NoGradGuard forward_only;
    Tensor xc = log_probs.contiguous();
    if (device.is_cpu()) {
      kernels::cpu::nll_loss(dt, tc.dtype(), s, xc.data_ptr(), tc.data_ptr(), ignore_index, row_loss.data_ptr());
    } else {
      GENESIS_ON_CUDA(kernels::cuda::nll_loss(dt, tc.dtype(), s, xc.data_ptr(), tc.data_ptr(), ignore_index,
                                              row_loss.data_ptr(), cuda::kernel_fault_slot(), fault_op("nll_loss"),
                                              cuda::current_stream()));
    }
    loss = reduce_rows(row_loss, reduction, count, target.shape(), dt);
  }
  if (needs_grad({log_probs})) {
    record("nll_loss", {log_probs}, {loss},
           [s, reduction, ignore_index, count, dt, device, shape = log_probs.shape(),
            ts = saved(tc)](const TensorList& g) {
             Tensor gl = g[0].to(dt).contiguous();
             RowGrad rg = row_grad(reduction, count);
             Tensor gx = empty(shape, {.dtype = dt, .device = device});
             if (device.is_cpu()) {
               kernels::cpu::nll_loss_backward(dt, ts.dtype(), s, ts.data_ptr(), ignore_index, gl.data_ptr(), rg.stride,
                                               rg.scale, gx.data_ptr());
             } else {
               GENESIS_ON_CUDA(kernels::cuda::nll_loss_backward(dt, ts.dtype(), s, ts.data_ptr(), ignore_index,
                                                                gl.data_ptr(), rg.stride, rg.device_count,
                                                                gx.data_ptr(), cuda::current_stream()));
             }
             return TensorList{gx};
           });
  }
  return single && reduction == Reduction::none ? loss.squeeze(0) : loss;
}

Tensor mse_loss(const Tensor& input_arg, const Tensor& target_arg, Reduction reduction) {
  auto [input, target] = detail::op_prologue<OpId::mse_loss>(input_arg, target_arg);
  check_pair("mse_loss", input, target, "input");
  const DType compute = compute_dtype(input.dtype());
  Tensor loss;
  {
    NoGradGuard forward_only;
    Tensor diff = sub(input.to(compute), target.to(compute));
    loss = reduce_elements(mul(diff, diff), reduction).to(input.dtype());
  }
  if (needs_grad({input, target})) {
    record("mse_loss", {input, target}, {loss},
           [reduction, compute, xs = saved(input), ts = saved(target)](const TensorList& g) {
             Tensor diff = sub(xs.to(compute), ts.to(compute));
             Tensor gx = mul(mul(diff, 2.0), reduction_grad(g[0], reduction, xs.numel(), compute));
             return TensorList{gx.to(xs.dtype()), neg(gx).to(ts.dtype())};
           });
  }
  return loss;
}

Tensor l1_loss(const Tensor& input_arg, const Tensor& target_arg, Reduction reduction) {
  auto [input, target] = detail::op_prologue<OpId::l1_loss>(input_arg, target_arg);
  check_pair("l1_loss", input, target, "input");
  const DType compute = compute_dtype(input.dtype());
  Tensor loss;
  {
    NoGradGuard forward_only;
    loss = reduce_elements(abs(sub(input.to(compute), target.to(compute))), reduction).to(input.dtype());
  }
  if (needs_grad({input, target})) {
    // sign(0) = 0: equal elements get a zero subgradient, as in PyTorch.
    record("l1_loss", {input, target}, {loss},
           [reduction, compute, xs = saved(input), ts = saved(target)](const TensorList& g) {
             Tensor direction = sign(sub(xs.to(compute), ts.to(compute)));
             Tensor gx = mul(direction, reduction_grad(g[0], reduction, xs.numel(), compute));
             return TensorList{gx.to(xs.dtype()), neg(gx).to(ts.dtype())};
           });
  }
  return loss;
}

// loss = (1 - t) * x + (1 + (pos_weight - 1) * t) * log(1 + exp(-x)), PyTorch's stable form.
Tensor binary_cross_entropy_with_logits(const Tensor& logits_arg, const Tensor& target_arg, Reduction reduction,
                                        const Tensor& pos_weight_arg) {
  auto [logits, target, pos_weight] =
      detail::op_prologue<OpId::binary_cross_entropy_with_logits>(logits_arg, target_arg, pos_weight_arg);
  check_pair(kBce, logits, target, "logits");
  if (pos_weight.defined()) {
    GENESIS_CHECK(pos_weight.dtype() == logits.dtype(), DTypeError, kBce, ": pos_weight has dtype ",
                  dtype_name(pos_weight.dtype()), " but logits has ", dtype_name(logits.dtype()));
    GENESIS_CHECK(broadcast_shapes(logits.shape(), pos_weight.shape(), kBce) == logits.shape(), ShapeError, kBce,
                  ": pos_weight of shape ", pos_weight.shape(), " does not broadcast to logits of shape ",
                  logits.shape());
  }
  const DType compute = compute_dtype(logits.dtype());
  Tensor loss;
  {
    NoGradGuard forward_only;
    Tensor x = logits.to(compute), t = target.to(compute);
    Tensor sp = softplus_of_neg(x);
    if (pos_weight.defined()) sp = mul(add(mul(sub(pos_weight.to(compute), 1.0), t), 1.0), sp);
    loss = reduce_elements(add(mul(sub(1.0, t), x), sp), reduction).to(logits.dtype());
  }
  if (needs_grad({logits, target, pos_weight})) {
    record(kBce, {logits, target, pos_weight}, {loss},
           [reduction, compute, xs = saved(logits), ts = saved(target), pws = saved(pos_weight)](const TensorList& g) {
             Tensor x = xs.to(compute), t = ts.to(compute);
             Tensor rg = reduction_grad(g[0], reduction, xs.numel(), compute);
             Tensor sp = softplus_of_neg(x);
             Tensor sig_neg = sigmoid(neg(x));
             Tensor gx, gt, gpw;
             if (pws.defined()) {
               Tensor pw_minus_one = sub(pws.to(compute), 1.0);
               gx = sub(sub(1.0, t), mul(add(mul(pw_minus_one, t), 1.0), sig_neg));
               gt = add(neg(x), mul(pw_minus_one, sp));
               gpw = sum_to(mul(mul(t, sp), rg), pws.shape()).to(pws.dtype());
             } else {
               gx = sub(sub(1.0, t), sig_neg);
               gt = neg(x);
             }
             return TensorList{mul(gx, rg).to(xs.dtype()), mul(gt, rg).to(ts.dtype()), gpw};
           });
  }
  return loss;
}

}  // namespace genesis
