#pragma once
// Storage memory comes from an Allocator chosen by device. The CPU allocator hands out
// 64-byte aligned blocks (caching large ones). Other device types are served by the
// allocators their backend registers (the CUDA runtime registers its caching allocators,
// libgenesis/cuda/caching_allocator.cpp), so the core depends on no backend.
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

// A backend's allocator of device `index`; throws DeviceError naming the device when it
// does not exist.
using DeviceAllocatorLookup = Allocator& (*)(int index);
// Called by a backend once, before its first device tensor (the CUDA runtime does it when
// the program starts; the link keeps its object file, see libgenesis/CMakeLists.txt).
void register_device_allocators(DeviceType type, DeviceAllocatorLookup lookup);

}  // namespace genesis
