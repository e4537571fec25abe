// Transformer ops: argument checks, dispatch to the CPU kernels, and backward formulas
// (rope's backward is the inverse rotation; attention keeps its probabilities).
#include "libgenesis/ops/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/cpu/transformer.h"
#include "libgenesis/autograd/checkpoint.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/index.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/nn.h"
#include "libgenesis/ops/prologue.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/transformer.h"
#endif

namespace genesis {

namespace {

// The kernels' view of packed documents: the [batch, q_len] starts, or null without them.
const int32_t* doc_start_data(const Tensor& doc_start) {
  return doc_start.defined() ? doc_start.data<int32_t>() : nullptr;
}

}  // namespace

#if GENESIS_WITH_CUDA
namespace {

// rope on cuda: x [..., seq, dim] read through its strides when its leading dimensions merge
// into two and dim is unit-stride (the [B, H, T, D] view of a [B, T, H, D] projection), else
// from a contiguous copy; y is contiguous. Per-row tables ([x.size(0), seq, dim / 2]) keep
// dimension 0 as the first of the two, whose index picks the table.
void rope_cuda(bool inverse, const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& y) {
  const int64_t seq = x.size(-2), dim = x.size(-1);
  const bool per_row = cos.dim() == 3;
  std::vector<int64_t> sizes, strides;
  for (int64_t d = 0; d + 2 < x.dim(); ++d) {
    if (x.size(d) == 1 && !(per_row && d == 0)) continue;
    const bool table_dimension = per_row && sizes.size() == 1;  // dimension 0's group stays alone
    if (!sizes.empty() && !table_dimension && strides.back() == x.stride(d) * x.size(d)) {
      sizes.back() *= x.size(d);
      strides.back() = x.stride(d);
    } else {
      sizes.push_back(x.size(d));
      strides.push_back(x.stride(d));
    }
  }
  if (sizes.size() > 2 || (dim > 1 && x.stride(-1) != 1)) {
    rope_cuda(inverse, x.contiguous(), cos, sin, y);
    return;
  }
  while (sizes.size() < 2) {
    sizes.insert(per_row ? sizes.end() : sizes.begin(), 1);
    strides.insert(per_row ? strides.end() : strides.begin(), 0);
  }
  const kernels::cuda::RopeInput input{
      x.data_ptr(), sizes[0], sizes[1], strides[0], strides[1], x.stride(-2), per_row ? seq * (dim / 2) : 0};
  kernels::cuda::rope(x.dtype(), inverse, input, seq, dim, cos.data_ptr(), sin.data_ptr(), y.data_ptr(),
                      cuda::current_stream());
}

kernels::cuda::HeadsLayout heads_layout(const Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2)};
}

// t itself when the attention GEMMs can read it through its strides (unit-stride head_dim,
// evenly strided rows; q's group rows stackable), else a contiguous copy.
Tensor attention_operand(const Tensor& t, const kernels::cpu::AttentionShape& s, bool is_query) {
  const bool unit_cols = t.size(3) <= 1 || t.stride(3) == 1;
  const kernels::cuda::HeadsLayout layout = heads_layout(t);
  const bool rows_ok = is_query ? kernels::cuda::attention_query_stackable(s, layout)
                                : kernels::cuda::gemm_rows_ok(t.size(2), t.size(3), layout.row);
  return unit_cols && rows_ok ? t : t.contiguous();
}

// A transient [batch, q_heads, q_len, kv_len] buffer: f32 for 16-bit inputs (their scores and
// score gradients), unused (undefined) for f32 and f64, which work in place.
Tensor f32_scores_buffer(const Tensor& like, const Shape& shape) {
  if (!is_half(like.dtype())) return Tensor();
  return empty(shape, {.dtype = DType::f32, .device = like.device()});
}

kernels::cuda::FlashOperand flash_operand(const Tensor& t) {
  return {t.data_ptr(), heads_layout(t)};
}
kernels::cuda::FlashOutput flash_output(const Tensor& t) {
  return {t.data_ptr(), heads_layout(t)};
}

// Whether the flash kernels read t as it is: unit-stride head_dim and aligned strides.
bool flash_readable(const Tensor& t, const kernels::cpu::AttentionShape& s) {
  return (t.size(3) <= 1 || t.stride(3) == 1) && kernels::cuda::flash_attention_supported(t.dtype(), s, {flash_operand(t)});
}

