#pragma once
// Linear algebra: matmul with NumPy batching/broadcasting rules, bmm, and linear.
// CPU through OpenBLAS (f16/bf16 computed in f32), CUDA through cuBLAS.
#include "libgenesis/core/tensor.h"

namespace genesis {

// torch.matmul semantics: 1-D x 1-D dot, 2-D x 2-D, 1-D operands promoted and squeezed,
// batch dimensions broadcast. The result has the promoted dtype; integer operands are
// multiplied through an f64 GEMM and cast back (exact while every partial sum stays below
// 2^53); bool operands throw DTypeError. Shape errors name the op and both shapes.
Tensor matmul(const Tensor& a, const Tensor& b);
// [B, M, K] x [B, K, N] -> [B, M, N] (no broadcasting).
Tensor bmm(const Tensor& a, const Tensor& b);
// x W^T + b: x [..., in], weight [out, in], bias [out] (optional: undefined Tensor).
// Floating inputs only (promoted to a common dtype).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace genesis
