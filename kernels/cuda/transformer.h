#pragma once
// CUDA kernels of the transformer ops (the contracts of kernels/cpu/transformer.h): rotary
// embedding over strided [outer0, outer1, seq, dim] inputs, SwiGLU, and scaled-dot-product
// attention with grouped-query heads through cuBLAS GEMMs around fused softmax kernels. Every
// sum is taken in a fixed order (no atomics), so results are deterministic.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/attention_shape.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cuda {

// x seen as [outer0, outer1, seq, dim] with element strides (dim has stride 1): the [B, H, T, D]
// view of a [B, T, H, D] projection needs no copy. table_stride0: elements between the cos/sin
// tables of consecutive outer0 indices (0: one table for all; seq * dim / 2: per-row positions).
struct RopeInput {
  const void* data;
  int64_t outer0, outer1;
  int64_t stride0, stride1, seq_stride;
  int64_t table_stride0;
};
// y contiguous [outer0, outer1, seq, dim]; cos and sin contiguous [seq, dim / 2] tables in x's
// dtype, one per outer0 index or one for all (x.table_stride0). `inverse` rotates by the
// opposite angle (the backward pass).
void rope(DType dtype, bool inverse, const RopeInput& x, int64_t seq, int64_t dim, const void* cos, const void* sin,
          void* y, cudaStream_t stream);

// y = silu(gate) * up over n contiguous elements, and its gradients; y, when not null, receives
// the forward's values again, bit for bit (ops/linalg.h's swiglu_linear keeps no y).
void swiglu(DType dtype, int64_t n, const void* gate, const void* up, void* y, cudaStream_t stream);
void swiglu_backward(DType dtype, int64_t n, const void* gate, const void* up, const void* grad_y, void* grad_gate,
                     void* grad_up, void* y, cudaStream_t stream);

// Element strides of a [batch, heads, rows, head_dim] attention operand whose head_dim is
// unit-stride.
struct HeadsLayout {
  int64_t batch, head, row;
};

// True when the rows of a GEMM operand of `rows` rows of `cols` elements are evenly strided by
// `row_stride`, as cuBLAS requires (row_stride >= cols unless there is a single row).
bool gemm_rows_ok(int64_t rows, int64_t cols, int64_t row_stride);
// True when q's layout lets the query rows of each kv head's group (q_heads / kv_heads heads of
// q_len rows) form one evenly strided matrix: contiguous q, one head per group, or q_len 1.
bool attention_query_stackable(const AttentionShape& s, const HeadsLayout& q);

// Any floating dtype. out is contiguous [batch, q_heads, q_len, head_dim]; probs contiguous
// [batch, q_heads, q_len, kv_len] in dtype, zero where masked. 16-bit inputs need `scores`, an
// f32 buffer of probs' size (the GEMM's f32 sums go to the softmax unrounded; only the
// probabilities are stored in 16 bits, as flash attention feeds them to its second product);
// f32 and f64 compute in place in probs (scores may be null). q must be attention_query_stackable;
// k and v rows gemm_rows_ok. doc_start (packed documents; null: none): contiguous i32
// [batch, q_len], query t of batch b sees no key below doc_start[b q_len + t] (zero probability).
void attention(DType dtype, const AttentionShape& s, const void* q, const HeadsLayout& q_layout, const void* k,
               const HeadsLayout& k_layout, const void* v, const HeadsLayout& v_layout, const int32_t* doc_start,
               void* out, void* probs, void* scores, cudaStream_t stream);
// Gradients (contiguous) from grad_out (contiguous) and the forward's probs. grad_probs holds
// batch * q_heads * q_len * kv_len elements of f32 for 16-bit inputs (else of dtype), and 16-bit
// inputs also need grad_scores, as many elements of dtype (f32/f64: null, dS overwrites dP).
// Each kv head sums its group's query rows inside one GEMM (deterministic).
void attention_backward(DType dtype, const AttentionShape& s, const void* q, const HeadsLayout& q_layout, const void* k,
                        const HeadsLayout& k_layout, const void* v, const HeadsLayout& v_layout,
                        const int32_t* doc_start, const void* probs, const void* grad_out, void* grad_q, void* grad_k,
                        void* grad_v, void* grad_probs, void* grad_scores, cudaStream_t stream);

}  // namespace genesis::kernels::cuda