// An empty [batch, heads, rows, head_dim] tensor stored as [batch, rows, heads, head_dim]: the
// layout the models' projections have, so their transposes back are views.
Tensor rows_major_heads(int64_t batch, int64_t heads, int64_t rows, int64_t head_dim, const TensorOptions& options) {
  return empty({batch, rows, heads, head_dim}, options).transpose(1, 2);
}

// Gradients for q, k and v in the layout of the inputs: when the three are views of one
// storage with one set of strides (the head views of a fused qkv projection), views at the same
// places of one new buffer, which the projection's split then takes whole (no copy); otherwise
// each in the [batch, rows, heads, head_dim] layout.
// True when q, k and v are disjoint head views of one storage with one set of strides, each
// row of each holding its heads side by side, the three rows within one row stride.
bool fused_projection_views(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!q.shares_storage(k) || !q.shares_storage(v) || q.strides() != k.strides() || q.strides() != v.strides())
    return false;
  std::vector<std::pair<int64_t, int64_t>> rows;  // [first, end) of each one's row 0
  for (const Tensor* t : {&q, &k, &v}) {
    if (t->stride(3) != 1 || (t->size(1) > 1 && t->stride(1) != t->size(3))) return false;
    rows.emplace_back(t->offset(), t->offset() + t->size(1) * t->size(3));
  }
  std::sort(rows.begin(), rows.end());
  return rows[0].second <= rows[1].first && rows[1].second <= rows[2].first &&
         rows[2].second - rows[0].first <= q.stride(2);
}

TensorList attention_grads(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::cpu::AttentionShape& s) {
  const TensorOptions options{.dtype = q.dtype(), .device = q.device()};
  if (fused_projection_views(q, k, v)) {
    Tensor buffer = empty({static_cast<int64_t>(q.storage()->nbytes() / q.element_size())}, options);
    TensorList grads;
    for (const Tensor* t : {&q, &k, &v})
      grads.push_back(Tensor(std::make_shared<TensorImpl>(buffer.storage(), t->shape(), t->strides(), t->offset(),
                                                          t->dtype())));
    return grads;
  }
  return {rows_major_heads(s.batch, s.q_heads, s.q_len, s.head_dim, options),
          rows_major_heads(s.batch, s.kv_heads, s.kv_len, s.head_dim, options),
          rows_major_heads(s.batch, s.kv_heads, s.kv_len, s.head_dim, options)};
}

// Flash attention (f16/bf16, head_dim 32/64/96/128): only the output and each row's
// logsumexp are kept for the backward, which recomputes the probabilities.
Tensor flash_attention_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_start,
                            const kernels::cpu::AttentionShape& s, kernels::cuda::FlashDropout dropout) {
  const TensorList results = kept_or_computed("scaled_dot_product_attention", [&] {
    const TensorOptions options{.dtype = q.dtype(), .device = q.device()};
    Tensor out = rows_major_heads(s.batch, s.q_heads, s.q_len, s.head_dim, options);
    Tensor lse = empty({s.batch, s.q_heads, s.q_len}, {.dtype = DType::f32, .device = q.device()});
    Tensor keep_bits;  // dropout: the mask, one bit per probability, for the backward
    kernels::cuda::FlashDropout forward_dropout = dropout;
    if (dropout.keep_prob < 1.0) {
      keep_bits = empty({kernels::cuda::flash_dropout_keep_words(s)}, {.dtype = DType::i32, .device = q.device()});
      forward_dropout.keep_bits = reinterpret_cast<uint32_t*>(keep_bits.data_ptr());
    }
    kernels::cuda::flash_attention_forward(q.dtype(), s, flash_operand(q), flash_operand(k), flash_operand(v),
                                           doc_start_data(doc_start), flash_output(out), lse.data<float>(),
                                           forward_dropout, cuda::current_stream());
    return TensorList{out, lse, keep_bits};
  });
  const Tensor &out = results[0], &lse = results[1], &keep_bits = results[2];
  if (keep_bits.defined()) dropout.keep_bits = reinterpret_cast<uint32_t*>(keep_bits.data_ptr());
  if (needs_grad({q, k, v})) {
    record("scaled_dot_product_attention", {q, k, v}, {out},
           [s, dropout, qs = saved(q), ks = saved(k), vs = saved(v), ds = saved(doc_start), os = saved(out),
            lses = saved(lse), bits = saved(keep_bits)](const TensorList& g) {
             Tensor gy = g[0].to(qs.dtype());
             if (!flash_readable(gy, s)) gy = gy.contiguous();
             const TensorList grads = attention_grads(qs, ks, vs, s);
             const Tensor &gq = grads[0], &gk = grads[1], &gv = grads[2];
             Tensor scratch = empty({kernels::cuda::flash_attention_backward_scratch(s)},
                                    {.dtype = DType::f32, .device = qs.device()});
             kernels::cuda::flash_attention_backward(
                 qs.dtype(), s, flash_operand(qs), flash_operand(ks), flash_operand(vs), doc_start_data(ds),
                 flash_operand(os), lses.data<float>(), flash_operand(gy), flash_output(gq), flash_output(gk),
                 flash_output(gv), scratch.data<float>(), dropout, cuda::current_stream());
             return TensorList{gq, gk, gv};
           });
  }
  return out;
}

