#pragma once
// One strided-batched GEMM's operands, row-major (kernels/cpu/linalg.h, kernels/cuda/linalg.h).
#include <cstdint>

namespace genesis::kernels {

struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;  // leading dimension (row-major) and batch stride, in elements
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  double alpha = 1.0, beta = 0.0;
};

}  // namespace genesis::kernels
