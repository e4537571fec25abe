// The CUDA backend's start-up: the core learns where CUDA storage comes from (the caching
// allocators, core/allocator.h) and the GEMM kernels where their cuBLAS state lives
// (libgenesis/cuda/blas.h). Nothing calls into this file by name, so the library's link
// options keep it in every program (-u genesis_cuda_backend_anchor, libgenesis/CMakeLists.txt).
#include "libgenesis/core/allocator.h"
#include "libgenesis/cuda/blas.h"
#include "libgenesis/cuda/caching_allocator.h"

namespace genesis::cuda {
namespace {

Allocator& device_allocator_of(int device) {
  return *device_allocator(device);
}

[[maybe_unused]] const bool registered = [] {
  register_device_allocators(DeviceType::cuda, &device_allocator_of);
  kernels::cuda::set_gemm_resources_lender(&lend_gemm_resources);
  return true;
}();

}  // namespace
}  // namespace genesis::cuda

extern "C" const bool genesis_cuda_backend_anchor = true;
