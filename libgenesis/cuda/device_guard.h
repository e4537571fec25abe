#pragma once
// Makes a CUDA device current for a scope and restores the previous one on exit, so
// that runtime calls which act on "the current device" (cudaMalloc, stream creation,
// kernel launches) reach the intended one.
#include <cuda_runtime_api.h>

#include "libgenesis/cuda/runtime.h"

namespace genesis::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    GENESIS_CUDA_CHECK(cudaGetDevice(&previous_));
    if (device != previous_) GENESIS_CUDA_CHECK(cudaSetDevice(device));
    current_ = device;
  }
  ~DeviceGuard() {
    if (current_ != previous_) cudaSetDevice(previous_);  // cannot throw from a destructor
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  int current_ = 0;
};

// The current device of the calling thread.
inline int current_device() {
  int device = 0;
  GENESIS_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

}  // namespace genesis::cuda
