#pragma once
// The op table: every operation of libgenesis listed once. `genesis ops --list`, the
// gradient-check coverage test and the CUDA parity coverage test are derived from it, so
// an op added here without a gradient check (or a CUDA test, when it claims a CUDA
// kernel) fails the suite.
//
// X(name, family, backward, cuda): backward = differentiable (has a backward formula);
// cuda = has CUDA kernels. Every op has CPU kernels.
#include <span>
#include <string_view>

namespace genesis {

#define GENESIS_OPS(X)                                   \
  /* views and copies */                                 \
  X(view, "view", true, true)                            \
  X(reshape, "view", true, true)                         \
  X(permute, "view", true, true)                         \
  X(transpose, "view", true, true)                       \
  X(narrow, "view", true, true)                          \
  X(slice, "view", true, true)                           \
  X(select, "view", true, true)                          \
  X(expand, "view", true, true)                          \
  X(squeeze, "view", true, true)                         \
  X(unsqueeze, "view", true, true)                       \
  X(flatten, "view", true, true)                         \
  X(contiguous, "copy", true, true)                      \
  X(clone, "copy", true, true)                           \
  X(to_dtype, "copy", true, true)                        \
  X(to_device, "copy", true, true)                       \
  /* factories */                                        \
  X(full, "factory", false, true)                        \
  X(arange, "factory", false, true)                      \
  X(linspace, "factory", false, true)                    \
  X(eye, "factory", false, true)                         \
  X(rand, "random", false, true)                         \
  X(randn, "random", false, true)                        \
  X(randint, "random", false, true)                      \
  X(bernoulli, "random", false, true)                    \
  /* unary */                                            \
  X(neg, "unary", true, true)                            \
  X(abs, "unary", true, true)                            \
  X(exp, "unary", true, true)                            \
  X(log, "unary", true, true)                            \
  X(log1p, "unary", true, true)                          \
  X(sqrt, "unary", true, true)                           \
  X(rsqrt, "unary", true, true)                          \
  X(sin, "unary", true, true)                            \
  X(cos, "unary", true, true)                            \
  X(tanh, "unary", true, true)                           \
  X(sigmoid, "unary", true, true)                        \
  X(relu, "unary", true, true)                           \
  X(gelu, "unary", true, true)                           \
  X(gelu_tanh, "unary", true, true)                      \
  X(silu, "unary", true, true)                           \
  X(softplus, "unary", true, true)                       \
  X(pow_scalar, "unary", true, true)                     \
  X(clamp, "unary", true, true)                          \
  X(sign, "unary", true, true)                           \
  /* binary (broadcasting) */                            \
  X(add, "binary", true, true)                           \
  X(sub, "binary", true, true)                           \
  X(mul, "binary", true, true)                           \
  X(div, "binary", true, true)                           \
  X(pow, "binary", true, true)                           \
  X(maximum, "binary", true, true)                       \
  X(minimum, "binary", true, true)                       \
  X(eq, "compare", false, true)                          \
  X(ne, "compare", false, true)                          \
  X(lt, "compare", false, true)                          \
  X(le, "compare", false, true)                          \
  X(gt, "compare", false, true)                          \
  X(ge, "compare", false, true)                          \
  X(where, "select", true, true)                         \
  X(masked_fill, "select", true, true)                   \
  /* reductions */                                       \
  X(sum, "reduce", true, true)                           \
  X(mean, "reduce", true, true)                          \
  X(prod, "reduce", true, false)                         \
  X(max, "reduce", true, false)                          \
  X(min, "reduce", true, false)                          \
  X(argmax, "reduce", false, false)                      \
  X(argmin, "reduce", false, false)                      \
  X(var, "reduce", true, false)                          \
  X(std, "reduce", true, false)                          \
  X(logsumexp, "reduce", true, false)                    \
  X(norm, "reduce", true, false)                         \
  /* linear algebra */                                   \
  X(matmul, "linalg", true, true)                        \
  X(bmm, "linalg", true, true)                           \
  X(linear, "linalg", true, true)                        \
  /* neural-network functions */                         \
  X(softmax, "nn", true, true)                           \
  X(log_softmax, "nn", true, true)                       \
  X(layer_norm, "nn", true, true)                        \
  X(rms_norm, "nn", true, true)                          \
  X(embedding, "nn", true, true)                         \
  X(dropout, "nn", true, true)                           \
  X(cross_entropy, "loss", true, true)                   \
  X(nll_loss, "loss", true, true)                        \
  X(mse_loss, "loss", true, true)                        \
  X(l1_loss, "loss", true, true)                         \
  X(binary_cross_entropy_with_logits, "loss", true, true) \
  X(conv2d, "conv", true, true)                          \
  X(max_pool2d, "conv", true, true)                      \
  X(avg_pool2d, "conv", true, true)                      \
  X(one_hot, "nn", false, false)                         \
  X(rope, "nn", true, false)                             \
  X(swiglu, "nn", true, false)                           \
  X(scaled_dot_product_attention, "nn", true, false)     \
  /* shape and indexing */                               \
  X(cat, "index", true, false)                           \
  X(stack, "index", true, false)                         \
  X(split, "index", true, false)                         \
  X(chunk, "index", true, false)                         \
  X(index_select, "index", true, false)                  \
  X(gather, "index", true, false)                        \
  X(scatter_add, "index", true, false)                   \
  X(tril, "index", true, false)                          \
  X(triu, "index", true, false)                          \
  X(repeat, "index", true, false)                        \
  X(flip, "index", true, false)

struct OpInfo {
  std::string_view name;
  std::string_view family;
  bool backward;
  bool cuda;
};

std::span<const OpInfo> op_table();
const OpInfo* find_op(std::string_view name);

}  // namespace genesis
