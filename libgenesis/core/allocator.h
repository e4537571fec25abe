#pragma once
// Storage memory comes from an Allocator chosen by device. The CPU allocator hands out
// 64-byte aligned blocks (caching large ones); CUDA devices are served by their caching
// allocator (libgenesis/cuda/caching_allocator.h), looked up directly when the CUDA
// backend is built.
#include <cstddef>
#include <memory>

#include "libgenesis/core/device.h"

namespace genesis {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for nbytes (nbytes may be 0: a valid, unique pointer is still returned).
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
};

// The allocator that serves `device`; throws DeviceError when that backend is not built
// or the device does not exist.
Allocator& allocator_for(Device device);

}  // namespace genesis
