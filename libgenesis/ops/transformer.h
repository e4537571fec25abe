#pragma once
// Fused transformer ops: rotary position embedding (Hugging Face's rotate-half layout),
// SwiGLU, and scaled-dot-product attention with grouped-query heads. CPU and CUDA kernels;
// rope_tables computes on the host and copies to options.device.
#include <optional>

#include "libgenesis/core/generator.h"
#include "libgenesis/core/tensor.h"

namespace genesis {

// cos and sin [length, head_dim / 2] of positions start .. start + length - 1 with the
// default RoPE frequencies theta^(-2i / head_dim). Like transformers, the angles of non-f64
// tables are computed in f32, then rounded to options.dtype.
struct RopeTables {
  Tensor cos;
  Tensor sin;
};
RopeTables rope_tables(int64_t start, int64_t length, int64_t head_dim, double theta, TensorOptions options = {});

// The rows of `tables` at `positions` (i32 or i64 [batch, seq], each below the tables' length):
// cos and sin [batch, seq, head_dim / 2], for a batch whose rows have positions of their own (a
// packed row's positions restart at each document).
RopeTables gather_rope_tables(const RopeTables& tables, const Tensor& positions);

// x [..., seq, head_dim] rotated by the tables of rope_tables (x's dtype, [seq, head_dim / 2]):
// the halves x1 = x[..., :d/2], x2 = x[..., d/2:] become (x1 cos - x2 sin, x2 cos + x1 sin).
// Tables of gather_rope_tables, [batch, seq, head_dim / 2], rotate x [batch, ..., seq, head_dim]
// (x of 3 or more dimensions) row by row, broadcast over the dimensions between (the heads).
// Differentiable in x only.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin);

// silu(gate) * up (same shape and dtype).
Tensor swiglu(const Tensor& gate, const Tensor& up);

// softmax(q k^T * scale (+ causal mask)) v with q [B, Hq, T, D] and k, v [B, Hkv, S, D],
// Hq a multiple of Hkv: query head h attends with kv head h / (Hq / Hkv), no copies of K/V.
// causal: query i is position S - T + i and sees keys 0 .. S - T + i (a KV cache holds the
// first S - T). scale defaults to 1 / sqrt(D). Returns [B, Hq, T, D].
// dropout_p > 0 drops attention probabilities (PyTorch's dropout_p: pass it only in training),
// with the mask dropout(probabilities, dropout_p, true, gen) would draw for the contiguous
// [B, Hq, T, S] probabilities, on every device and path, so CPU and CUDA runs from one
// generator state drop the same entries; the generator advances by ceil(B Hq T S / 4) counters.
// doc_start (packed documents; undefined: none), i32 [B, T] on q's device: query t of row b sees
// only the keys doc_start[b, t] <= j <= t, doc_start[b, t] being the first position of t's
// document, so attention never crosses a document boundary. Needs causal, T == S (no KV cache)
// and no dropout; values non-decreasing along t with 0 <= doc_start[b, t] <= t (checked on the
// CPU; on CUDA a check would wait for the device: other values stay in bounds, their results
// are undefined). Key blocks below a query block's documents are skipped, so a row of many short
// documents costs about what the documents cost alone.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = true,
                                    std::optional<double> scale = std::nullopt, double dropout_p = 0.0,
                                    Generator* gen = nullptr, const Tensor& doc_start = {});
// Whether 16-bit attention on CUDA may take the flash kernels: GENESIS_FLASH_ATTENTION=0 sends it
// through the GEMM path (for comparisons).
bool flash_attention_enabled();

}  // namespace genesis
