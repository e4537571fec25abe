#pragma once
// The op table: every operation of libgenesis listed once. `genesis ops --list`, the
// gradient-check coverage test and the CUDA parity coverage test are derived from it, so
// an op added here without a gradient check (or a CUDA test, when it claims a CUDA
// kernel) fails the suite.
//
// X(name, family, backward, cuda, autocast): backward = differentiable (has a backward
// formula); cuda = has CUDA kernels (every op has CPU kernels); autocast = what the op does
// with its floating inputs while autocast is on (libgenesis/autograd/autocast.h), modelled
// on PyTorch's autocast op lists:
//   lower    cast to the autocast dtype (matrix products, convolution, attention)
//   f32      cast 16-bit inputs to f32 (softmax, losses, reductions, exp/log/pow)
//   f32_math read 16-bit inputs as they are, compute and return f32 (the op's kernels widen on
//            load, so no cast pass: cross_entropy of bf16 logits)
//   low_out  read inputs as they are (f32 or 16-bit), compute the statistics and math in f32,
//            return the autocast dtype (layer_norm, rms_norm: their outputs feed matrix products)
//   promote  cast to the widest floating input (binary ops, where, cat, stack, ...)
//   promote_math  read inputs as they are and compute in the widest floating dtype (add, sub,
//            mul: the CUDA kernels widen a 16-bit operand on load, so an f32 residual plus a
//            bf16 branch output needs no cast pass)
//   none     run in the inputs' own dtypes (views, copies, indexing, activations)
#include <array>
#include <cstdint>
#include <span>
#include <string_view>

