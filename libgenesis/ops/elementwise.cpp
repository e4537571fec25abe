// Elementwise ops: forward dispatch and backward formulas side by side.
#include "libgenesis/ops/elementwise.h"

#include <array>

#include <cmath>
#include <limits>

#include "kernels/cpu/elementwise.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/prologue.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/elementwise.h"
#endif

namespace genesis {

using kernels::BinaryOp;
using kernels::ElementwiseParams;
using kernels::UnaryOp;

namespace {

// One element of `dtype` holding `value` as fill writes it: the zero-stride scalar operand of
// the CPU kernels (no tensor, no allocation).
struct HostScalar {
  alignas(8) unsigned char bytes[8];
  HostScalar(DType dtype, double value) { kernels::cpu::fill(dtype, 1, bytes, value); }
};
constexpr int64_t kZeroStrides[kernels::kMaxDims] = {};

// `value` stored in `dtype` and read back.
double value_as(DType dtype, double value) {
  const HostScalar s(dtype, value);
  const int64_t one = 1;
  double out = 0.0;
  kernels::cpu::copy(1, &one, dtype, s.bytes, &one, DType::f64, &out, &one);
  return out;
}

// The dtype a number takes next to a tensor of `dtype`, like a Python number in PyTorch: the
// tensor's, except that bool + 1 counts (i64) and a fraction beside integers gives f32.
DType scalar_dtype(DType dtype, double value) {
  const bool whole = std::isfinite(value) && value == std::floor(value);
  if (dtype == DType::boolean) return whole ? DType::i64 : DType::f32;
  if (!is_floating(dtype) && !whole) return DType::f32;
  return dtype;
}

// Ops that map integers to integers keep the input dtype; the rest compute in floating point.
bool keeps_integer_dtype(UnaryOp op) {
  return op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::relu || op == UnaryOp::sign ||
         op == UnaryOp::clamp;
}

Tensor unary_forward(UnaryOp op, const Tensor& x_in, ElementwiseParams p) {
  Tensor x = x_in;
  if (!is_floating(x.dtype()) && !keeps_integer_dtype(op)) x = x.to(float_result_type(x.dtype()));
  if (x.dtype() == DType::boolean) x = x.to(DType::i64);
  Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  int nd = static_cast<int>(x.dim());
  if (x.device().is_cpu()) {
    kernels::cpu::unary(op, x.dtype(), nd, x.shape().data(), x.data_ptr(), x.strides().data(), y.data_ptr(), p);
  } else {
    GENESIS_ON_CUDA(kernels::cuda::unary(op, x.dtype(), nd, x.shape().data(), x.data_ptr(), x.strides().data(),
                                         y.data_ptr(), p, cuda::current_stream()));
  }
  return y;
}

// grad_x = grad_y * op'(x), one fused pass over contiguous operands.
Tensor unary_backward(UnaryOp op, const Tensor& x_in, const Tensor& g_in, ElementwiseParams p) {
  Tensor x = x_in.contiguous();
  Tensor g = g_in.to(x.dtype()).contiguous();
  Tensor gx = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (x.device().is_cpu()) {
    kernels::cpu::unary_backward(op, x.dtype(), x.numel(), x.data_ptr(), g.data_ptr(), gx.data_ptr(), p);
  } else {
    GENESIS_ON_CUDA(kernels::cuda::unary_backward(op, x.dtype(), x.numel(), x.data_ptr(), g.data_ptr(), gx.data_ptr(),
                                                  p, cuda::current_stream()));
  }
  return gx;
}

Tensor unary(const char* name, UnaryOp op, const Tensor& x, ElementwiseParams p = {}) {
  detail::check_defined(name, x, "input");
  Tensor y;
  {
    NoGradGuard forward_only;
    y = unary_forward(op, x, p);
  }
  if (is_floating(y.dtype()) && needs_grad({x})) {
    record(name, {x}, {y}, [op, p, xs = saved(x)](const TensorList& g) {
      return TensorList{unary_backward(op, xs.to(g[0].dtype()), g[0], p)};
    });
  }
  return y;
}

// A public unary op: its prologue, then the shared body under its table name.
template <OpId id>
Tensor unary_entry(UnaryOp op, const Tensor& x_arg, ElementwiseParams p = {}) {
  auto [x] = detail::op_prologue<id>(x_arg);
  return unary(op_info(id).name.data(), op, x, p);  // a literal: null-terminated
}

// The op-table row of a binary op: the kernels' BinaryOp names are the table's.
constexpr OpId binary_id(BinaryOp op) {
  switch (op) {
#define GENESIS_BINARY_ID(name) \
  case BinaryOp::name: return OpId::name;
    GENESIS_FORALL_BINARY_OPS(GENESIS_BINARY_ID)
#undef GENESIS_BINARY_ID
  }
  return OpId::add;
}

// Table names are string literals, so data() is null-terminated.
const char* binary_name(BinaryOp op) { return op_info(binary_id(op)).name.data(); }

// Broadcasts, promotes and runs the kernel. No autograd.
Tensor binary_forward(BinaryOp op, const Tensor& a_in, const Tensor& b_in) {
  const char* name = binary_name(op);
  detail::check_defined(name, a_in, "a");
  detail::check_defined(name, b_in, "b");
  DType compute = promote_types(a_in.dtype(), b_in.dtype());
  if (op == BinaryOp::div || op == BinaryOp::pow) {
    if (op == BinaryOp::div || compute == DType::boolean) compute = float_result_type(compute);
  }
  if (compute == DType::boolean && (op == BinaryOp::sub)) compute = DType::i64;
  Shape shape = broadcast_shapes(a_in.shape(), b_in.shape(), name);
#if GENESIS_WITH_CUDA
  // An f32 and a 16-bit operand (a residual stream plus a bf16 branch under autocast): the
  // kernel widens the 16-bit one as it reads it.
  if (a_in.device().is_cuda() && kernels::cuda::binary_mixed_supported(op, a_in.dtype(), b_in.dtype())) {
    Tensor a = a_in.expand(shape), b = b_in.expand(shape);
    Tensor out = empty(shape, {.dtype = DType::f32, .device = a.device()});
    kernels::cuda::binary_mixed(op, a.dtype(), b.dtype(), static_cast<int>(shape.size()), shape.data(), a.data_ptr(),
                                a.strides().data(), b.data_ptr(), b.strides().data(), out.data<float>(),
                                cuda::current_stream());
    return out;
  }
#endif
  Tensor a = a_in.to(compute).expand(shape);
  Tensor b = b_in.to(compute).expand(shape);
  DType out_dtype = kernels::is_comparison(op) ? DType::boolean : compute;
  Tensor out = empty(shape, {.dtype = out_dtype, .device = a.device()});
  int nd = static_cast<int>(shape.size());
  if (a.device().is_cpu()) {
    kernels::cpu::binary(op, compute, nd, shape.data(), a.data_ptr(), a.strides().data(), b.data_ptr(),
                         b.strides().data(), out.data_ptr());
  } else {
    GENESIS_ON_CUDA(kernels::cuda::binary(op, compute, nd, shape.data(), a.data_ptr(), a.strides().data(),
                                          b.data_ptr(), b.strides().data(), out.data_ptr(), cuda::current_stream()));
  }
  return out;
}

// Which operands a binary op's backward reads, given which inputs need a gradient: add and
// sub none, mul each operand for the other's gradient, div b (and its output for b's gradient).
struct BinarySaves {
  bool a = false, b = false, out = false;
};
BinarySaves binary_saves(BinaryOp op, bool need_a, bool need_b) {
  switch (op) {
    case BinaryOp::mul: return {.a = need_b, .b = need_a};
    case BinaryOp::div: return {.b = true, .out = need_b};
    case BinaryOp::pow: return {.a = true, .b = need_a, .out = need_b};
    case BinaryOp::maximum:
    case BinaryOp::minimum: return {.a = true, .b = true};
    default: return {};
  }
}

// Gradients of a binary op w.r.t. its (promoted, broadcast) operands, each only where asked;
// a, b and out are defined where binary_saves says so.
TensorList binary_backward(BinaryOp op, bool need_a, bool need_b, const Tensor& a, const Tensor& b, const Tensor& out,
                           const Tensor& g) {
  TensorList grads(2);
  switch (op) {
    case BinaryOp::add:
      grads = {g, g};
      break;
    case BinaryOp::sub:
      grads = {g, need_b ? neg(g) : Tensor()};
      break;
    case BinaryOp::mul:
      if (need_a) grads[0] = mul(g, b);
      if (need_b) grads[1] = mul(g, a);
      break;
    case BinaryOp::div:
      if (need_a) grads[0] = div(g, b);
      if (need_b) grads[1] = neg(mul(g, div(out, b)));
      break;
    case BinaryOp::pow:
      // d/da a^b = b a^(b-1), defined as 0 where b == 0 (a^(b-1) is inf at a == 0).
      if (need_a) grads[0] = masked_fill(mul(g, mul(b, pow(a, sub(b, 1.0)))), eq(b, 0.0), 0.0);
      // d/db a^b = a^b log a; defined as 0 where a == 0 (PyTorch's convention).
      if (need_b) grads[1] = mul(g, masked_fill(mul(out, log(a)), eq(a, 0.0), 0.0));
      break;
    case BinaryOp::maximum:
    case BinaryOp::minimum: {
      // Ties split the gradient evenly between both inputs.
      Tensor a_wins = op == BinaryOp::maximum ? gt(a, b) : lt(a, b);
      Tensor tie = eq(a, b);
      Tensor half = mul(g, 0.5);
      if (need_a) grads[0] = where(a_wins, g, where(tie, half, 0.0));
      if (need_b) grads[1] = masked_fill(where(tie, half, g), a_wins, 0.0);
      break;
    }
    default: break;
  }
  return grads;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out;
  {
    NoGradGuard forward_only;
    out = binary_forward(op, a, b);
  }
  if (is_floating(out.dtype()) && needs_grad({a, b})) {
    const bool need_a = a.requires_grad(), need_b = b.requires_grad();
    const BinarySaves keep = binary_saves(op, need_a, need_b);
    record(binary_name(op), {a, b}, {out},
           [op, need_a, need_b, dt = out.dtype(), a_shape = a.shape(), b_shape = b.shape(), a_dtype = a.dtype(),
            b_dtype = b.dtype(), as = keep.a ? saved(a) : Tensor(), bs = keep.b ? saved(b) : Tensor(),
            os = keep.out ? saved(out) : Tensor()](const TensorList& g) {
             auto in_dt = [dt](const Tensor& t) { return t.defined() ? t.to(dt) : t; };
             TensorList grads = binary_backward(op, need_a, need_b, in_dt(as), in_dt(bs), os, g[0]);
             return TensorList{need_a ? sum_to(grads[0], a_shape).to(a_dtype) : Tensor(),
                               need_b ? sum_to(grads[1], b_shape).to(b_dtype) : Tensor()};
           });
  }
  return out;
}

// A public binary op (comparisons included: their bool result records nothing): its prologue,
// then the shared body.
template <BinaryOp op>
Tensor binary_entry(const Tensor& a_arg, const Tensor& b_arg) {
  auto [a, b] = detail::op_prologue<binary_id(op)>(a_arg, b_arg);
  return binary(op, a, b);
}

double nan_if_absent(std::optional<double> v) { return v ? *v : std::numeric_limits<double>::quiet_NaN(); }

}  // namespace

Tensor neg(const Tensor& x) { return unary_entry<OpId::neg>(UnaryOp::neg, x); }
Tensor abs(const Tensor& x) { return unary_entry<OpId::abs>(UnaryOp::abs, x); }
Tensor exp(const Tensor& x) { return unary_entry<OpId::exp>(UnaryOp::exp, x); }
Tensor log(const Tensor& x) { return unary_entry<OpId::log>(UnaryOp::log, x); }
Tensor log1p(const Tensor& x) { return unary_entry<OpId::log1p>(UnaryOp::log1p, x); }
Tensor sqrt(const Tensor& x) { return unary_entry<OpId::sqrt>(UnaryOp::sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary_entry<OpId::rsqrt>(UnaryOp::rsqrt, x); }
Tensor sin(const Tensor& x) { return unary_entry<OpId::sin>(UnaryOp::sin, x); }
Tensor cos(const Tensor& x) { return unary_entry<OpId::cos>(UnaryOp::cos, x); }
Tensor tanh(const Tensor& x) { return unary_entry<OpId::tanh>(UnaryOp::tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary_entry<OpId::sigmoid>(UnaryOp::sigmoid, x); }
Tensor relu(const Tensor& x) { return unary_entry<OpId::relu>(UnaryOp::relu, x); }
Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  return approximate == GeluApproximation::tanh ? unary_entry<OpId::gelu_tanh>(UnaryOp::gelu_tanh, x)
                                                : unary_entry<OpId::gelu>(UnaryOp::gelu_erf, x);
}
Tensor silu(const Tensor& x) { return unary_entry<OpId::silu>(UnaryOp::silu, x); }
Tensor softplus(const Tensor& x, double beta, double threshold) {
  GENESIS_CHECK(beta > 0.0, ValueError, "softplus: beta must be positive (got ", beta, ")");
  return unary_entry<OpId::softplus>(UnaryOp::softplus, x, {beta, threshold});
}
Tensor pow(const Tensor& x, double exponent) {
  return unary_entry<OpId::pow_scalar>(UnaryOp::pow_scalar, x, {exponent, 0.0});
}
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  return unary_entry<OpId::clamp>(UnaryOp::clamp, x, {nan_if_absent(min), nan_if_absent(max)});
}
Tensor sign(const Tensor& x) { return unary_entry<OpId::sign>(UnaryOp::sign, x); }

Tensor add(const Tensor& a, const Tensor& b) { return binary_entry<BinaryOp::add>(a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_entry<BinaryOp::sub>(a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_entry<BinaryOp::mul>(a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_entry<BinaryOp::div>(a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_entry<BinaryOp::pow>(a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_entry<BinaryOp::maximum>(a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_entry<BinaryOp::minimum>(a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary_entry<BinaryOp::eq>(a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_entry<BinaryOp::ne>(a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_entry<BinaryOp::lt>(a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_entry<BinaryOp::le>(a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_entry<BinaryOp::gt>(a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_entry<BinaryOp::ge>(a, b); }

Tensor wrap_scalar(const Tensor& x, double value) {
  return scalar_tensor(value, {.dtype = scalar_dtype(x.dtype(), value), .device = x.device()});
}

namespace {

// The dtype binary(t, wrap_scalar(t, value)) computes in. 16-bit floats keep their dtype: the
// kernels hold the scalar in f32 beside them (0.001 * 70000 must not overflow through an f16
// 70000), compute in f32 and round the result once.
DType scalar_compute_dtype(BinaryOp op, DType dt, double value) {
  if (is_half(dt)) return dt;
  DType compute = promote_types(dt, scalar_dtype(dt, value));
  return op == BinaryOp::div ? float_result_type(compute) : compute;
}

// x (op) value, or value (op) x when scalar_first, in x's dtype (see scalar_compute_dtype). No
// autograd, no device tensor for the scalar.
Tensor scalar_forward(BinaryOp op, const Tensor& x, double value, bool scalar_first) {
  const DType dt = x.dtype();
  if (x.device().is_cpu() && is_half(dt)) {
    // The CPU kernels hold both operands in one dtype: run in f32, round once.
    Tensor r = scalar_forward(op, x.to(DType::f32), value, scalar_first);
    return kernels::is_comparison(op) ? r : r.to(dt);
  }
  Tensor out = empty(x.shape(), {.dtype = kernels::is_comparison(op) ? DType::boolean : dt, .device = x.device()});
  const int nd = static_cast<int>(x.dim());
  if (x.device().is_cpu()) {
    const HostScalar s(dt, value);
    if (scalar_first) {
      kernels::cpu::binary(op, dt, nd, x.shape().data(), s.bytes, kZeroStrides, x.data_ptr(), x.strides().data(),
                           out.data_ptr());
    } else {
      kernels::cpu::binary(op, dt, nd, x.shape().data(), x.data_ptr(), x.strides().data(), s.bytes, kZeroStrides,
                           out.data_ptr());
    }
  } else {
    GENESIS_ON_CUDA(kernels::cuda::binary_scalar(op, dt, nd, x.shape().data(), x.data_ptr(), x.strides().data(), value,
                                                 scalar_first, out.data_ptr(), cuda::current_stream()));
  }
  return out;
}

// Gradient w.r.t. x of out = x (op) value (value (op) x when scalar_first); x in out's dtype.
Tensor scalar_backward(BinaryOp op, const Tensor& x, const Tensor& out, double value, bool scalar_first,
                       const Tensor& g) {
  switch (op) {
    case BinaryOp::add: return g;
    case BinaryOp::sub: return scalar_first ? neg(g) : g;
    case BinaryOp::mul: return mul(g, value);
    case BinaryOp::div: return scalar_first ? neg(mul(g, div(out, x))) : div(g, value);
    case BinaryOp::pow: {  // value^x: d/dx = value^x log(value), 0 where value == 0 (as pow's)
      const bool f64 = g.dtype() == DType::f64;
      const double base = f64 ? value : static_cast<double>(static_cast<float>(value));
      if (base == 0.0) return zeros_like(g);
      return mul(mul(g, out), f64 ? std::log(base) : static_cast<double>(std::log(static_cast<float>(base))));
    }
    case BinaryOp::maximum:
    case BinaryOp::minimum: {  // ties split the gradient evenly, as between two tensors
      Tensor x_wins = op == BinaryOp::maximum ? gt(x, value) : lt(x, value);
      return where(x_wins, g, where(eq(x, value), mul(g, 0.5), 0.0));
    }
    default: return Tensor();
  }
}

// t (op) value, or value (op) t when scalar_first: one kernel, the scalar a kernel argument.
Tensor scalar_binary(BinaryOp op, const Tensor& t, double value, bool scalar_first = false) {
  detail::check_defined(binary_name(op), t, "input");
  Tensor out;
  {
    NoGradGuard forward_only;
    out = scalar_forward(op, t.to(scalar_compute_dtype(op, t.dtype(), value)), value, scalar_first);
  }
  if (is_floating(out.dtype()) && needs_grad({t})) {
    // Save only what the formula reads.
    const bool reads_input = op == BinaryOp::maximum || op == BinaryOp::minimum || (op == BinaryOp::div && scalar_first);
    const bool reads_output = (op == BinaryOp::div && scalar_first) || op == BinaryOp::pow;
    record(binary_name(op), {t}, {out},
           [op, value, scalar_first, dt = out.dtype(), t_dtype = t.dtype(), ts = reads_input ? saved(t) : Tensor(),
            os = reads_output ? saved(out) : Tensor()](const TensorList& g) {
             Tensor x = ts.defined() ? ts.to(dt) : ts;
             return TensorList{scalar_backward(op, x, os, value, scalar_first, g[0].to(dt)).to(t_dtype)};
           });
  }
  return out;
}

// A public tensor-scalar op: its prologue, then the shared body.
template <BinaryOp op>
Tensor scalar_entry(const Tensor& t_arg, double value, bool scalar_first = false) {
  auto [t] = detail::op_prologue<binary_id(op)>(t_arg);
  return scalar_binary(op, t, value, scalar_first);
}

}  // namespace

Tensor add(const Tensor& a, double b) { return scalar_entry<BinaryOp::add>(a, b); }
Tensor sub(const Tensor& a, double b) { return scalar_entry<BinaryOp::sub>(a, b); }
Tensor sub(double a, const Tensor& b) { return scalar_entry<BinaryOp::sub>(b, a, true); }
Tensor mul(const Tensor& a, double b) { return scalar_entry<BinaryOp::mul>(a, b); }
Tensor div(const Tensor& a, double b) { return scalar_entry<BinaryOp::div>(a, b); }
Tensor div(double a, const Tensor& b) { return scalar_entry<BinaryOp::div>(b, a, true); }
Tensor pow(double a, const Tensor& b) { return scalar_entry<BinaryOp::pow>(b, a, true); }
Tensor maximum(const Tensor& a, double b) { return scalar_entry<BinaryOp::maximum>(a, b); }
Tensor minimum(const Tensor& a, double b) { return scalar_entry<BinaryOp::minimum>(a, b); }
Tensor eq(const Tensor& a, double b) { return scalar_entry<BinaryOp::eq>(a, b); }
Tensor ne(const Tensor& a, double b) { return scalar_entry<BinaryOp::ne>(a, b); }
Tensor lt(const Tensor& a, double b) { return scalar_entry<BinaryOp::lt>(a, b); }
Tensor le(const Tensor& a, double b) { return scalar_entry<BinaryOp::le>(a, b); }
Tensor gt(const Tensor& a, double b) { return scalar_entry<BinaryOp::gt>(a, b); }
Tensor ge(const Tensor& a, double b) { return scalar_entry<BinaryOp::ge>(a, b); }

Tensor where(const Tensor& cond_arg, const Tensor& a_arg, const Tensor& b_arg) {
  auto [cond, a_in, b_in] = detail::op_prologue<OpId::where>(cond_arg, a_arg, b_arg);
  detail::check_defined("where", cond, "cond");
  GENESIS_CHECK(cond.dtype() == DType::boolean, DTypeError, "where: cond must be bool, got ", dtype_name(cond.dtype()));
  DType dt = promote_types(a_in.dtype(), b_in.dtype());
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a_in.shape(), "where"), b_in.shape(), "where");
  Tensor c, a, b;
  {
    NoGradGuard forward_only;
    c = cond.expand(shape);
    a = a_in.to(dt).expand(shape);
    b = b_in.to(dt).expand(shape);
  }
  Tensor out = empty(shape, {.dtype = dt, .device = a.device()});
  int nd = static_cast<int>(shape.size());
  if (out.device().is_cpu()) {
    kernels::cpu::where(dt, nd, shape.data(), static_cast<const bool*>(c.data_ptr()), c.strides().data(), a.data_ptr(),
                        a.strides().data(), b.data_ptr(), b.strides().data(), out.data_ptr());
  } else {
    GENESIS_ON_CUDA(kernels::cuda::where(dt, nd, shape.data(), static_cast<const bool*>(c.data_ptr()),
                                         c.strides().data(), a.data_ptr(), a.strides().data(), b.data_ptr(),
                                         b.strides().data(), out.data_ptr(), cuda::current_stream()));
  }
  if (is_floating(dt) && needs_grad({a_in, b_in})) {
    record("where", {a_in, b_in}, {out},
           [cs = saved(cond), a_shape = a_in.shape(), b_shape = b_in.shape(),
            adt = a_in.dtype(), bdt = b_in.dtype()](const TensorList& g) {
             return TensorList{sum_to(where(cs, g[0], 0.0), a_shape).to(adt),
                               sum_to(masked_fill(g[0], cs, 0.0), b_shape).to(bdt)};
           });
  }
  return out;
}

namespace {

// cond ? value : x (value_if_true) or cond ? x : value over their broadcast shape, in x's dtype.
// No autograd, no device tensor for the scalar.
Tensor where_scalar_forward(const Tensor& cond, const Tensor& x_in, double value, bool value_if_true) {
  const Shape shape = broadcast_shapes(cond.shape(), x_in.shape(), "where");
  const Tensor c = cond.expand(shape), x = x_in.expand(shape);
  const DType dt = x.dtype();
  Tensor out = empty(shape, {.dtype = dt, .device = x.device()});
  const int nd = static_cast<int>(shape.size());
  const bool* cp = static_cast<const bool*>(c.data_ptr());
  if (out.device().is_cpu()) {
    const HostScalar s(dt, value);
    const void* a = value_if_true ? static_cast<const void*>(s.bytes) : x.data_ptr();
    const void* b = value_if_true ? x.data_ptr() : static_cast<const void*>(s.bytes);
    const int64_t* as = value_if_true ? kZeroStrides : x.strides().data();
    const int64_t* bs = value_if_true ? x.strides().data() : kZeroStrides;
    kernels::cpu::where(dt, nd, shape.data(), cp, c.strides().data(), a, as, b, bs, out.data_ptr());
  } else {
    GENESIS_ON_CUDA(kernels::cuda::where_scalar(dt, nd, shape.data(), cp, c.strides().data(), x.data_ptr(),
                                                x.strides().data(), value, value_if_true, out.data_ptr(),
                                                cuda::current_stream()));
  }
  return out;
}

void check_mask(const char* op, const Tensor& mask, const char* mask_name, const Tensor& x) {
  detail::check_defined(op, mask, mask_name);
  detail::check_defined(op, x, "input");
  GENESIS_CHECK(mask.dtype() == DType::boolean, DTypeError, op, ": ", mask_name, " must be bool, got ",
                dtype_name(mask.dtype()));
}

}  // namespace

Tensor where(const Tensor& cond_arg, const Tensor& a_arg, double b) {
  auto [cond, a] = detail::op_prologue<OpId::where>(cond_arg, a_arg);
  check_mask("where", cond, "cond", a);
  const DType dt = promote_types(a.dtype(), scalar_dtype(a.dtype(), b));
  Tensor out;
  {
    NoGradGuard forward_only;
    out = where_scalar_forward(cond, a.to(dt), b, false);
  }
  if (is_floating(dt) && needs_grad({a})) {
    record("where", {a}, {out}, [cs = saved(cond), a_shape = a.shape(), adt = a.dtype()](const TensorList& g) {
      return TensorList{sum_to(where(cs, g[0], 0.0), a_shape).to(adt)};
    });
  }
  return out;
}

Tensor masked_fill(const Tensor& x_arg, const Tensor& mask_arg, double value) {
  auto [x, mask] = detail::op_prologue<OpId::masked_fill>(x_arg, mask_arg);
  check_mask("masked_fill", mask, "mask", x);
  Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  GENESIS_CHECK(shape == x.shape(), ShapeError, "masked_fill: mask of shape ", mask.shape(),
                " does not broadcast to the input's shape ", x.shape());
  double limit = x.dtype() == DType::f16 ? 65504.0 : x.dtype() == DType::bf16 ? 3.3895313892515355e38 : 0.0;
  GENESIS_CHECK(limit == 0.0 || !std::isfinite(value) || std::fabs(value) <= limit, ValueError, "masked_fill: value ",
                value, " overflows ", dtype_name(x.dtype()), " (largest finite ", limit,
                "); use -inf or a representable value");
  Tensor out;
  {
    NoGradGuard forward_only;
    out = where_scalar_forward(mask, x, value, true);
  }
  if (is_floating(x.dtype()) && needs_grad({x})) {
    record("masked_fill", {x}, {out},
           [ms = saved(mask)](const TensorList& g) { return TensorList{masked_fill(g[0], ms, 0.0)}; });
  }
  return out;
}

namespace {
// dst = dst (op) src, in place; src broadcasts to dst and is cast to dst's dtype.
Tensor& binary_inplace(const char* name, BinaryOp op, Tensor& dst, const Tensor& src) {
  detail::check_defined(name, dst, "self");
  detail::check_defined(name, src, "other");
  detail::check_inplace(name, dst);
  detail::check_same_device(name, std::array{dst, src});
  GENESIS_CHECK(!needs_grad({src}), AutogradError, name,
                ": gradients do not flow through in-place updates; detach the source or update under NoGradGuard");
  Tensor s;
  {
    NoGradGuard forward_only;
    s = src.to(dst.dtype()).expand(dst.shape());
  }
  if (!dst.is_contiguous() || s.shares_storage(dst)) {
    NoGradGuard forward_only;
    dst.copy_(binary_forward(op, dst, s));
    return dst;
  }
  int nd = static_cast<int>(dst.dim());
  if (dst.device().is_cpu()) {
    kernels::cpu::binary(op, dst.dtype(), nd, dst.shape().data(), dst.data_ptr(), dst.strides().data(), s.data_ptr(),
                         s.strides().data(), dst.data_ptr());
  } else {
    GENESIS_ON_CUDA(kernels::cuda::binary(op, dst.dtype(), nd, dst.shape().data(), dst.data_ptr(), dst.strides().data(),
                                          s.data_ptr(), s.strides().data(), dst.data_ptr(), cuda::current_stream()));
  }
  return dst;
}

// dst = dst (op) value, in place, with the value the tensor form would use (wrapped next to
// dst, then cast to dst's dtype): one kernel, no temporary, no device tensor for the scalar.
Tensor& scalar_inplace(const char* name, BinaryOp op, Tensor& dst, double value) {
  detail::check_defined(name, dst, "self");
  detail::check_inplace(name, dst);
  const DType dt = dst.dtype();
  const double v = value_as(dt, value_as(scalar_dtype(dt, value), value));
  if (!dst.is_contiguous()) {
    NoGradGuard forward_only;
    dst.copy_(scalar_forward(op, dst, v, false));
    return dst;
  }
  const int nd = static_cast<int>(dst.dim());
  if (dst.device().is_cpu()) {
    const HostScalar s(dt, v);
    kernels::cpu::binary(op, dt, nd, dst.shape().data(), dst.data_ptr(), dst.strides().data(), s.bytes, kZeroStrides,
                         dst.data_ptr());
  } else {
    GENESIS_ON_CUDA(kernels::cuda::binary_scalar(op, dt, nd, dst.shape().data(), dst.data_ptr(), dst.strides().data(),
                                                 v, false, dst.data_ptr(), cuda::current_stream()));
  }
  return dst;
}
}  // namespace

Tensor& add_(Tensor& dst, const Tensor& src) { return binary_inplace("add_", BinaryOp::add, dst, src); }
Tensor& mul_(Tensor& dst, const Tensor& src) { return binary_inplace("mul_", BinaryOp::mul, dst, src); }
Tensor& add_(Tensor& dst, double value) { return scalar_inplace("add_", BinaryOp::add, dst, value); }
Tensor& mul_(Tensor& dst, double value) { return scalar_inplace("mul_", BinaryOp::mul, dst, value); }

}  // namespace genesis
