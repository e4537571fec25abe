// matmul, bmm, linear, linear_gelu, lora_linear and swiglu_linear: argument checks, operand layouts for GEMM, backward formulas.
#include "libgenesis/ops/linalg.h"

#include <algorithm>
#include <array>
#include <limits>
#include <optional>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/linalg.h"
#include "kernels/cpu/transformer.h"
#include "libgenesis/autograd/checkpoint.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/prologue.h"
#include "libgenesis/ops/reduce.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/linalg.h"
#include "kernels/cuda/transformer.h"
#include "libgenesis/cuda/blas.h"
#endif

namespace genesis {

namespace {

// A GEMM operand: each batch entry is a row-major matrix (possibly read transposed) with
// leading dimension `ld`, entries `batch_stride` elements apart.
struct Operand {
  Tensor t;
  bool trans = false;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// The single stride that walks the flattened batch dimensions [0, ndim - 2) of t, if any
// (size-1 dimensions are skipped; a broadcast batch has stride 0).
std::optional<int64_t> flat_batch_stride(const Tensor& t) {
  std::optional<int64_t> stride;
  int64_t span = 0;  // elements the inner batch dimensions cover
  for (int64_t d = t.dim() - 3; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (!stride) {
      stride = t.stride(d);
    } else if (t.stride(d) != span) {
      return std::nullopt;
    }
    span = t.stride(d) * t.size(d);
  }
  return stride.value_or(0);
}

// Describes t ([batch..., rows, cols]) for BLAS without copying when each matrix is
// row-major or a transposed row-major matrix; otherwise uses a contiguous copy.
Operand gemm_operand(const Tensor& t) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const int64_t row_stride = t.stride(-2), col_stride = t.stride(-1);
  std::optional<int64_t> batch_stride = flat_batch_stride(t);
  if (batch_stride) {
    if (cols == 1 || col_stride == 1) {
      int64_t ld = rows == 1 ? std::max<int64_t>(cols, 1) : row_stride;
      if (ld >= std::max<int64_t>(cols, 1)) return {t, false, ld, *batch_stride};
    }
    if (rows == 1 || row_stride == 1) {
      int64_t ld = cols == 1 ? std::max<int64_t>(rows, 1) : col_stride;
      if (ld >= std::max<int64_t>(rows, 1)) return {t, true, ld, *batch_stride};
    }
  }
  Tensor dense = t.contiguous();
  return {dense, false, std::max<int64_t>(cols, 1), rows * cols};
}

// A GEMM ready for a kernel: the operands (possibly contiguous copies, kept alive until the
// kernel is enqueued) and the arguments that point into them.
struct PreparedGemm {
  Operand a, b;
  kernels::cpu::GemmArgs args;
};

// out [batch..., m, n] (contiguous) = alpha * a [batch..., m, k] @ b [batch..., k, n] + beta * out,
// for m, n, k > 0. a, b and out share a floating dtype, a device and the batch shape.
PreparedGemm prepare_gemm(const char* op, const Tensor& a_in, const Tensor& b_in, Tensor& out, double beta,
                          double alpha = 1.0) {
  const int64_t m = a_in.size(-2), k = a_in.size(-1), n = b_in.size(-1);
  PreparedGemm g{gemm_operand(a_in), gemm_operand(b_in), {}};
  g.args = {.trans_a = g.a.trans,
            .trans_b = g.b.trans,
            .m = m,
            .n = n,
            .k = k,
            .a = g.a.t.data_ptr(),
            .lda = g.a.ld,
            .stride_a = g.a.batch_stride,
            .b = g.b.t.data_ptr(),
            .ldb = g.b.ld,
            .stride_b = g.b.batch_stride,
            .c = out.data_ptr(),
            .ldc = n,
            .stride_c = m * n,
            .batch = out.numel() / (m * n),
            .alpha = alpha,
            .beta = beta};
  kernels::cpu::GemmArgs& args = g.args;
  // A batch of row-major A entries stacked back to back against one shared B is a single
  // taller GEMM (the output is contiguous, so its rows stack the same way).
  if (args.batch > 1 && args.stride_b == 0 && !args.trans_a && args.stride_a == m * args.lda) {
    args.m *= args.batch;
    args.batch = 1;
  }
  constexpr int64_t kBlasMax = std::numeric_limits<int>::max();
  GENESIS_CHECK(args.m <= kBlasMax && n <= kBlasMax && k <= kBlasMax && args.lda <= kBlasMax &&
                    args.ldb <= kBlasMax,
                ValueError, op, ": matrix dimensions (m ", args.m, ", n ", n, ", k ", k,
                ") exceed the BLAS limit of ", kBlasMax);
  return g;
}

// out = alpha * a @ b + beta * out (see prepare_gemm), any sizes. No autograd.
void run_gemm(const char* op, const Tensor& a_in, const Tensor& b_in, Tensor& out, double beta, double alpha = 1.0) {
  if (out.numel() == 0) return;
  if (a_in.size(-1) == 0) {
    if (beta == 0.0) out.fill_(0.0);
    return;
  }
  PreparedGemm g = prepare_gemm(op, a_in, b_in, out, beta, alpha);
  if (out.device().is_cpu()) {
    kernels::cpu::gemm(out.dtype(), g.args);
  } else {
    GENESIS_ON_CUDA(kernels::cuda::gemm(out.dtype(), g.args, cuda::current_stream()));
  }
}

#if GENESIS_WITH_CUDA
// out [m, n] = epilogue(a [m, k] @ b [k, n]) through cuBLASLt, for f32/f16/bf16 CUDA matrices
// with m, n, k > 0; false (nothing written) when cuBLASLt has no algorithm for the case.
bool gemm_with_epilogue(const char* op, const Tensor& a, const Tensor& b, Tensor& out,
                        const kernels::cuda::GemmEpilogue& epilogue) {
  PreparedGemm g = prepare_gemm(op, a, b, out, 0.0);
  return kernels::cuda::gemm_with_epilogue(out.dtype(), g.args, epilogue, cuda::current_stream());
}
#endif

Shape batch_of(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

Shape with_matrix(Shape batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

// The dtype GEMM runs in for a result dtype: integers go through f64 (exact while every
// partial sum stays below 2^53).
DType gemm_dtype(const char* op, DType result) {
  GENESIS_CHECK(result != DType::boolean, DTypeError, op, ": bool tensors cannot be multiplied; convert them first");
  return is_floating(result) ? result : DType::f64;
}

// a2 [batch_a..., m, k] @ b2 [batch_b..., k, n] with broadcast batch dimensions, in the
// promoted dtype. `a_shape` and `b_shape` are the caller's shapes for error messages.
Tensor batched_matmul(const char* op, const Tensor& a2, const Tensor& b2, const Shape& a_shape,
                      const Shape& b_shape) {
  NoGradGuard forward_only;
  const int64_t m = a2.size(-2), k = a2.size(-1), n = b2.size(-1);
  GENESIS_CHECK(b2.size(-2) == k, ShapeError, op, ": shapes ", a_shape, " and ", b_shape,
                " cannot be multiplied (inner dimensions ", k, " and ", b2.size(-2), " differ)");
  Shape batch_a = batch_of(a2), batch_b = batch_of(b2);
  size_t nb = std::max(batch_a.size(), batch_b.size());
  batch_a.insert(batch_a.begin(), nb - batch_a.size(), 1);
  batch_b.insert(batch_b.begin(), nb - batch_b.size(), 1);
  Shape batch(nb);
  for (size_t i = 0; i < nb; ++i) {
    GENESIS_CHECK(batch_a[i] == batch_b[i] || batch_a[i] == 1 || batch_b[i] == 1, ShapeError, op, ": shapes ",
                  a_shape, " and ", b_shape, " have batch dimensions that do not broadcast (", batch_a[i], " vs ",
                  batch_b[i], ")");
    batch[i] = batch_a[i] == 1 ? batch_b[i] : batch_a[i];
  }
  DType result = promote_types(a2.dtype(), b2.dtype());
  DType compute = gemm_dtype(op, result);
  Tensor out = empty(with_matrix(batch, m, n), {.dtype = compute, .device = a2.device()});
  run_gemm(op, a2.to(compute).expand(with_matrix(batch, m, k)), b2.to(compute).expand(with_matrix(batch, k, n)), out,
           0.0);
  return out.to(result);
}

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_defined(op, a, "a");
  detail::check_defined(op, b, "b");
}

// matmul's operands as matrices: a 1-D a becomes [1, k], a 1-D b becomes [k, 1].
Tensor as_matrix_a(const Tensor& a) { return a.dim() == 1 ? a.unsqueeze(0) : a; }
Tensor as_matrix_b(const Tensor& b) { return b.dim() == 1 ? b.unsqueeze(1) : b; }

Tensor transpose_last(const Tensor& t) { return t.transpose(-1, -2); }

}  // namespace

Tensor matmul(const Tensor& a_arg, const Tensor& b_arg) {
  check_operands("matmul", a_arg, b_arg);
  auto [a, b] = detail::op_prologue<OpId::matmul>(a_arg, b_arg);
  GENESIS_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, "matmul: both arguments need at least one dimension (got ",
                a.shape(), " and ", b.shape(), ")");
  Tensor out = kept_or_computed("matmul", [&lhs = a, &rhs = b] {
    NoGradGuard forward_only;
    Tensor product = batched_matmul("matmul", as_matrix_a(lhs), as_matrix_b(rhs), lhs.shape(), rhs.shape());
    if (lhs.dim() == 1) product = product.squeeze(-2);
    if (rhs.dim() == 1) product = product.squeeze(-1);
    return TensorList{product};
  })[0];
  if (needs_grad({a, b})) {
    // Each operand is kept only for the other's gradient.
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record("matmul", {a, b}, {out},
           [need_a, need_b, as = need_b ? saved(a) : Tensor(), bs = need_a ? saved(b) : Tensor(), a_shape = a.shape(),
            b_shape = b.shape(), a_dtype = a.dtype(), b_dtype = b.dtype()](const TensorList& g) {
             DType dt = g[0].dtype();
             // Re-insert the dimensions that 1-D operands dropped: g2 is [batch..., m, n].
             Tensor g2 = g[0];
             if (b_shape.size() == 1) g2 = g2.unsqueeze(-1);
             if (a_shape.size() == 1) g2 = g2.unsqueeze(-2);
             TensorList grads(2);
             if (need_a) {
               const Shape a2_shape = a_shape.size() == 1 ? Shape{1, a_shape[0]} : a_shape;
               Tensor b2 = as_matrix_b(bs.to(dt));
               grads[0] = sum_to(matmul(g2, transpose_last(b2)), a2_shape).reshape(a_shape).to(a_dtype);
             }
             if (need_b) {
               const Shape b2_shape = b_shape.size() == 1 ? Shape{b_shape[0], 1} : b_shape;
               Tensor a2 = as_matrix_a(as.to(dt));
               grads[1] = sum_to(matmul(transpose_last(a2), g2), b2_shape).reshape(b_shape).to(b_dtype);
             }
             return grads;
           });
  }
  return out;
}

Tensor bmm(const Tensor& a_arg, const Tensor& b_arg) {
  check_operands("bmm", a_arg, b_arg);
  auto [a, b] = detail::op_prologue<OpId::bmm>(a_arg, b_arg);
  GENESIS_CHECK(a.dim() == 3 && b.dim() == 3, ShapeError, "bmm: expects two 3-D tensors, got shapes ", a.shape(),
                " and ", b.shape());
  GENESIS_CHECK(a.size(0) == b.size(0), ShapeError, "bmm: batch sizes differ (shapes ", a.shape(), " and ",
                b.shape(), ")");
  Tensor out = batched_matmul("bmm", a, b, a.shape(), b.shape());
  if (needs_grad({a, b})) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    record("bmm", {a, b}, {out},
           [need_a, need_b, as = need_b ? saved(a) : Tensor(), bs = need_a ? saved(b) : Tensor(), a_dtype = a.dtype(),
            b_dtype = b.dtype()](const TensorList& g) {
             DType dt = g[0].dtype();
             TensorList grads(2);
             if (need_a) grads[0] = bmm(g[0], transpose_last(bs.to(dt))).to(a_dtype);
             if (need_b) grads[1] = bmm(transpose_last(as.to(dt)), g[0]).to(b_dtype);
             return grads;
           });
  }
  return out;
}

