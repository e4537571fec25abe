#pragma once
// The cuBLAS / cuBLASLt state of the CUDA runtime: per device a cuBLAS and a cuBLASLt handle
// and the GEMM plan cache, per (device, stream) a 32 MiB workspace taken from the caching
// allocator (so it shows in memory_stats, as PyTorch's cuBLAS workspaces do). The GEMM kernels
// (kernels/cuda/linalg.h) borrow them per call through lend_gemm_resources, registered at
// start-up (libgenesis/cuda/backend.cpp). Compiled only with the CUDA backend.
#include <cuda_runtime_api.h>

#include "kernels/cuda/linalg.h"

namespace genesis::cuda {

// Process-wide: lets f32 GEMMs use TF32 tensor cores (10-bit mantissa inputs). Off by default.
void set_allow_tf32(bool allow);
bool allow_tf32();

// The current device's plan cache: plans made so far, and how many found no algorithm.
kernels::cuda::GemmPlanStats gemm_plan_stats();

// The lender of kernels/cuda/linalg.h: use(context, resources) for the current device and
// `stream`, under the runtime's lock (handles are bound to one stream at a time).
void lend_gemm_resources(cudaStream_t stream, void* context,
                         void (*use)(void* context, const kernels::cuda::GemmResources& resources));

}  // namespace genesis::cuda
