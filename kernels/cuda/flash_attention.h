#pragma once
// Flash attention for f16 and bf16 on sm_80 and later (tensor cores through mma.sync): the
// softmax is taken online over blocks of keys, so no [q_len, kv_len] matrix exists in memory;
// the forward keeps each row's logsumexp, from which the backward recomputes the
// probabilities. Causal blocks above the diagonal are skipped; grouped-query heads read their
// kv head in place. q, k, v, the output and every gradient are read and written through their
// strides, so the [B, H, T, D] views of a fused qkv projection need no copies. The backward
// is deterministic: one kernel accumulates dK and dV per key block and query head (looping
// over the query blocks; grouped heads' shares are then added in head order), another dQ per
// query block; no atomics.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/attention_shape.h"
#include "kernels/cuda/transformer.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cuda {

// One operand's base pointer and element strides ([batch, heads, rows, head_dim], head_dim
// unit-stride).
struct FlashOperand {
  const void* data;
  HeadsLayout layout;
};
struct FlashOutput {
  void* data;
  HeadsLayout layout;
};

// Attention dropout: probability (b, h, i, j) is kept, and scaled by 1 / keep_prob, when
// draw ((b q_heads + h) q_len + i) kv_len + j of the Philox stream (seed, offset) passes the
// Bernoulli(keep_prob) test of kernels/cpu/random.cpp: the mask ops/nn.h's dropout draws from the
// same generator state for the contiguous [batch, q_heads, q_len, kv_len] probabilities. The
// backward takes the forward's values. keep_prob = 1: no dropout.
// The forward also writes the mask as bits (keep_bits, flash_dropout_keep_words of them), which
// the backward reads instead of drawing again.
struct FlashDropout {
  double keep_prob = 1.0;
  uint64_t seed = 0;
  uint64_t offset = 0;
  uint32_t* keep_bits = nullptr;
};
int64_t flash_dropout_keep_words(const AttentionShape& s);

// Whether the flash kernels take this case: f16 or bf16, head_dim 32, 64, 96 or 128, and every
// operand 16-byte aligned with strides that are multiples of 8 elements. Otherwise the caller
// takes the GEMM path (kernels/cuda/transformer.h).
bool flash_attention_supported(DType dtype, const AttentionShape& s, std::initializer_list<FlashOperand> operands);

// out [batch, q_heads, q_len, head_dim] through its layout; lse (f32, contiguous
// [batch, q_heads, q_len]) receives each row's logsumexp of the scaled scores in base 2.
// doc_start (packed documents; null: none): contiguous i32 [batch, q_len], query i of batch b
// sees no key below doc_start[b q_len + i] (causal, q_len == kv_len; starts non-decreasing along
// a row, at most the position). Key tiles below a query block's first start are skipped, and
// the backward skips the same tiles; other values stay in bounds, with undefined results.
void flash_attention_forward(DType dtype, const AttentionShape& s, const FlashOperand& q, const FlashOperand& k,
                             const FlashOperand& v, const int32_t* doc_start, const FlashOutput& out, float* lse,
                             const FlashDropout& dropout, cudaStream_t stream);

// f32 scratch the backward needs: each query row's sum of grad_out * out, and with grouped
// heads each query head's share of dK and dV (the group's shares are then added in order).
int64_t flash_attention_backward_scratch(const AttentionShape& s);

// Gradients of q, k and v (through their layouts) from the forward's out and lse and grad_out
// (doc_start: the forward's).
void flash_attention_backward(DType dtype, const AttentionShape& s, const FlashOperand& q, const FlashOperand& k,
                              const FlashOperand& v, const int32_t* doc_start, const FlashOperand& out,
                              const float* lse, const FlashOperand& grad_out, const FlashOutput& grad_q,
                              const FlashOutput& grad_k, const FlashOutput& grad_v, float* scratch,
                              const FlashDropout& dropout, cudaStream_t stream);

}  // namespace genesis::kernels::cuda