namespace {

struct LinearShapes {
  DType dtype;
  Shape out_shape;
  int64_t rows;
};

LinearShapes check_linear(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_defined(op, x, "x");
  detail::check_defined(op, weight, "weight");
  GENESIS_CHECK(x.dim() >= 1 && weight.dim() == 2 && x.size(-1) == weight.size(1), ShapeError, op,
                ": input of shape ", x.shape(), " does not match weight of shape ", weight.shape(),
                " (expected input [..., in] and weight [out, in])");
  const int64_t out_features = weight.size(0);
  GENESIS_CHECK(!bias.defined() || bias.shape() == Shape{out_features}, ShapeError, op, ": bias of shape ",
                bias.defined() ? bias.shape() : Shape{}, " does not match weight of shape ", weight.shape(),
                " (expected [", out_features, "])");
  DType dt = promote_types(x.dtype(), weight.dtype());
  if (bias.defined()) dt = promote_types(dt, bias.dtype());
  GENESIS_CHECK(is_floating(dt), DTypeError, op, ": expects floating tensors, got ", dtype_name(x.dtype()), " and ",
                dtype_name(weight.dtype()));
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  const int64_t rows = numel_of(out_shape);
  out_shape.push_back(out_features);
  return {dt, out_shape, rows};
}

struct LinearOutput {
  Tensor out;  // [rows, out]
  Tensor pre;  // with GELU and keep_pre: the pre-activation x2 w^T + b, for the backward
};

// x2 [rows, in] @ w^T + b (b contiguous or undefined), then gelu_tanh when with_gelu; all of
// one dtype. No autograd. keep_pre asks the CUDA epilogue to store the pre-activation (the
// composed path always has it).
LinearOutput linear_forward(const char* op, const Tensor& x2, const Tensor& w, const Tensor& b, bool with_gelu,
                            [[maybe_unused]] bool keep_pre) {
  NoGradGuard forward_only;
  const int64_t out_features = w.size(0);
  Tensor out = empty({x2.size(0), out_features}, {.dtype = x2.dtype(), .device = x2.device()});
#if GENESIS_WITH_CUDA
  // On CUDA the bias and the activation ride on the GEMM's epilogue: one kernel. cuBLASLt
  // wants the pre-activation's leading dimension to be a multiple of 8.
  if (x2.device().is_cuda() && x2.dtype() != DType::f64 && out.numel() > 0 && x2.size(1) > 0 &&
      (b.defined() || with_gelu) && (!keep_pre || out_features % 8 == 0)) {
    kernels::cuda::GemmEpilogue epilogue{
        .kind = with_gelu ? kernels::cuda::EpilogueKind::gelu_tanh : kernels::cuda::EpilogueKind::bias,
        .bias = b.defined() ? b.data_ptr() : nullptr};
    Tensor pre;
    if (with_gelu && keep_pre) {
      pre = empty(out.shape(), {.dtype = out.dtype(), .device = out.device()});
      epilogue.pre_activation = pre.data_ptr();
      epilogue.ld_pre = out_features;
    }
    if (gemm_with_epilogue(op, x2, w.t(), out, epilogue)) return {out, pre};
  }
#endif
  // The bias is copied into the output and accumulated by the GEMM (beta = 1).
  if (b.defined()) out.copy_(b.expand(out.shape()));
  run_gemm(op, x2, w.t(), out, b.defined() ? 1.0 : 0.0);
  if (!with_gelu) return {out, Tensor()};
  return {gelu(out, GeluApproximation::tanh), out};
}

// Gradients of x2 [rows, in] @ w^T + b with respect to x2, w and b from g2 [rows, out], all
// of one dtype; each only where asked (w is read only for x2's gradient, x2 only for w's). On
// CUDA the bias gradient rides on the weight gradient's GEMM (cuBLASLt's BGRADB epilogue sums
// g2 over rows as it reads it). A transposed weight gets its gradient in its own layout.
TensorList linear_backward([[maybe_unused]] const char* op, const Tensor& g2, const Tensor& x2, const Tensor& w,
                           bool need_x, bool need_w, bool need_b, bool weight_transposed) {
  TensorList grads(3);
  if (need_x) grads[0] = matmul(g2, w);
  if (weight_transposed) {
    // The weight is the transposed view of an [in, out] tensor (GPT-2's Conv1D): its gradient
    // is computed in that layout, so the parameter's accumulation is a contiguous pass.
    if (need_w) grads[1] = matmul(x2.t(), g2).t();
    if (need_b) grads[2] = sum(g2, {0});
    return grads;
  }
#if GENESIS_WITH_CUDA
  if (need_w && need_b && g2.device().is_cuda() && g2.dtype() != DType::f64 && g2.numel() > 0 && x2.size(1) > 0) {
    Tensor gw = empty({g2.size(1), x2.size(1)}, {.dtype = g2.dtype(), .device = g2.device()});
    Tensor gb = empty({g2.size(1)}, {.dtype = g2.dtype(), .device = g2.device()});
    kernels::cuda::GemmEpilogue epilogue{.kind = kernels::cuda::EpilogueKind::bias_grad, .bias_grad = gb.data_ptr()};
    if (gemm_with_epilogue(op, g2.t(), x2, gw, epilogue)) {
      grads[1] = gw;
      grads[2] = gb;
      return grads;
    }
  }
#endif
  if (need_w) grads[1] = matmul(g2.t(), x2);
  if (need_b) grads[2] = sum(g2, {0});
  return grads;
}

// grad_pre = grad_out * gelu_tanh'(pre), one fused pass.
Tensor gelu_tanh_backward(const Tensor& pre, const Tensor& grad_out) {
  Tensor g = grad_out.to(pre.dtype()).contiguous();
  Tensor grad_pre = empty(pre.shape(), {.dtype = pre.dtype(), .device = pre.device()});
  if (pre.device().is_cpu()) {
    kernels::cpu::unary_backward(kernels::UnaryOp::gelu_tanh, pre.dtype(), pre.numel(), pre.data_ptr(), g.data_ptr(),
                                 grad_pre.data_ptr(), {});
  } else {
    GENESIS_ON_CUDA(kernels::cuda::unary_backward(kernels::UnaryOp::gelu_tanh, pre.dtype(), pre.numel(), pre.data_ptr(),
                                                  g.data_ptr(), grad_pre.data_ptr(), {}, cuda::current_stream()));
  }
  return grad_pre;
}

// linear, and linear followed by gelu_tanh (`op` names which), after the op prologue.
Tensor linear_op(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, bool with_gelu) {
  const LinearShapes shapes = check_linear(op, x, weight, bias);
  const DType dt = shapes.dtype;
  const int64_t rows = shapes.rows, in_features = weight.size(1);
  const bool grad = needs_grad({x, weight, bias});
  const Tensor x2 = x.to(dt).reshape({rows, in_features}), w = weight.to(dt);
  const Tensor b = bias.defined() ? bias.to(dt).contiguous() : Tensor();
  const bool keep_pre = with_gelu && (grad || in_checkpoint_forward());
  LinearOutput forward;
  // Selective checkpointing keeps linear_gelu's pre-activation and recomputes GELU from it, on the
  // CPU, where the forward runs that same elementwise GELU. On CUDA the GELU rides on the GEMM's
  // epilogue, computed from the f32 accumulator before rounding: recomputed from the rounded
  // pre-activation it would differ (bf16: by a rounding step), so the output is kept as well.
  const bool keep_output = with_gelu && x2.device().is_cuda();
  const TensorList kept = kept_or_computed(op, [&] {
    forward = linear_forward(op, x2, w, b, with_gelu, keep_pre);
    if (!with_gelu) return TensorList{forward.out};
    return keep_output ? TensorList{forward.out, forward.pre} : TensorList{forward.pre};
  });
  if (!forward.out.defined()) {  // taken back from a checkpoint's forward
    NoGradGuard forward_only;
    if (!with_gelu) {
      forward = {kept[0], Tensor()};
    } else {
      forward = keep_output ? LinearOutput{kept[0], kept[1]} : LinearOutput{gelu(kept[0], GeluApproximation::tanh), kept[0]};
    }
  }
  Tensor out = forward.out.view(shapes.out_shape);
  if (grad) {
    // x is kept for the weight's gradient, the weight for x's; never the output (linear_gelu
    // keeps its pre-activation, which GELU's derivative reads).
    const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
    record(op, {x, weight, bias}, {out},
           [op, xs = need_w ? saved(x) : Tensor(), ws = need_x ? saved(weight) : Tensor(), pre = saved(forward.pre),
            x_shape = x.shape(), x_dtype = x.dtype(), w_dtype = weight.dtype(),
            bdt = bias.defined() ? bias.dtype() : dt, rows, in_features, out_features = weight.size(0), need_x, need_w,
            weight_transposed = weight.size(1) > 1 && weight.stride(0) == 1 && weight.stride(1) == weight.size(0),
            need_b = bias.defined() && bias.requires_grad()](const TensorList& g) {
             Tensor g2 = g[0].reshape({rows, out_features});
             if (pre.defined()) g2 = gelu_tanh_backward(pre, g2);
             DType grad_dtype = g2.dtype();
             Tensor x2 = xs.defined() ? xs.to(grad_dtype).reshape({rows, in_features}) : Tensor();
             Tensor w = ws.defined() ? ws.to(grad_dtype) : Tensor();
             TensorList grads = linear_backward(op, g2, x2, w, need_x, need_w, need_b, weight_transposed);
             if (grads[0].defined()) grads[0] = grads[0].reshape(x_shape).to(x_dtype);
             if (grads[1].defined()) grads[1] = grads[1].to(w_dtype);
             if (grads[2].defined()) grads[2] = grads[2].to(bdt);
             return grads;
           });
  }
  return out;
}

// The adapter of a linear layer, y = x W^T + b + scale (x A^T) B^T (lora_linear, swiglu_linear):
// checks that the factors fit the weight. Both undefined: a plain linear.
bool check_adapter(const char* op, const Tensor& weight, const Tensor& lora_a, const Tensor& lora_b) {
  if (!lora_a.defined() && !lora_b.defined()) return false;
  detail::check_defined(op, lora_a, "lora_a");
  detail::check_defined(op, lora_b, "lora_b");
  const int64_t in_features = weight.size(1), out_features = weight.size(0);
  GENESIS_CHECK(lora_a.dim() == 2 && lora_b.dim() == 2 && lora_a.size(1) == in_features &&
                    lora_b.size(0) == out_features && lora_b.size(1) == lora_a.size(0),
                ShapeError, op, ": lora_a of shape ", lora_a.shape(), " and lora_b of shape ", lora_b.shape(),
                " do not fit weight of shape ", weight.shape(), " (expected [r, ", in_features, "] and [",
                out_features, ", r])");
  return true;
}

// x2 [rows, in] W^T + b, and with an adapter (a, b_ defined) down = scale x2 A^T [rows, r], then
// out += down B^T (beta = 1: no [rows, out] temporary). All of one dtype; no autograd.
std::pair<Tensor, Tensor> adapted_forward(const char* op, const Tensor& x2, const Tensor& w, const Tensor& bias,
                                          const Tensor& a, const Tensor& b, double scale) {
  Tensor out = linear_forward(op, x2, w, bias, false, false).out;
  if (!a.defined()) return {out, Tensor()};
  NoGradGuard forward_only;
  Tensor down = empty({x2.size(0), a.size(0)}, {.dtype = x2.dtype(), .device = x2.device()});
  run_gemm(op, x2, a.t(), down, 0.0, scale);
  run_gemm(op, down, b.t(), out, 1.0);
  return {out, down};
}

// The backward of an adapted linear in two stages, so that swiglu_linear can compute its input x
// between them: first x's gradient, dx = dy W + scale (dy B) A, then the parameters' from x.
struct AdaptedBackward {
  const char* op;
  Tensor w, a, b;  // in their own dtypes; each kept only where a gradient reads it
  Tensor down;     // scale x A^T [rows, r], lora_b's gradient reads it
  double scale;
  bool need_x, need_w, need_bias, need_a, need_b, weight_transposed;

