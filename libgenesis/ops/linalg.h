#pragma once
// Linear algebra: matmul with NumPy batching/broadcasting rules, bmm, linear, linear_gelu,
// lora_linear and swiglu_linear.
// CPU through OpenBLAS (f16/bf16 computed in f32), CUDA through cuBLASLt (f64: cuBLAS).
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
// Floating inputs only (promoted to a common dtype). On CUDA the bias is added by the
// GEMM's epilogue, and the bias gradient comes out of the weight gradient's GEMM.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// gelu(linear(x, weight, bias), GeluApproximation::tanh) (the MLP of GPT-2). On CUDA one GEMM
// applies bias and GELU (cuBLASLt epilogue) and keeps the pre-activation for the backward.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// A LoRA-adapted linear layer in one op: x W^T + b + scale * (x A^T) B^T, with lora_a [r, in] and
// lora_b [out, r] (bias optional). The adapter's product is accumulated into the base's output
// by its GEMM (beta = 1), and its input gradient into the base's (dx = dy W + scale (dy B) A), so
// no [..., out] temporary or extra pass exists; the backward keeps x, the factors and the
// [..., r] product x A^T (times scale), never the output. Gradients for every input that asks.
Tensor lora_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& lora_a,
                   const Tensor& lora_b, double scale);

// linear(swiglu(gate, up), weight, bias), or lora_linear of it when lora_a and lora_b are given
// (both undefined: no adapter): the down projection of a SwiGLU MLP (Llama, Qwen) in one op.
// gate and up [..., in], weight [out, in]. h = silu(gate) * up is a temporary of the forward,
// never kept: the backward computes it again, bit for bit, in the pass that computes SwiGLU's
// gradients, and the weight's and lora_a's gradients read it there. The MLP keeps gate and up
// (which SwiGLU's gradients read anyway) and not h: [..., in] less per layer than composing
// swiglu and linear. Gradients for every input that asks.
Tensor swiglu_linear(const Tensor& gate, const Tensor& up, const Tensor& weight, const Tensor& bias = Tensor(),
                     const Tensor& lora_a = Tensor(), const Tensor& lora_b = Tensor(), double scale = 1.0);

// Lets CUDA f32 matmuls use TF32 tensor cores (10-bit mantissa inputs; several times faster
// on Ampere and later). Process-wide, off by default; no effect without CUDA.
void set_allow_tf32(bool allow);

}  // namespace genesis