namespace genesis {

enum class AutocastPolicy : uint8_t { none, lower, f32, f32_math, low_out, promote, promote_math };
std::string_view autocast_policy_name(AutocastPolicy policy);

#define GENESIS_OPS(X)                                              \
  /* views and copies */                                            \
  X(view, "view", true, true, none)                                 \
  X(reshape, "view", true, true, none)                              \
  X(permute, "view", true, true, none)                              \
  X(transpose, "view", true, true, none)                            \
  X(narrow, "view", true, true, none)                               \
  X(slice, "view", true, true, none)                                \
  X(select, "view", true, true, none)                               \
  X(expand, "view", true, true, none)                               \
  X(squeeze, "view", true, true, none)                              \
  X(unsqueeze, "view", true, true, none)                            \
  X(flatten, "view", true, true, none)                              \
  X(contiguous, "copy", true, true, none)                           \
  X(clone, "copy", true, true, none)                                \
  X(to_dtype, "copy", true, true, none)                             \
  X(to_device, "copy", true, true, none)                            \
  /* factories */                                                   \
  X(full, "factory", false, true, none)                             \
  X(arange, "factory", false, true, none)                           \
  X(linspace, "factory", false, true, none)                         \
  X(eye, "factory", false, true, none)                              \
  X(rand, "random", false, true, none)                              \
  X(randn, "random", false, true, none)                             \
  X(randint, "random", false, true, none)                           \
  X(bernoulli, "random", false, true, none)                         \
  /* unary */                                                       \
  X(neg, "unary", true, true, none)                                 \
  X(abs, "unary", true, true, none)                                 \
  X(exp, "unary", true, true, f32)                                  \
  X(log, "unary", true, true, f32)                                  \
  X(log1p, "unary", true, true, f32)                                \
  X(sqrt, "unary", true, true, none)                                \
  X(rsqrt, "unary", true, true, f32)                                \
  X(sin, "unary", true, true, none)                                 \
  X(cos, "unary", true, true, none)                                 \
  X(tanh, "unary", true, true, none)                                \
  X(sigmoid, "unary", true, true, none)                             \
  X(relu, "unary", true, true, none)                                \
  X(gelu, "unary", true, true, none)                                \
  X(gelu_tanh, "unary", true, true, none)                           \
  X(silu, "unary", true, true, none)                                \
  X(softplus, "unary", true, true, f32)                             \
  X(pow_scalar, "unary", true, true, f32)                           \
  X(clamp, "unary", true, true, none)                               \
  X(sign, "unary", true, true, none)                                \
  /* binary (broadcasting) */                                       \
  X(add, "binary", true, true, promote_math)                        \
  X(sub, "binary", true, true, promote_math)                        \
  X(mul, "binary", true, true, promote_math)                        \
  X(div, "binary", true, true, promote)                             \
  X(pow, "binary", true, true, f32)                                 \
  X(maximum, "binary", true, true, promote)                         \
  X(minimum, "binary", true, true, promote)                         \
  X(eq, "compare", false, true, promote)                            \
  X(ne, "compare", false, true, promote)                            \
  X(lt, "compare", false, true, promote)                            \
  X(le, "compare", false, true, promote)                            \
  X(gt, "compare", false, true, promote)                            \
  X(ge, "compare", false, true, promote)                            \
  X(where, "select", true, true, promote)                           \
  X(masked_fill, "select", true, true, none)                        \
  /* reductions */                                                  \
  X(sum, "reduce", true, true, f32)                                 \
  X(mean, "reduce", true, true, f32)                                \
  X(prod, "reduce", true, true, f32)                                \
  X(max, "reduce", true, true, none)                                \
  X(min, "reduce", true, true, none)                                \
  X(argmax, "reduce", false, true, none)                            \
  X(argmin, "reduce", false, true, none)                            \
  X(var, "reduce", true, true, f32)                                 \
  X(std, "reduce", true, true, f32)                                 \
  X(logsumexp, "reduce", true, true, f32)                           \
  X(norm, "reduce", true, true, f32)                                \
  /* linear algebra */                                              \
  X(matmul, "linalg", true, true, lower)                            \
  X(bmm, "linalg", true, true, lower)                               \
  X(linear, "linalg", true, true, lower)                            \
  X(linear_gelu, "linalg", true, true, lower)                       \
  /* neural-network functions */                                    \
  X(softmax, "nn", true, true, f32)                                 \
  X(log_softmax, "nn", true, true, f32)                             \
  X(layer_norm, "nn", true, true, low_out)                          \
  X(rms_norm, "nn", true, true, low_out)                            \
  X(embedding, "nn", true, true, none)                              \
  X(dropout, "nn", true, true, none)                                \
  X(cross_entropy, "loss", true, true, f32_math)                         \
  X(linear_cross_entropy, "loss", true, true, lower)                \
  X(nll_loss, "loss", true, true, f32)                              \
  X(mse_loss, "loss", true, true, f32)                              \
  X(l1_loss, "loss", true, true, f32)                               \
  X(binary_cross_entropy_with_logits, "loss", true, true, f32)      \
  X(conv2d, "conv", true, true, lower)                              \
  X(max_pool2d, "conv", true, true, none)                           \
  X(avg_pool2d, "conv", true, true, none)                           \
  X(one_hot, "nn", false, true, none)                               \
  X(rope, "nn", true, true, none)                                   \
  X(swiglu, "nn", true, true, promote)                              \
  X(scaled_dot_product_attention, "nn", true, true, lower)          \
  /* shape and indexing */                                          \
  X(cat, "index", true, true, promote)                              \
  X(stack, "index", true, true, promote)                            \
  X(split, "index", true, true, none)                               \
  X(chunk, "index", true, true, none)                               \
  X(index_select, "index", true, true, none)                        \
  X(gather, "index", true, true, none)                              \
  X(scatter_add, "index", true, true, promote)                      \
  X(tril, "index", true, true, none)                                \
  X(triu, "index", true, true, none)                                \
  X(repeat, "index", true, true, none)                              \
  X(flip, "index", true, true, none)

struct OpInfo {
  std::string_view name;
  std::string_view family;
  bool backward;
  bool cuda;
  AutocastPolicy autocast;
};

// One enumerator per op, in table order (OpId::matmul, ...).
enum class OpId : uint16_t {
#define GENESIS_OP_ID(name, family, backward, cuda, autocast) name,
  GENESIS_OPS(GENESIS_OP_ID)
#undef GENESIS_OP_ID
};

#define GENESIS_OP_INFO(name, family, backward, cuda, autocast) \
  OpInfo{#name, family, backward, cuda, AutocastPolicy::autocast},
inline constexpr std::array kOpTable{GENESIS_OPS(GENESIS_OP_INFO)};
#undef GENESIS_OP_INFO

constexpr const OpInfo& op_info(OpId op) { return kOpTable[static_cast<size_t>(op)]; }

std::span<const OpInfo> op_table();
const OpInfo* find_op(std::string_view name);

}  // namespace genesis
