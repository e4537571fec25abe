// Transformer ops: argument checks, dispatch to the CPU kernels, and backward formulas
// (rope's backward is the inverse rotation; attention keeps its probabilities).
#include "libgenesis/ops/transformer.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/transformer.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/factory.h"

namespace genesis {

RopeTables rope_tables(int64_t start, int64_t length, int64_t head_dim, double theta, TensorOptions options) {
  GENESIS_CHECK(head_dim > 0 && head_dim % 2 == 0, ValueError, "rope_tables: head_dim must be positive and even (got ",
                head_dim, ")");
  GENESIS_CHECK(start >= 0 && length >= 0, ValueError, "rope_tables: start (", start, ") and length (", length,
                ") must be >= 0");
  GENESIS_CHECK(theta > 0 && std::isfinite(theta), ValueError, "rope_tables: theta must be positive (got ", theta, ")");
  const int64_t half = head_dim / 2;
  std::vector<double> cos_values(static_cast<size_t>(length * half)), sin_values(cos_values.size());
  const bool exact = options.dtype == DType::f64;
  for (int64_t i = 0; i < half; ++i) {
    const double exponent = static_cast<double>(2 * i) / static_cast<double>(head_dim);
    const float inv_freq_f32 =
        1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(head_dim));
    const double inv_freq = exact ? 1.0 / std::pow(theta, exponent) : inv_freq_f32;
    for (int64_t t = 0; t < length; ++t) {
      const double position = static_cast<double>(start + t);
      const double angle =
          exact ? position * inv_freq : static_cast<float>(inv_freq_f32 * static_cast<float>(position));
      cos_values[static_cast<size_t>(t * half + i)] = std::cos(angle);
      sin_values[static_cast<size_t>(t * half + i)] = std::sin(angle);
    }
  }
  TensorOptions host{.dtype = DType::f64};
  auto finish = [&](const std::vector<double>& values) {
    Tensor table = from_vector(values, {length, half}, host);
    if (!exact) table = table.to(DType::f32);
    return table.to(options.dtype).to(options.device);
  };
  return {finish(cos_values), finish(sin_values)};
}

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  detail::check_defined("rope", x, "input");
  detail::check_defined("rope", cos, "cos");
  detail::check_defined("rope", sin, "sin");
  detail::require_cpu("rope", {x, cos, sin});
  detail::check_floating("rope", x);
  GENESIS_CHECK(x.dim() >= 2 && x.size(-1) % 2 == 0, ShapeError,
                "rope: input must be [..., seq, head_dim] with an even head_dim, got shape ", x.shape());
  const int64_t seq = x.size(-2), dim = x.size(-1);
  const Shape table_shape{seq, dim / 2};
  GENESIS_CHECK(cos.shape() == table_shape && sin.shape() == table_shape, ShapeError, "rope: cos ", cos.shape(),
                " and sin ", sin.shape(), " must both be [seq, head_dim / 2] = ", table_shape, " for input ",
                x.shape());
  GENESIS_CHECK(cos.dtype() == x.dtype() && sin.dtype() == x.dtype(), DTypeError, "rope: cos (",
                dtype_name(cos.dtype()), ") and sin (", dtype_name(sin.dtype()), ") must have the input's dtype (",
                dtype_name(x.dtype()), ")");
  const int64_t outer = seq * dim == 0 ? 0 : x.numel() / (seq * dim);
  Tensor cc = cos.contiguous(), sc = sin.contiguous();
  Tensor y = empty(x.shape(), {.dtype = x.dtype()});
  {
    NoGradGuard forward_only;
    Tensor xc = x.contiguous();
    kernels::cpu::rope(x.dtype(), false, outer, seq, dim, xc.data_ptr(), cc.data_ptr(), sc.data_ptr(), y.data_ptr());
  }
  if (needs_grad({x})) {
    record("rope", {x}, {y}, [outer, seq, dim, cs = saved(cc), ss = saved(sc)](const TensorList& g) {
      Tensor gy = g[0].to(cs.dtype()).contiguous();
      Tensor gx = empty(gy.shape(), {.dtype = gy.dtype()});
      kernels::cpu::rope(gy.dtype(), true, outer, seq, dim, gy.data_ptr(), cs.data_ptr(), ss.data_ptr(), gx.data_ptr());
      return TensorList{gx};
    });
  }
  return y;
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  detail::check_defined("swiglu", gate, "gate");
  detail::check_defined("swiglu", up, "up");
  detail::require_cpu("swiglu", {gate, up});
  detail::check_floating("swiglu", gate);
  detail::check_same_dtype("swiglu", gate, up);
  GENESIS_CHECK(gate.shape() == up.shape(), ShapeError, "swiglu: gate ", gate.shape(), " and up ", up.shape(),
                " must have the same shape");
  Tensor gc, uc;
  Tensor y = empty(gate.shape(), {.dtype = gate.dtype()});
  {
    NoGradGuard forward_only;
    gc = gate.contiguous();
    uc = up.contiguous();
    kernels::cpu::swiglu(gate.dtype(), gate.numel(), gc.data_ptr(), uc.data_ptr(), y.data_ptr());
  }
  if (needs_grad({gate, up})) {
    record("swiglu", {gate, up}, {y}, [gs = saved(gc), us = saved(uc)](const TensorList& g) {
      Tensor gy = g[0].to(gs.dtype()).contiguous();
      Tensor grad_gate = empty_like(gs), grad_up = empty_like(us);
      kernels::cpu::swiglu_backward(gs.dtype(), gs.numel(), gs.data_ptr(), us.data_ptr(), gy.data_ptr(),
                                    grad_gate.data_ptr(), grad_up.data_ptr());
      return TensorList{grad_gate, grad_up};
    });
  }
  return y;
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  detail::check_defined(op, q, "q");
  detail::check_defined(op, k, "k");
  detail::check_defined(op, v, "v");
  detail::require_cpu(op, {q, k, v});
  detail::check_floating(op, q);
  detail::check_same_dtype(op, q, k);
  detail::check_same_dtype(op, q, v);
  GENESIS_CHECK(q.dim() == 4 && k.dim() == 4 && k.shape() == v.shape(), ShapeError, op,
                ": q must be [B, Hq, T, D] and k, v [B, Hkv, S, D], got q ", q.shape(), ", k ", k.shape(), ", v ",
                v.shape());
  const kernels::cpu::AttentionShape s{
      q.size(0), q.size(1), k.size(1), q.size(2),
      k.size(2), q.size(3), causal,    scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(3)))};
  GENESIS_CHECK(k.size(0) == s.batch && k.size(3) == s.head_dim && s.kv_heads > 0 && s.q_heads % s.kv_heads == 0,
                ShapeError, op, ": q ", q.shape(), " and k ", k.shape(),
                " must agree in batch and head_dim, and q's heads must be a multiple of k's heads");
  GENESIS_CHECK(!causal || s.q_len <= s.kv_len, ShapeError, op, ": causal attention needs at least as many keys (",
                s.kv_len, ") as queries (", s.q_len, ")");
  GENESIS_CHECK(std::isfinite(s.scale), ValueError, op, ": scale must be finite (got ", s.scale, ")");
  const DType acc = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor qc, kc, vc;
  Tensor out = empty(q.shape(), {.dtype = q.dtype()});
  Tensor probs = empty({s.batch, s.q_heads, s.q_len, s.kv_len}, {.dtype = acc});
  {
    NoGradGuard forward_only;
    qc = q.contiguous();
    kc = k.contiguous();
    vc = v.contiguous();
    kernels::cpu::attention(q.dtype(), s, qc.data_ptr(), kc.data_ptr(), vc.data_ptr(), out.data_ptr(),
                            probs.data_ptr());
  }
  if (needs_grad({q, k, v})) {
    record(op, {q, k, v}, {out},
           [s, qs = saved(qc), ks = saved(kc), vs = saved(vc), ps = saved(probs)](const TensorList& g) {
             Tensor gy = g[0].to(qs.dtype()).contiguous();
             Tensor gq = empty_like(qs), gk = empty_like(ks), gv = empty_like(vs);
             Tensor scratch = empty(ps.shape(), {.dtype = ps.dtype()});
             kernels::cpu::attention_backward(qs.dtype(), s, qs.data_ptr(), ks.data_ptr(), vs.data_ptr(), ps.data_ptr(),
                                              gy.data_ptr(), gq.data_ptr(), gk.data_ptr(), gv.data_ptr(),
                                              scratch.data_ptr());
             return TensorList{gq, gk, gv};
           });
  }
  return out;
}

}  // namespace genesis