// Attention on cuda: flash attention where it applies, else GEMMs around a materialized
// softmax. 16-bit inputs get f32 scores and keep only their probabilities, in 16 bits
// (the second product reads them so, as in flash attention): half the saved bytes of f32.
Tensor attention_cuda(const Tensor& q_arg, const Tensor& k_arg, const Tensor& v_arg, const Tensor& doc_start,
                      const kernels::cpu::AttentionShape& s) {
  if (kernels::cuda::flash_attention_supported(q_arg.dtype(), s, {}) && flash_attention_enabled()) {
    // Operands the kernels cannot read through their strides are copied first.
    auto readable = [&s](const Tensor& t) { return flash_readable(t, s) ? t : t.contiguous(); };
    return flash_attention_cuda(readable(q_arg), readable(k_arg), readable(v_arg), doc_start, s, {});
  }
  const Tensor &q = q_arg, &k = k_arg, &v = v_arg;
  const Device device = q.device();
  Tensor qv, kv, vv;
  {
    NoGradGuard forward_only;
    qv = attention_operand(q, s, true);
    kv = attention_operand(k, s, false);
    vv = attention_operand(v, s, false);
  }
  const TensorList results = kept_or_computed("scaled_dot_product_attention", [&] {
    NoGradGuard forward_only;
    Tensor out = empty(q.shape(), {.dtype = q.dtype(), .device = device});
    const Shape scores_shape{s.batch, s.q_heads, s.q_len, s.kv_len};
    Tensor probs = empty(scores_shape, {.dtype = q.dtype(), .device = device});
    Tensor scores = f32_scores_buffer(q, scores_shape);
    kernels::cuda::attention(q.dtype(), s, qv.data_ptr(), heads_layout(qv), kv.data_ptr(), heads_layout(kv),
                             vv.data_ptr(), heads_layout(vv), doc_start_data(doc_start), out.data_ptr(),
                             probs.data_ptr(), scores.defined() ? scores.data_ptr() : nullptr, cuda::current_stream());
    return TensorList{out, probs};
  });
  const Tensor &out = results[0], &probs = results[1];
  if (needs_grad({q, k, v})) {
    record("scaled_dot_product_attention", {q, k, v}, {out},
           [s, qs = saved(qv), ks = saved(kv), vs = saved(vv), ds = saved(doc_start),
            ps = saved(probs)](const TensorList& g) {
             Tensor gy = g[0].to(qs.dtype()).contiguous();
             const TensorOptions options{.dtype = qs.dtype(), .device = qs.device()};
             Tensor gq = empty(qs.shape(), options), gk = empty(ks.shape(), options), gv = empty(vs.shape(), options);
             // dP in f32 for 16-bit inputs (dS then in their dtype), else dP and dS share one buffer.
             Tensor grad_probs = f32_scores_buffer(qs, ps.shape());
             Tensor grad_scores = empty(ps.shape(), options);
             if (!grad_probs.defined()) std::swap(grad_probs, grad_scores);
             kernels::cuda::attention_backward(
                 qs.dtype(), s, qs.data_ptr(), heads_layout(qs), ks.data_ptr(), heads_layout(ks), vs.data_ptr(),
                 heads_layout(vs), doc_start_data(ds), ps.data_ptr(), gy.data_ptr(), gq.data_ptr(), gk.data_ptr(),
                 gv.data_ptr(), grad_probs.data_ptr(), grad_scores.defined() ? grad_scores.data_ptr() : nullptr,
                 cuda::current_stream());
             return TensorList{gq, gk, gv};
           });
  }
  return out;
}

}  // namespace
#endif

