#pragma once
// CPU kernels of the transformer ops: rotary embedding, SwiGLU and scaled-dot-product
// attention. All buffers are contiguous; f16/bf16 compute in f32, f64 in f64.
#include <cstdint>

#include "kernels/common/attention_shape.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cpu {

using kernels::AttentionShape;

// Rotary embedding in the rotate-half convention over x seen as [outer, seq, dim]: with
// c = cos[t, i], s = sin[t, i] (x's dtype), pairs (x[i], x[i + dim/2]) rotate to
// (x1 c - x2 s, x2 c + x1 s). The tables are [outer / outer_per_table, seq, dim / 2]: each run of
// outer_per_table rows takes the next (outer_per_table = outer: one table for all; the heads of
// a batch row: per-row positions). `inverse` rotates by the opposite angle, which is the
// backward pass.
void rope(DType dtype, bool inverse, int64_t outer, int64_t seq, int64_t dim, const void* x, const void* cos,
          const void* sin, int64_t outer_per_table, void* y);

// y = silu(gate) * up over n elements, and its gradients; y, when not null, receives the
// forward's values again, bit for bit (ops/linalg.h's swiglu_linear keeps no y).
void swiglu(DType dtype, int64_t n, const void* gate, const void* up, void* y);
void swiglu_backward(DType dtype, int64_t n, const void* gate, const void* up, const void* grad_y, void* grad_gate,
                     void* grad_up, void* y = nullptr);

// out [batch, q_heads, q_len, head_dim]; probs [batch, q_heads, q_len, kv_len] receives the
// attention weights in the accumulator type (f64 for f64, f32 otherwise), zero where masked.
// doc_start (packed documents; null: none) is [batch, q_len]: query t of batch b also hides the
// keys below doc_start[b * q_len + t], the first position of its document (causal, q_len == kv_len;
// non-decreasing in t and at most t, as the documents of a packed row are).
void attention(DType dtype, const AttentionShape& s, const void* q, const void* k, const void* v,
               const int32_t* doc_start, void* out, void* probs);
// Gradients of q, k and v. Each kv head sums its query heads in order (deterministic).
// `scratch` holds batch * q_heads * q_len * kv_len accumulator values.
void attention_backward(DType dtype, const AttentionShape& s, const void* q, const void* k, const void* v,
                        const int32_t* doc_start, const void* probs, const void* grad_out, void* grad_q, void* grad_k,
                        void* grad_v, void* scratch);

}  // namespace genesis::kernels::cpu
