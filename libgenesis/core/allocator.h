#pragma once
// Storage memory comes from an Allocator chosen by device. The CPU allocator hands out
// 64-byte aligned blocks; the CUDA caching allocator (libgenesis/cuda) registers itself
// for DeviceType::cuda when the CUDA backend is built.
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
void register_allocator(DeviceType type, Allocator* allocator);

}  // namespace genesis
