#pragma once
// The cuBLAS / cuBLASLt status check of the GEMM kernels and of the runtime that owns their
// handles (libgenesis/cuda/blas.cpp): a failure throws Error naming the status and the call.
#include <cublas_v2.h>

#include "libgenesis/core/error.h"

#define GENESIS_CUBLAS_CHECK(expr)                                                                            \
  do {                                                                                                        \
    cublasStatus_t genesis_status_ = (expr);                                                                  \
    if (genesis_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                                \
      GENESIS_THROW(Error, "cuBLAS error ", cublasGetStatusName(genesis_status_), ": ",                       \
                    cublasGetStatusString(genesis_status_), " at " #expr " (", __FILE__, ":", __LINE__, ")"); \
  } while (0)
