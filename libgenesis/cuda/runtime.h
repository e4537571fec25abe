#pragma once
// CUDA runtime services for the op layer: device queries, the current stream, copies
// between host and device, and error checking. Compiled only when the CUDA backend is
// built (GENESIS_WITH_CUDA).
#include <cuda_runtime_api.h>

#include <cstddef>

#include "libgenesis/core/device.h"

namespace genesis::cuda {

// True when the driver answers and at least one device is present (never throws).
bool is_available();
int device_count();
// The stream ops enqueue on for the current device (a non-blocking stream per device,
// created on first use). Nothing in the op layer synchronizes it.
cudaStream_t current_stream();
// Replaces the current stream for this thread (nullptr restores the default).
void set_current_stream(cudaStream_t stream);
// Waits for all work on the current stream.
void synchronize();
// Copies nbytes between any two of host/device memory. Enqueued on the current stream;
// returns after the copy completes when the destination is host memory.
void memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);

}  // namespace genesis::cuda

#define GENESIS_CUDA_CHECK(expr)                                                  \
  do {                                                                            \
    cudaError_t genesis_err_ = (expr);                                            \
    if (genesis_err_ != cudaSuccess) [[unlikely]]                                 \
      ::genesis::cuda::throw_cuda_error(genesis_err_, #expr, __FILE__, __LINE__); \
  } while (0)