  // dy B [rows, r] (what lora_a's gradient and x's share) where either needs it.
  Tensor adapter_grad(const Tensor& g2) const {
    if (!(need_x || need_a) || !b.defined()) return Tensor();
    NoGradGuard no_graph;
    return matmul(g2, b.to(g2.dtype()));
  }
  // x's gradient [rows, in] from g2 [rows, out] and adapter_grad(g2).
  Tensor input_grad(const Tensor& g2, const Tensor& up) const {
    if (!need_x) return Tensor();
    NoGradGuard no_graph;
    Tensor dx = linear_backward(op, g2, Tensor(), w.to(g2.dtype()), true, false, false, weight_transposed)[0];
    if (up.defined()) run_gemm(op, up, a.to(g2.dtype()), dx, 1.0, scale);
    return dx;
  }
  // The gradients of weight, bias, lora_a and lora_b (undefined where not asked) from x2 [rows, in]
  // in g2's dtype, each cast to its parameter's dtype in `dtypes`.
  std::array<Tensor, 4> param_grads(const Tensor& g2, const Tensor& x2, const Tensor& up,
                                    const std::array<DType, 4>& dtypes) const {
    NoGradGuard no_graph;
    std::array<Tensor, 4> grads;
    const TensorList base = linear_backward(op, g2, x2, Tensor(), false, need_w, need_bias, weight_transposed);
    grads[0] = base[1];
    grads[1] = base[2];
    if (need_a) {
      grads[2] = empty({up.size(1), x2.size(1)}, {.dtype = g2.dtype(), .device = g2.device()});
      run_gemm(op, up.t(), x2, grads[2], 0.0, scale);
    }
    if (need_b) grads[3] = matmul(g2.t(), down.to(g2.dtype()));
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i].defined()) grads[i] = grads[i].to(dtypes[i]);
    return grads;
  }
};

