// matmul, bmm and linear: argument checks, operand layouts for GEMM, backward formulas.
#include "libgenesis/ops/linalg.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "kernels/cpu/linalg.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/reduce.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/linalg.h"
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

// out [batch..., m, n] (contiguous) = a [batch..., m, k] @ b [batch..., k, n] + beta * out.
// a, b and out share a floating dtype, a device and the batch shape. No autograd.
void run_gemm(const char* op, const Tensor& a_in, const Tensor& b_in, Tensor& out, double beta) {
  if (out.numel() == 0) return;
  const int64_t m = a_in.size(-2), k = a_in.size(-1), n = b_in.size(-1);
  if (k == 0) {
    if (beta == 0.0) out.fill_(0.0);
    return;
  }
  Operand a = gemm_operand(a_in), b = gemm_operand(b_in);
  kernels::cpu::GemmArgs args{.trans_a = a.trans,
                              .trans_b = b.trans,
                              .m = m,
                              .n = n,
                              .k = k,
                              .a = a.t.data_ptr(),
                              .lda = a.ld,
                              .stride_a = a.batch_stride,
                              .b = b.t.data_ptr(),
                              .ldb = b.ld,
                              .stride_b = b.batch_stride,
                              .c = out.data_ptr(),
                              .ldc = n,
                              .stride_c = m * n,
                              .batch = out.numel() / (m * n),
                              .alpha = 1.0,
                              .beta = beta};
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
  if (out.device().is_cpu()) {
    kernels::cpu::gemm(out.dtype(), args);
  } else {
    GENESIS_ON_CUDA(kernels::cuda::gemm(out.dtype(), args, cuda::current_stream()));
  }
}

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
  detail::check_same_device(op, {a, b});
}

// matmul's operands as matrices: a 1-D a becomes [1, k], a 1-D b becomes [k, 1].
Tensor as_matrix_a(const Tensor& a) { return a.dim() == 1 ? a.unsqueeze(0) : a; }
Tensor as_matrix_b(const Tensor& b) { return b.dim() == 1 ? b.unsqueeze(1) : b; }

Tensor transpose_last(const Tensor& t) { return t.transpose(-1, -2); }

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_operands("matmul", a, b);
  GENESIS_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, "matmul: both arguments need at least one dimension (got ",
                a.shape(), " and ", b.shape(), ")");
  Tensor out;
  {
    NoGradGuard forward_only;
    out = batched_matmul("matmul", as_matrix_a(a), as_matrix_b(b), a.shape(), b.shape());
    if (a.dim() == 1) out = out.squeeze(-2);
    if (b.dim() == 1) out = out.squeeze(-1);
  }
  if (needs_grad({a, b})) {
    record("matmul", {a, b}, {out},
           [as = saved(a), bs = saved(b), need_a = a.requires_grad(), need_b = b.requires_grad()](const TensorList& g) {
             DType dt = g[0].dtype();
             Tensor a2 = as_matrix_a(as.to(dt)), b2 = as_matrix_b(bs.to(dt));
             // Re-insert the dimensions that 1-D operands dropped: g2 is [batch..., m, n].
             Tensor g2 = g[0];
             if (bs.dim() == 1) g2 = g2.unsqueeze(-1);
             if (as.dim() == 1) g2 = g2.unsqueeze(-2);
             TensorList grads(2);
             if (need_a)
               grads[0] = sum_to(matmul(g2, transpose_last(b2)), a2.shape()).reshape(as.shape()).to(as.dtype());
             if (need_b)
               grads[1] = sum_to(matmul(transpose_last(a2), g2), b2.shape()).reshape(bs.shape()).to(bs.dtype());
             return grads;
           });
  }
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_operands("bmm", a, b);
  GENESIS_CHECK(a.dim() == 3 && b.dim() == 3, ShapeError, "bmm: expects two 3-D tensors, got shapes ", a.shape(),
                " and ", b.shape());
  GENESIS_CHECK(a.size(0) == b.size(0), ShapeError, "bmm: batch sizes differ (shapes ", a.shape(), " and ",
                b.shape(), ")");
  Tensor out = batched_matmul("bmm", a, b, a.shape(), b.shape());
  if (needs_grad({a, b})) {
    record("bmm", {a, b}, {out},
           [as = saved(a), bs = saved(b), need_a = a.requires_grad(), need_b = b.requires_grad()](const TensorList& g) {
             DType dt = g[0].dtype();
             TensorList grads(2);
             if (need_a) grads[0] = bmm(g[0], transpose_last(bs.to(dt))).to(as.dtype());
             if (need_b) grads[1] = bmm(transpose_last(as.to(dt)), g[0]).to(bs.dtype());
             return grads;
           });
  }
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  detail::check_defined("linear", x, "x");
  detail::check_defined("linear", weight, "weight");
  detail::check_same_device("linear", {x, weight, bias});
  GENESIS_CHECK(x.dim() >= 1 && weight.dim() == 2 && x.size(-1) == weight.size(1), ShapeError,
                "linear: input of shape ", x.shape(), " does not match weight of shape ", weight.shape(),
                " (expected input [..., in] and weight [out, in])");
  const int64_t out_features = weight.size(0), in_features = weight.size(1);
  GENESIS_CHECK(!bias.defined() || bias.shape() == Shape{out_features}, ShapeError, "linear: bias of shape ",
                bias.defined() ? bias.shape() : Shape{}, " does not match weight of shape ", weight.shape(),
                " (expected [", out_features, "])");
  DType dt = promote_types(x.dtype(), weight.dtype());
  if (bias.defined()) dt = promote_types(dt, bias.dtype());
  GENESIS_CHECK(is_floating(dt), DTypeError, "linear: expects floating tensors, got ", dtype_name(x.dtype()), " and ",
                dtype_name(weight.dtype()));
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  const int64_t rows = numel_of(out_shape);
  out_shape.push_back(out_features);
  Tensor out;
  {
    NoGradGuard forward_only;
    Tensor x2 = x.to(dt).reshape({rows, in_features});
    Tensor out2 = empty({rows, out_features}, {.dtype = dt, .device = x.device()});
    // The bias is copied into the output and accumulated by the GEMM (beta = 1).
    if (bias.defined()) out2.copy_(bias.to(dt).expand(out2.shape()));
    run_gemm("linear", x2, weight.to(dt).t(), out2, bias.defined() ? 1.0 : 0.0);
    out = out2.view(out_shape);
  }
  if (needs_grad({x, weight, bias})) {
    record(
        "linear", {x, weight, bias}, {out},
        [xs = saved(x), ws = saved(weight), bdt = bias.defined() ? bias.dtype() : dt, rows, need_x = x.requires_grad(),
         need_w = weight.requires_grad(), need_b = bias.defined() && bias.requires_grad()](const TensorList& g) {
          DType grad_dtype = g[0].dtype();
          Tensor g2 = g[0].reshape({rows, ws.size(0)});
          TensorList grads(3);
          if (need_x) grads[0] = matmul(g2, ws.to(grad_dtype)).reshape(xs.shape()).to(xs.dtype());
          if (need_w) grads[1] = matmul(g2.t(), xs.to(grad_dtype).reshape({rows, ws.size(1)})).to(ws.dtype());
          if (need_b) grads[2] = sum(g2, {0}).to(bdt);
          return grads;
        });
  }
  return out;
}

}  // namespace genesis
