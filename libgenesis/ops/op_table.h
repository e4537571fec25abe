#pragma once
// The op table: every operation of libgenesis listed once. The op enum, `genesis ops`,
// docs/ops.md and the op-case coverage tests are derived from it, so an op added here without
// an op case (libgenesis/ops/op_cases.h: its gradient check and CUDA-vs-CPU comparison) fails
// the suite. Every op has CPU and CUDA kernels, so the table has no column for either.
//
// X(name, family, backward, autocast): backward = differentiable (has a backward formula);
// autocast = what the op does with its floating inputs while autocast is on
// (libgenesis/autograd/autocast.h), modelled on PyTorch's autocast op lists:
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
#include <string>
#include <string_view>

namespace genesis {

enum class AutocastPolicy : uint8_t { none, lower, f32, f32_math, low_out, promote, promote_math };
std::string_view autocast_policy_name(AutocastPolicy policy);

#define GENESIS_OPS(X)                                              \
  /* views and copies */                                            \
  X(view, "view", true, none)                                       \
  X(reshape, "view", true, none)                                    \
  X(permute, "view", true, none)                                    \
  X(transpose, "view", true, none)                                  \
  X(narrow, "view", true, none)                                     \
  X(slice, "view", true, none)                                      \
  X(select, "view", true, none)                                     \
  X(expand, "view", true, none)                                     \
  X(squeeze, "view", true, none)                                    \
  X(unsqueeze, "view", true, none)                                  \
  X(flatten, "view", true, none)                                    \
  X(contiguous, "copy", true, none)                                 \
  X(clone, "copy", true, none)                                      \
  X(to_dtype, "copy", true, none)                                   \
  X(to_device, "copy", true, none)                                  \
  /* factories */                                                   \
  X(full, "factory", false, none)                                   \
  X(arange, "factory", false, none)                                 \
  X(linspace, "factory", false, none)                               \
  X(eye, "factory", false, none)                                    \
  X(rand, "random", false, none)                                    \
  X(randn, "random", false, none)                                   \
  X(randint, "random", false, none)                                 \
  X(bernoulli, "random", false, none)                               \
  /* unary */                                                       \
  X(neg, "unary", true, none)                                       \
  X(abs, "unary", true, none)                                       \
  X(exp, "unary", true, f32)                                        \
  X(log, "unary", true, f32)                                        \
  X(log1p, "unary", true, f32)                                      \
  X(sqrt, "unary", true, none)                                      \
  X(rsqrt, "unary", true, f32)                                      \
  X(sin, "unary", true, none)                                       \
  X(cos, "unary", true, none)                                       \
  X(tanh, "unary", true, none)                                      \
  X(sigmoid, "unary", true, none)                                   \
  X(relu, "unary", true, none)                                      \
  X(gelu, "unary", true, none)                                      \
  X(gelu_tanh, "unary", true, none)                                 \
  X(silu, "unary", true, none)                                      \
  X(softplus, "unary", true, f32)                                   \
  X(pow_scalar, "unary", true, f32)                                 \
  X(clamp, "unary", true, none)                                     \
  X(sign, "unary", true, none)                                      \
  /* binary (broadcasting) */                                       \
  X(add, "binary", true, promote_math)                              \
  X(sub, "binary", true, promote_math)                              \
  X(mul, "binary", true, promote_math)                              \
  X(div, "binary", true, promote)                                   \
  X(pow, "binary", true, f32)                                       \
  X(maximum, "binary", true, promote)                               \
  X(minimum, "binary", true, promote)                               \
  X(eq, "compare", false, promote)                                  \
  X(ne, "compare", false, promote)                                  \
  X(lt, "compare", false, promote)                                  \
  X(le, "compare", false, promote)                                  \
  X(gt, "compare", false, promote)                                  \
  X(ge, "compare", false, promote)                                  \
  X(where, "select", true, promote)                                 \
  X(masked_fill, "select", true, none)                              \
  /* reductions */                                                  \
  X(sum, "reduce", true, f32)                                       \
  X(mean, "reduce", true, f32)                                      \
  X(prod, "reduce", true, f32)                                      \
  X(max, "reduce", true, none)                                      \
  X(min, "reduce", true, none)                                      \
  X(argmax, "reduce", false, none)                                  \
  X(argmin, "reduce", false, none)                                  \
  X(var, "reduce", true, f32)                                       \
  X(std, "reduce", true, f32)                                       \
  X(logsumexp, "reduce", true, f32)                                 \
  X(norm, "reduce", true, f32)                                      \
  /* linear algebra */                                              \
  X(matmul, "linalg", true, lower)                                  \
  X(bmm, "linalg", true, lower)                                     \
  X(linear, "linalg", true, lower)                                  \
  X(linear_gelu, "linalg", true, lower)                             \
  X(lora_linear, "linalg", true, lower)                             \
  X(swiglu_linear, "linalg", true, lower)                           \
  /* neural-network functions */                                    \
  X(softmax, "nn", true, f32)                                       \
  X(log_softmax, "nn", true, f32)                                   \
  X(layer_norm, "nn", true, low_out)                                \
  X(rms_norm, "nn", true, low_out)                                  \
  X(embedding, "nn", true, none)                                    \
  X(dropout, "nn", true, none)                                      \
  X(cross_entropy, "loss", true, f32_math)                          \
  X(linear_cross_entropy, "loss", true, lower)                      \
  X(nll_loss, "loss", true, f32)                                    \
  X(mse_loss, "loss", true, f32)                                    \
  X(l1_loss, "loss", true, f32)                                     \
  X(binary_cross_entropy_with_logits, "loss", true, f32)            \
  X(conv2d, "conv", true, lower)                                    \
  X(max_pool2d, "conv", true, none)                                 \
  X(avg_pool2d, "conv", true, none)                                 \
  X(one_hot, "nn", false, none)                                     \
  X(rope, "nn", true, none)                                         \
  X(swiglu, "nn", true, promote)                                    \
  X(scaled_dot_product_attention, "nn", true, lower)                \
  /* shape and indexing */                                          \
  X(cat, "index", true, promote)                                    \
  X(stack, "index", true, promote)                                  \
  X(split, "index", true, none)                                     \
  X(chunk, "index", true, none)                                     \
  X(index_select, "index", true, none)                              \
  X(gather, "index", true, none)                                    \
  X(scatter_add, "index", true, promote)                            \
  X(tril, "index", true, none)                                      \
  X(triu, "index", true, none)                                      \
  X(repeat, "index", true, none)                                    \
  X(flip, "index", true, none)

struct OpInfo {
  std::string_view name;
  std::string_view family;
  bool backward;
  AutocastPolicy autocast;
};

// One enumerator per op, in table order (OpId::matmul, ...).
enum class OpId : uint16_t {
#define GENESIS_OP_ID(name, family, backward, autocast) name,
  GENESIS_OPS(GENESIS_OP_ID)
#undef GENESIS_OP_ID
};

#define GENESIS_OP_INFO(name, family, backward, autocast) \
  OpInfo{#name, family, backward, AutocastPolicy::autocast},
inline constexpr std::array kOpTable{GENESIS_OPS(GENESIS_OP_INFO)};
#undef GENESIS_OP_INFO

constexpr const OpInfo& op_info(OpId op) { return kOpTable[static_cast<size_t>(op)]; }
// The id of a row of the table (`op` must be an element of kOpTable, as op_table() gives).
constexpr OpId op_id(const OpInfo& op) { return static_cast<OpId>(&op - kOpTable.data()); }

std::span<const OpInfo> op_table();
const OpInfo* find_op(std::string_view name);

// docs/ops.md: the ops' semantics, the autocast policies with their ops, and every op with its
// backward, gradient-check (from the op-case registry) and autocast columns.
std::string op_reference_markdown();

}  // namespace genesis
