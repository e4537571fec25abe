#pragma once
// The cuBLAS / cuBLASLt status check of the GEMM kernels and of the runtime that owns their
// handles (libgenesis/cuda/blas.cpp): a failure throws Error naming the status and the call.
#include "kernels/cuda/cublas_api.h"

namespace genesis::kernels::cuda {

// Throws genesis::Error with the status's name and cuBLAS's description of it.
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file, int line);

}  // namespace genesis::kernels::cuda

#define GENESIS_CUBLAS_CHECK(expr)                                                              \
  do {                                                                                          \
    cublasStatus_t genesis_status_ = (expr);                                                    \
    if (genesis_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                  \
      ::genesis::kernels::cuda::throw_cublas_error(genesis_status_, #expr, __FILE__, __LINE__); \
  } while (0)