namespace {

// scaled_dot_product_attention's doc_start after its checks: undefined, or contiguous i32
// [batch, q_len] for causal attention without a KV cache or dropout. On the CPU the values are
// checked too (document starts: non-decreasing, 0 <= doc_start[b, t] <= t); on CUDA that would
// wait for the device, and the kernels stay in bounds whatever the values.
Tensor checked_doc_start(const Tensor& doc_start, const kernels::cpu::AttentionShape& s, double dropout_p) {
  if (!doc_start.defined()) return doc_start;
  const char* op = "scaled_dot_product_attention";
  GENESIS_CHECK(s.causal, ValueError, op, ": doc_start (packed documents) needs causal attention");
  GENESIS_CHECK(s.q_len == s.kv_len, ShapeError, op, ": doc_start needs as many keys as queries (no KV cache), got ",
                s.q_len, " queries and ", s.kv_len, " keys");
  GENESIS_CHECK(doc_start.dtype() == DType::i32, DTypeError, op, ": doc_start must be i32, got ",
                dtype_name(doc_start.dtype()));
  GENESIS_CHECK(doc_start.shape() == Shape({s.batch, s.q_len}), ShapeError, op,
                ": doc_start must be [B, T] = ", Shape({s.batch, s.q_len}), ", got ", doc_start.shape());
  GENESIS_CHECK(dropout_p == 0.0, NotImplementedError, op,
                ": dropout with doc_start is not supported (the dropout paths have no document mask)");
  Tensor starts = doc_start.contiguous();
  if (starts.device().is_cpu()) {
    const int32_t* d = starts.data<int32_t>();
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t t = 0; t < s.q_len; ++t) {
        const int32_t value = d[b * s.q_len + t], previous = t > 0 ? d[b * s.q_len + t - 1] : 0;
        GENESIS_CHECK(value >= previous && value <= t, ValueError, op, ": doc_start[", b, ", ", t, "] = ", value,
                      " is not a document start (starts never decrease along a row, and 0 <= doc_start[b, t] <= t)");
      }
    }
  }
  return starts;
}

// Counters the dropout mask of one attention call draws: one per four probabilities (the flash
// kernels' draws: unused in builds without CUDA).
[[maybe_unused]] uint64_t attention_dropout_counters(const kernels::cpu::AttentionShape& s) {
  return static_cast<uint64_t>((s.batch * s.q_heads * s.q_len * s.kv_len + 3) / 4);
}

// Attention with dropout from differentiable ops, in the accumulator dtype: the path of every
// case the flash kernels do not take (CPU, f32/f64, other head sizes). Materializes the
// [B, Hq, T, S] probabilities; grouped kv heads are expanded.
Tensor attention_with_dropout_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const kernels::cpu::AttentionShape& s, double p, Generator* gen) {
  const DType acc = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const int64_t group = s.q_heads / s.kv_heads;
  auto heads = [&](const Tensor& t) {
    Tensor wide = t.to(acc);
    if (group == 1) return wide;
    return wide.unsqueeze(2)
        .expand({s.batch, s.kv_heads, group, s.kv_len, s.head_dim})
        .reshape({s.batch, s.q_heads, s.kv_len, s.head_dim});
  };
  Tensor scores = mul(matmul(q.to(acc), heads(k).transpose(2, 3)), s.scale);
  if (s.causal) {  // query i sees keys j <= i + S - T
    const Tensor hidden =
        triu(ones({s.q_len, s.kv_len}, {.device = q.device()}), s.kv_len - s.q_len + 1).to(DType::boolean);
    scores = masked_fill(scores, hidden, -INFINITY);
  }
  Tensor probs = dropout(softmax(scores, -1), p, true, gen);
  return matmul(probs, heads(v)).to(q.dtype());
}

}  // namespace

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

RopeTables gather_rope_tables(const RopeTables& tables, const Tensor& positions) {
  GENESIS_CHECK(positions.defined() && positions.dim() == 2, ShapeError,
                "gather_rope_tables: positions must be [batch, seq], got shape ",
                positions.defined() ? positions.shape() : Shape{});
  GENESIS_CHECK(tables.cos.dim() == 2 && tables.sin.shape() == tables.cos.shape(), ShapeError,
                "gather_rope_tables: the tables must be rope_tables' [length, head_dim / 2], got cos ",
                tables.cos.shape(), " and sin ", tables.sin.shape());
  const Tensor flat = positions.reshape({positions.numel()});
  const Shape shape{positions.size(0), positions.size(1), tables.cos.size(1)};
  return {index_select(tables.cos, 0, flat).view(shape), index_select(tables.sin, 0, flat).view(shape)};
}

