#pragma once
// A reference-counted block of device memory. Tensors (and their views) share one.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "libgenesis/core/device.h"

namespace genesis {

class Storage {
 public:
  // Allocates nbytes on `device` through allocator_for(device).
  Storage(size_t nbytes, Device device);
  // Wraps memory owned elsewhere (a memory map, a host buffer); `release` runs on destruction.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  // Bumped by every in-place write; autograd compares it with the value recorded when a
  // tensor was saved for backward, so a modified saved tensor is an error, not a wrong gradient.
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // Sharded parameters (ZeRO-3) come and go while the tensors that view them stay: release()
  // hands the memory back to the allocator (data() is null until restore(); reading a view
  // then is the caller's bug) and restore() takes nbytes() again, contents undefined. The
  // version is untouched: refilling the same values keeps saved-for-backward views valid.
  // Only for storage this class allocated (not wrapped memory).
  void release();
  void restore();
  bool resident() const { return data_ != nullptr || nbytes_ == 0; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::function<void(void*)> release_;
  uint64_t version_ = 0;
};

}  // namespace genesis
