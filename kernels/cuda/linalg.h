#pragma once
// CUDA GEMM through cuBLAS with the same contract as kernels/cpu/linalg.h (row-major,
// strided-batched). f16/bf16 accumulate in f32; f32 uses full-precision FP32 unless
// tf32 is allowed by set_allow_tf32().
#include <cuda_runtime_api.h>

#include "kernels/cpu/linalg.h"

namespace genesis::kernels::cuda {

void gemm(DType dtype, const cpu::GemmArgs& args, cudaStream_t stream);
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace genesis::kernels::cuda