Tensor rope(const Tensor& x_arg, const Tensor& cos_arg, const Tensor& sin_arg) {
  auto [x, cos, sin] = detail::op_prologue<OpId::rope>(x_arg, cos_arg, sin_arg);
  detail::check_defined("rope", x, "input");
  detail::check_defined("rope", cos, "cos");
  detail::check_defined("rope", sin, "sin");
  detail::check_floating("rope", x);
  detail::check_floating("rope", cos);
  detail::check_floating("rope", sin);
  GENESIS_CHECK(x.dim() >= 2 && x.size(-1) % 2 == 0, ShapeError,
                "rope: input must be [..., seq, head_dim] with an even head_dim, got shape ", x.shape());
  const int64_t seq = x.size(-2), dim = x.size(-1);
  // One table for every row, or per-row tables [batch, seq, head_dim / 2] (gather_rope_tables).
  const bool per_row = cos.dim() == 3 && x.dim() >= 3;
  const Shape table_shape = per_row ? Shape{x.size(0), seq, dim / 2} : Shape{seq, dim / 2};
  GENESIS_CHECK(cos.shape() == table_shape && sin.shape() == table_shape, ShapeError, "rope: cos ", cos.shape(),
                " and sin ", sin.shape(),
                " must both be [seq, head_dim / 2] or, per row, [batch, seq, head_dim / 2] = ", table_shape,
                " for input ", x.shape());
  const int64_t outer = seq * dim == 0 ? 0 : x.numel() / (seq * dim);
  // The CPU kernel's rows (x as [outer, seq, dim]) that share a table: all, or those of one batch row.
  const int64_t outer_per_table = per_row && outer > 0 ? outer / x.size(0) : std::max<int64_t>(outer, 1);
  // The tables are cast to the input's dtype, as Hugging Face's rotary embedding does: under
  // autocast an f32 table meets a bf16 input.
  Tensor cc = cos.to(x.dtype()).contiguous(), sc = sin.to(x.dtype()).contiguous();
  Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  {
    NoGradGuard forward_only;
    if (x.device().is_cpu()) {
      Tensor xc = x.contiguous();
      kernels::cpu::rope(x.dtype(), false, outer, seq, dim, xc.data_ptr(), cc.data_ptr(), sc.data_ptr(),
                         outer_per_table, y.data_ptr());
    } else {
      GENESIS_ON_CUDA(rope_cuda(false, x, cc, sc, y));
    }
  }
  if (needs_grad({x})) {
    record("rope", {x}, {y}, [outer, seq, dim, outer_per_table, cs = saved(cc), ss = saved(sc)](const TensorList& g) {
      Tensor gy = g[0].to(cs.dtype()).contiguous();
      Tensor gx = empty(gy.shape(), {.dtype = gy.dtype(), .device = gy.device()});
      if (gy.device().is_cpu()) {
        kernels::cpu::rope(gy.dtype(), true, outer, seq, dim, gy.data_ptr(), cs.data_ptr(), ss.data_ptr(),
                           outer_per_table, gx.data_ptr());
      } else {
        GENESIS_ON_CUDA(rope_cuda(true, gy, cs, ss, gx));
      }
      return TensorList{gx};
    });
  }
  return y;
}

Tensor swiglu(const Tensor& gate_arg, const Tensor& up_arg) {
  auto [gate, up] = detail::op_prologue<OpId::swiglu>(gate_arg, up_arg);
  detail::check_defined("swiglu", gate, "gate");
  detail::check_defined("swiglu", up, "up");
  detail::check_floating("swiglu", gate);
  detail::check_same_dtype("swiglu", gate, up);
  GENESIS_CHECK(gate.shape() == up.shape(), ShapeError, "swiglu: gate ", gate.shape(), " and up ", up.shape(),
                " must have the same shape");
  Tensor gc, uc;
  Tensor y = empty(gate.shape(), {.dtype = gate.dtype(), .device = gate.device()});
  {
    NoGradGuard forward_only;
    gc = gate.contiguous();
    uc = up.contiguous();
    if (gate.device().is_cpu()) {
      kernels::cpu::swiglu(gate.dtype(), gate.numel(), gc.data_ptr(), uc.data_ptr(), y.data_ptr());
    } else {
      GENESIS_ON_CUDA(kernels::cuda::swiglu(gate.dtype(), gate.numel(), gc.data_ptr(), uc.data_ptr(), y.data_ptr(),
                                            cuda::current_stream()));
    }
  }
  if (needs_grad({gate, up})) {
    record("swiglu", {gate, up}, {y}, [gs = saved(gc), us = saved(uc)](const TensorList& g) {
      Tensor gy = g[0].to(gs.dtype()).contiguous();
      Tensor grad_gate = empty_like(gs), grad_up = empty_like(us);
      if (gs.device().is_cpu()) {
        kernels::cpu::swiglu_backward(gs.dtype(), gs.numel(), gs.data_ptr(), us.data_ptr(), gy.data_ptr(),
                                      grad_gate.data_ptr(), grad_up.data_ptr());
      } else {
        GENESIS_ON_CUDA(kernels::cuda::swiglu_backward(gs.dtype(), gs.numel(), gs.data_ptr(), us.data_ptr(),
                                                       gy.data_ptr(), grad_gate.data_ptr(), grad_up.data_ptr(),
                                                       nullptr, cuda::current_stream()));
      }
      return TensorList{grad_gate, grad_up};
    });
  }
  return y;
}