bool is_transposed_weight(const Tensor& weight) {
  return weight.size(1) > 1 && weight.stride(0) == 1 && weight.stride(1) == weight.size(0);
}

// What the backward of an adapted linear keeps (the adapter's factors undefined: none), where
// need_x says whether its input takes a gradient.
AdaptedBackward adapted_backward(const char* op, bool need_x, const Tensor& weight, const Tensor& bias,
                                 const Tensor& lora_a, const Tensor& lora_b, const Tensor& down, double scale) {
  const bool adapted = lora_a.defined();
  const bool need_a = adapted && lora_a.requires_grad(), need_b = adapted && lora_b.requires_grad();
  return {.op = op,
          .w = need_x ? saved(weight) : Tensor(),
          .a = need_x && adapted ? saved(lora_a) : Tensor(),
          .b = (need_x || need_a) && adapted ? saved(lora_b) : Tensor(),
          .down = need_b ? saved(down) : Tensor(),
          .scale = scale,
          .need_x = need_x,
          .need_w = weight.requires_grad(),
          .need_bias = bias.defined() && bias.requires_grad(),
          .need_a = need_a,
          .need_b = need_b,
          .weight_transposed = is_transposed_weight(weight)};
}

// lora_linear after the op prologue: the base's linear_forward, then the adapter's two GEMMs,
// the second accumulating into the base's output.
Tensor lora_linear_op(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_a,
                      const Tensor& lora_b, double scale) {
  const char* op = "lora_linear";
  const LinearShapes shapes = check_linear(op, x, weight, bias);
  check_adapter(op, weight, lora_a, lora_b);
  const int64_t rows = shapes.rows, in_features = weight.size(1), out_features = weight.size(0);
  const DType dt = promote_types(promote_types(shapes.dtype, lora_a.dtype()), lora_b.dtype());
  GENESIS_CHECK(is_floating(dt), DTypeError, op, ": expects floating tensors, got ", dtype_name(dt));
  const bool grad = needs_grad({x, weight, bias, lora_a, lora_b});
  const Tensor x2 = x.to(dt).reshape({rows, in_features}), w = weight.to(dt), a = lora_a.to(dt), b = lora_b.to(dt);
  const Tensor bias2 = bias.defined() ? bias.to(dt).contiguous() : Tensor();
  Tensor out, down;  // down = scale * x A^T [rows, r]: lora_b's gradient reads it
  const TensorList kept = kept_or_computed(op, [&] {
    std::tie(out, down) = adapted_forward(op, x2, w, bias2, a, b, scale);
    return TensorList{out, down};
  });
  if (!out.defined()) {  // taken back from a checkpoint's forward
    out = kept[0];
    down = kept[1];
  }
  Tensor result = out.view(shapes.out_shape);
  if (!grad) return result;
  const AdaptedBackward backward = adapted_backward(op, x.requires_grad(), weight, bias, lora_a, lora_b, down, scale);
  record(op, {x, weight, bias, lora_a, lora_b}, {result},
         [backward, xs = backward.need_w || backward.need_a ? saved(x) : Tensor(), x_shape = x.shape(), x_dtype = x.dtype(),
          rows, in_features, out_features,
          dtypes = std::array<DType, 4>{weight.dtype(), bias.defined() ? bias.dtype() : dt, lora_a.dtype(),
                                        lora_b.dtype()}](const TensorList& g) {
           const Tensor g2 = g[0].reshape({rows, out_features});
           const Tensor up = backward.adapter_grad(g2);
           Tensor dx = backward.input_grad(g2, up);
           const Tensor x2 = xs.defined() ? xs.to(g2.dtype()).reshape({rows, in_features}) : Tensor();
           const std::array<Tensor, 4> p = backward.param_grads(g2, x2, up, dtypes);
           if (dx.defined()) dx = dx.reshape(x_shape).to(x_dtype);
           return TensorList{dx, p[0], p[1], p[2], p[3]};
         });
  return result;
}

