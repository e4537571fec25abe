#pragma once
// What the CUDA kernels share with the runtime above them (libgenesis/cuda/runtime.h): the
// error check of every CUDA call and the record a kernel writes when it finds a bad index.
#include <cuda_runtime_api.h>

namespace genesis::cuda {

// Faults that kernels find without stopping the stream (an index out of range): the first one
// is recorded in mapped host memory of its device, and the runtime's next host synchronization
// point throws it as an IndexError (libgenesis/cuda/runtime.h: kernel_fault_slot,
// raise_kernel_fault). A kernel that reports a fault skips the faulty element instead of
// reading out of bounds.
struct KernelFault {
  unsigned int set;  // 0 until a kernel reports
  int op;            // fault_op_id() of the reporting op
  long long value;   // the offending index
  long long bound;   // the valid range was [0, bound)
};

// Throws genesis::Error naming the failed call (after clearing a non-sticky error).
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);

}  // namespace genesis::cuda

#define GENESIS_CUDA_CHECK(expr)                                                  \
  do {                                                                            \
    cudaError_t genesis_err_ = (expr);                                            \
    if (genesis_err_ != cudaSuccess) [[unlikely]]                                 \
      ::genesis::cuda::throw_cuda_error(genesis_err_, #expr, __FILE__, __LINE__); \
  } while (0)