bool flash_attention_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("GENESIS_FLASH_ATTENTION");
    return !value || std::string_view(value) != "0";
  }();
  return enabled;
}

Tensor scaled_dot_product_attention(const Tensor& q_arg, const Tensor& k_arg, const Tensor& v_arg, bool causal,
                                    std::optional<double> scale, double dropout_p, Generator* gen,
                                    const Tensor& doc_start_arg) {
  auto [q, k, v, doc_start_given] =
      detail::op_prologue<OpId::scaled_dot_product_attention>(q_arg, k_arg, v_arg, doc_start_arg);
  const char* op = "scaled_dot_product_attention";
  detail::check_defined(op, q, "q");
  detail::check_defined(op, k, "k");
  detail::check_defined(op, v, "v");
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
  GENESIS_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, ValueError, op, ": dropout_p must be in [0, 1) (got ", dropout_p,
                ")");
  const Tensor doc_start = checked_doc_start(doc_start_given, s, dropout_p);
  if (dropout_p > 0.0) {
#if GENESIS_WITH_CUDA
    if (!q.device().is_cpu() && kernels::cuda::flash_attention_supported(q.dtype(), s, {}) && flash_attention_enabled()) {
      auto readable = [&s](const Tensor& t) { return flash_readable(t, s) ? t : t.contiguous(); };
      const GeneratorState state = (gen ? *gen : default_generator()).advance(attention_dropout_counters(s));
      return flash_attention_cuda(readable(q), readable(k), readable(v), Tensor(), s,
                                  {1.0 - dropout_p, state.seed, state.offset});
    }
#endif
    return attention_with_dropout_composite(q, k, v, s, dropout_p, gen);
  }
  if (!q.device().is_cpu()) {
    Tensor out;
    GENESIS_ON_CUDA(out = attention_cuda(q, k, v, doc_start, s));
    return out;
  }
  const DType acc = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor qc, kc, vc;
  {
    NoGradGuard forward_only;
    qc = q.contiguous();
    kc = k.contiguous();
    vc = v.contiguous();
  }
  const TensorList results = kept_or_computed(op, [&] {
    Tensor out = empty(qc.shape(), {.dtype = qc.dtype()});
    Tensor probs = empty({s.batch, s.q_heads, s.q_len, s.kv_len}, {.dtype = acc});
    kernels::cpu::attention(qc.dtype(), s, qc.data_ptr(), kc.data_ptr(), vc.data_ptr(), doc_start_data(doc_start),
                            out.data_ptr(), probs.data_ptr());
    return TensorList{out, probs};
  });
  const Tensor &out = results[0], &probs = results[1];
  if (needs_grad({q, k, v})) {
    record(op, {q, k, v}, {out},
           [s, qs = saved(qc), ks = saved(kc), vs = saved(vc), ds = saved(doc_start),
            ps = saved(probs)](const TensorList& g) {
             Tensor gy = g[0].to(qs.dtype()).contiguous();
             Tensor gq = empty_like(qs), gk = empty_like(ks), gv = empty_like(vs);
             Tensor scratch = empty(ps.shape(), {.dtype = ps.dtype()});
             kernels::cpu::attention_backward(qs.dtype(), s, qs.data_ptr(), ks.data_ptr(), vs.data_ptr(),
                                              doc_start_data(ds), ps.data_ptr(), gy.data_ptr(), gq.data_ptr(),
                                              gk.data_ptr(), gv.data_ptr(), scratch.data_ptr());
             return TensorList{gq, gk, gv};
           });
  }
  return out;
}

}  // namespace genesis
