#include "libgenesis/core/allocator.h"

#include <array>
#include <cstdlib>
#include <new>

#include "libgenesis/core/error.h"
#include "libgenesis/core/storage.h"
#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/caching_allocator.h"
#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis {

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    constexpr size_t kAlign = 64;
    size_t rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
    if (!p) GENESIS_THROW(Error, "out of host memory: failed to allocate ", nbytes, " bytes");
    return p;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
};

std::array<Allocator*, 2>& registry() {
  static CpuAllocator cpu;
  static std::array<Allocator*, 2> table{&cpu, nullptr};
  return table;
}

}  // namespace

Allocator& allocator_for(Device device) {
#if GENESIS_WITH_CUDA
  // Looked up directly rather than registered: static registration is unreliable in a static library.
  if (device.is_cuda()) {
    int count = cuda::device_count();
    GENESIS_CHECK(count > 0, DeviceError, "no CUDA device is available (", device.str(), " was requested)");
    GENESIS_CHECK(device.index < count, DeviceError, "device ", device.str(), " does not exist: ", count,
                  " CUDA device(s) visible");
    return *cuda::device_allocator(device.index);
  }
#endif
  Allocator* a = registry()[static_cast<size_t>(device.type)];
  GENESIS_CHECK(a != nullptr, DeviceError, "device ", device.str(),
                " is not available: this build of genesis has no CUDA backend (rebuild with -DGENESIS_CUDA=ON)");
  return *a;
}

void register_allocator(DeviceType type, Allocator* allocator) { registry()[static_cast<size_t>(type)] = allocator; }

Storage::Storage(size_t nbytes, Device device)
    : data_(allocator_for(device).allocate(nbytes)), nbytes_(nbytes), device_(device) {}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release)
    : data_(data), nbytes_(nbytes), device_(device), release_(std::move(release)) {}

Storage::~Storage() {
  if (release_) {
    release_(data_);
  } else if (data_) {
    allocator_for(device_).deallocate(data_, nbytes_);
  }
}

}  // namespace genesis
