#include "kernels/cuda/check.h"

#include "libgenesis/core/error.h"

namespace genesis::cuda {

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  cudaGetLastError();  // reset a non-sticky error so the next check reports only its own failure
  GENESIS_THROW(Error, "CUDA error ", cudaGetErrorName(err), ": ", cudaGetErrorString(err), " at ", expr, " (", file,
                ":", line, ")");
}

}  // namespace genesis::cuda
