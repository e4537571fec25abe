#pragma once
// CUDA GEMM with the same contract as kernels/cpu/linalg.h (row-major, strided-batched).
// f32, f16 and bf16 run through cuBLASLt (f16/bf16 accumulate in f32; f32 uses full-precision
// FP32 unless the runtime allows TF32), f64 and zero-stride (broadcast) batches through cuBLAS.
// The library state a GEMM needs (handles, a workspace for its stream, the device's plan cache)
// belongs to the CUDA runtime (libgenesis/cuda/blas.h), which lends it to each call.
// cuBLASLt descriptors and the chosen algorithm are cached per shape, dtype, layout,
// alignment and epilogue. On a plan's first GEMM
// with beta = 0 outside graph capture, the heuristic's top 8 algorithms are timed on the
// stream (one wait for it) and the fastest is kept: the heuristic's first choice is often not
// (lm_head 8192x896 @ 896x151936 bf16: 3.54 -> 3.21 ms on an H100). GENESIS_GEMM_AUTOTUNE=0
// keeps the first choice.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels/common/gemm_args.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cuda {

void gemm(DType dtype, const GemmArgs& args, cudaStream_t stream);
// The same product with f16/bf16 operands A and B written to an f32 C (f32 accumulation, no
// rounding of the result); f32 and f64 run as gemm().
void gemm_f32_out(DType dtype, const GemmArgs& args, cudaStream_t stream);

// The cuBLASLt descriptors and chosen algorithms of one device (defined in linalg.cpp).
struct GemmPlanCache;
GemmPlanCache* new_gemm_plan_cache();  // lives as long as the process

// What a GEMM borrows from the runtime for one call.
struct GemmResources {
  cublasHandle_t blas = nullptr;  // bound to the call's stream and to `workspace`
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;  // the stream's own: GEMMs on other streams may run at the same time
  size_t workspace_bytes = 0;
  GemmPlanCache* plans = nullptr;  // the current device's
  bool allow_tf32 = false;         // f32 GEMMs may use TF32 tensor cores (10-bit mantissa inputs)
};
// The runtime's side: calls use(context, resources) for the current device and `stream`,
// holding the resources (and its lock) until use returns.
using GemmResourcesLender = void (*)(cudaStream_t stream, void* context,
                                     void (*use)(void* context, const GemmResources& resources));
// Set once by the CUDA runtime at start-up (libgenesis/cuda/backend.cpp).
void set_gemm_resources_lender(GemmResourcesLender lender);

// Work cuBLASLt fuses into the GEMM's store of C = op(A) op(B) (row-major names).
enum class EpilogueKind {
  bias,       // C += bias[n] on every row
  gelu_tanh,  // C = gelu_tanh(op(A) op(B) + bias); bias optional; pre_activation optional
  bias_grad,  // C as usual, and bias_grad[m] = sum over k of op(A)[i][k]
};

struct GemmEpilogue {
  EpilogueKind kind = EpilogueKind::bias;
  const void* bias = nullptr;
  // gelu_tanh: when set, receives op(A) op(B) + bias, row-major with leading dimension
  // ld_pre (a multiple of 8, at least n), for the backward pass.
  void* pre_activation = nullptr;
  int64_t ld_pre = 0;
  void* bias_grad = nullptr;
};

// C = epilogue(op(A) op(B)) for one f32/f16/bf16 GEMM (batch 1, alpha 1, beta 0, k > 0).
// Returns false, having written nothing, when cuBLASLt has no algorithm for the case; the
// caller then composes the result from separate kernels.
bool gemm_with_epilogue(DType dtype, const GemmArgs& args, const GemmEpilogue& epilogue, cudaStream_t stream);

// The cuBLASLt plan cache: plans made so far, and how many found no algorithm (their GEMMs
// take the cuBLAS or unfused fallback). Lets tests see that epilogues really run fused.
struct GemmPlanStats {
  int64_t plans = 0;
  int64_t without_algorithm = 0;
};
GemmPlanStats gemm_plan_stats(const GemmPlanCache& cache);

}  // namespace genesis::kernels::cuda
