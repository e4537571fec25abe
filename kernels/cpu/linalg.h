#pragma once
// CPU GEMM: row-major, strided-batched C[i] = alpha * op(A[i]) op(B[i]) + beta * C[i].
// f32 goes to sgemm (below), f64 to OpenBLAS; f16/bf16 are widened to f32 and rounded back.
#include <cstdint>
#include <string>

#include "kernels/common/gemm_args.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cpu {

using kernels::GemmArgs;


void gemm(DType dtype, const GemmArgs& args);

// The library of every f32 GEMM on the CPU (linear, matmul, the im2col convolution): OpenBLAS,
// or (the default in builds with oneDNN; GENESIS_CPU_GEMM=openblas|onednn chooses) oneDNN's
// sgemm, JIT-generated for the CPU found: 2x OpenBLAS 0.3.21's on the Zen build host
// (docs/benchmarks.md). Its JIT kernels (oneDNN <= 3.11, uxlfoundation/oneDNN#4845) move rsp
// into a heap workspace while they run (K > 84), so a signal handled on a thread inside one
// writes its frame over the heap: genesis train takes SIGINT/SIGTERM on a thread of its own
// (train/stop_signal.h); a program that handles other signals (a profiler's SIGPROF) on its
// compute threads should choose OpenBLAS. The choice is fixed per process, so results stay
// bit-identical run to run.
enum class CpuGemm : uint8_t { openblas, onednn };
CpuGemm cpu_gemm();
const char* cpu_gemm_name(CpuGemm gemm);
const char* cpu_gemm_source();

// Row-major C = alpha op(A) op(B) + beta C in f32 through cpu_gemm().
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace genesis::kernels::cpu
