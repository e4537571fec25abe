#pragma once
// The geometry of one attention call (kernels/cpu/transformer.h, kernels/cuda/flash_attention.h).
#include <cstdint>

namespace genesis::kernels {

// Geometry of one attention call: q [batch, q_heads, q_len, head_dim], k and v
// [batch, kv_heads, kv_len, head_dim]; query head h reads kv head h / (q_heads / kv_heads).
// With `causal`, query i sits at position kv_len - q_len + i and sees keys up to it.
struct AttentionShape {
  int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim;
  bool causal;
  double scale;
};

}  // namespace genesis::kernels