// silu(gate) * up for contiguous gate and up of one dtype (ops/transformer.h's swiglu kernels).
Tensor swiglu_values(const Tensor& gate, const Tensor& up) {
  Tensor h = empty(gate.shape(), {.dtype = gate.dtype(), .device = gate.device()});
  if (gate.device().is_cpu()) {
    kernels::cpu::swiglu(gate.dtype(), gate.numel(), gate.data_ptr(), up.data_ptr(), h.data_ptr());
  } else {
    GENESIS_ON_CUDA(kernels::cuda::swiglu(gate.dtype(), gate.numel(), gate.data_ptr(), up.data_ptr(), h.data_ptr(),
                                          cuda::current_stream()));
  }
  return h;
}

// swiglu_linear after the op prologue. The forward computes h = swiglu(gate, up) into a
// temporary, then the adapted linear of h; the backward computes h again in the pass of SwiGLU's
// gradients (one more write of h, no more reads) after x's gradient and before the parameters'.
Tensor swiglu_linear_op(const Tensor& gate, const Tensor& up, const Tensor& weight, const Tensor& bias,
                        const Tensor& lora_a, const Tensor& lora_b, double scale) {
  const char* op = "swiglu_linear";
  detail::check_defined(op, gate, "gate");
  detail::check_defined(op, up, "up");
  GENESIS_CHECK(gate.shape() == up.shape(), ShapeError, op, ": gate ", gate.shape(), " and up ", up.shape(),
                " must have the same shape");
  const LinearShapes shapes = check_linear(op, gate, weight, bias);
  const bool adapted = check_adapter(op, weight, lora_a, lora_b);
  DType dt = promote_types(shapes.dtype, up.dtype());
  if (adapted) dt = promote_types(promote_types(dt, lora_a.dtype()), lora_b.dtype());
  GENESIS_CHECK(is_floating(dt), DTypeError, op, ": expects floating tensors, got ", dtype_name(dt));
  const int64_t rows = shapes.rows, in_features = weight.size(1), out_features = weight.size(0);
  const bool grad = needs_grad({gate, up, weight, bias, lora_a, lora_b});
  const Tensor gate2 = gate.to(dt).reshape({rows, in_features}).contiguous();
  const Tensor up2 = up.to(dt).reshape({rows, in_features}).contiguous();
  const Tensor w = weight.to(dt), a = adapted ? lora_a.to(dt) : Tensor(), b = adapted ? lora_b.to(dt) : Tensor();
  const Tensor bias2 = bias.defined() ? bias.to(dt).contiguous() : Tensor();
  Tensor out, down;
  const TensorList kept = kept_or_computed(op, [&] {
    NoGradGuard forward_only;
    std::tie(out, down) = adapted_forward(op, swiglu_values(gate2, up2), w, bias2, a, b, scale);
    return adapted ? TensorList{out, down} : TensorList{out};
  });
  if (!out.defined()) {  // taken back from a checkpoint's forward
    out = kept[0];
    if (adapted) down = kept[1];
  }
  Tensor result = out.view(shapes.out_shape);
  if (!grad) return result;
  const AdaptedBackward backward = adapted_backward(op, gate.requires_grad() || up.requires_grad(), weight, bias,
                                                    lora_a, lora_b, down, scale);
  record(op, {gate, up, weight, bias, lora_a, lora_b}, {result},
         [backward, gs = saved(gate2), us = saved(up2), shape = gate.shape(),
          in_dtypes = std::array<DType, 2>{gate.dtype(), up.dtype()}, rows, out_features,
          dtypes = std::array<DType, 4>{weight.dtype(), bias.defined() ? bias.dtype() : dt,
                                        adapted ? lora_a.dtype() : dt, adapted ? lora_b.dtype() : dt}](
             const TensorList& g) {
           NoGradGuard no_graph;
           const Tensor g2 = g[0].reshape({rows, out_features});
           const DType gd = g2.dtype();
           const Tensor up = backward.adapter_grad(g2);
           const Tensor dh = backward.input_grad(g2, up);
           const Tensor gate2 = gs.to(gd).contiguous(), up2 = us.to(gd).contiguous();
           // h again, written by the pass of SwiGLU's gradients, for the weight's and lora_a's.
           Tensor h = backward.need_w || backward.need_a ? empty_like(gate2) : Tensor();
           TensorList grads(6);
           if (dh.defined()) {
             grads[0] = empty_like(gate2);
             grads[1] = empty_like(up2);
             void* values = h.defined() ? h.data_ptr() : nullptr;
             if (gate2.device().is_cpu()) {
               kernels::cpu::swiglu_backward(gd, gate2.numel(), gate2.data_ptr(), up2.data_ptr(), dh.data_ptr(),
                                             grads[0].data_ptr(), grads[1].data_ptr(), values);
             } else {
               GENESIS_ON_CUDA(kernels::cuda::swiglu_backward(gd, gate2.numel(), gate2.data_ptr(), up2.data_ptr(),
                                                              dh.data_ptr(), grads[0].data_ptr(), grads[1].data_ptr(),
                                                              values, cuda::current_stream()));
             }
             for (size_t i = 0; i < 2; ++i) grads[i] = grads[i].reshape(shape).to(in_dtypes[i]);
           } else if (h.defined()) {
             h = swiglu_values(gate2, up2);
           }
           const std::array<Tensor, 4> p = backward.param_grads(g2, h, up, dtypes);
           std::copy(p.begin(), p.end(), grads.begin() + 2);
           return grads;
         });
  return result;
}

}  // namespace

Tensor lora_linear(const Tensor& x_arg, const Tensor& weight_arg, const Tensor& bias_arg, const Tensor& a_arg,
                   const Tensor& b_arg, double scale) {
  auto [x, weight, bias, lora_a, lora_b] = detail::op_prologue<OpId::lora_linear>(x_arg, weight_arg, bias_arg, a_arg, b_arg);
  return lora_linear_op(x, weight, bias, lora_a, lora_b, scale);
}

Tensor swiglu_linear(const Tensor& gate_arg, const Tensor& up_arg, const Tensor& weight_arg, const Tensor& bias_arg,
                     const Tensor& a_arg, const Tensor& b_arg, double scale) {
  auto [gate, up, weight, bias, lora_a, lora_b] =
      detail::op_prologue<OpId::swiglu_linear>(gate_arg, up_arg, weight_arg, bias_arg, a_arg, b_arg);
  return swiglu_linear_op(gate, up, weight, bias, lora_a, lora_b, scale);
}

Tensor linear(const Tensor& x_arg, const Tensor& weight_arg, const Tensor& bias_arg) {
  auto [x, weight, bias] = detail::op_prologue<OpId::linear>(x_arg, weight_arg, bias_arg);
  return linear_op("linear", x, weight, bias, false);
}

Tensor linear_gelu(const Tensor& x_arg, const Tensor& weight_arg, const Tensor& bias_arg) {
  auto [x, weight, bias] = detail::op_prologue<OpId::linear_gelu>(x_arg, weight_arg, bias_arg);
  return linear_op("linear_gelu", x, weight, bias, true);
}

void set_allow_tf32(bool allow) {
#if GENESIS_WITH_CUDA
  cuda::set_allow_tf32(allow);
#else
  (void)allow;  // no CUDA GEMMs in this build
#endif
}

}  // namespace genesis
