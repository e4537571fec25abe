#include "libgenesis/core/allocator.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string_view>
#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/core/host_memory.h"
#include "libgenesis/core/storage.h"
#if GENESIS_WITH_CUDA
#endif

namespace genesis {

namespace {

// Host memory. Large blocks are cached after free and handed out again for the same size
// class: a training step allocates the same activation sizes every iteration, and returning
// them to the OS (glibc unmaps blocks this large) would make every step pay page faults to
// touch fresh pages again. Small blocks go straight to malloc, which is fast for them.
// Blocks of 2 MiB and more start on a 2 MiB boundary and ask for transparent huge pages
// (MADV_HUGEPAGE; hosts set to "madvise" give them only on request): a kernel streaming a
// tensor then needs one TLB entry per 2 MiB instead of per 4 KiB, which matters most in VMs,
// where each TLB miss walks two page tables (conv2d fwd+bwd cases 8-24% faster on the GPU
// host's Xeon, docs/benchmarks.md). The first touch of such a block may compact memory to
// find a huge page (the kernel's default defrag setting does for advised ranges); cached
// blocks pay that once. GENESIS_CPU_HUGEPAGES=0 turns the advice off.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlign = 64;
  static constexpr size_t kCachedFrom = size_t{1} << 20;      // blocks of 1 MiB and more are cached
  static constexpr size_t kGranule = size_t{64} << 10;        // size classes of 64 KiB
  static constexpr size_t kMaxCachedBytes = size_t{2} << 30;  // cap on idle cached memory
  static constexpr size_t kHugePage = size_t{2} << 20;        // x86-64's transparent huge page

  ~CpuAllocator() override {
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
  }

  void* allocate(size_t nbytes) override {
    void* p = allocate_block(nbytes);
    const size_t now = allocated_.fetch_add(nbytes, std::memory_order_relaxed) + nbytes;
    size_t peak = peak_.load(std::memory_order_relaxed);
    // A failed exchange reloads `peak` (another thread's higher one ends the loop).
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) continue;
    return p;
  }

  HostMemoryStats stats() const {
    return {allocated_.load(std::memory_order_relaxed), peak_.load(std::memory_order_relaxed)};
  }
  void reset_peak() { peak_.store(allocated_.load(std::memory_order_relaxed), std::memory_order_relaxed); }

  // Returns every idle cached block to the system.
  void empty_cache() {
    std::lock_guard lock(mutex_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_bytes_ = 0;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    allocated_.fetch_sub(nbytes, std::memory_order_relaxed);
    if (nbytes >= kCachedFrom) {
      size_t rounded = (nbytes + kGranule - 1) / kGranule * kGranule;
      std::lock_guard lock(mutex_);
      if (cached_bytes_ + rounded <= kMaxCachedBytes) {
        free_[rounded].push_back(ptr);
        cached_bytes_ += rounded;
        return;
      }
    }
    std::free(ptr);
  }

 private:
  void* allocate_block(size_t nbytes) {
    if (nbytes >= kCachedFrom) {
      size_t rounded = (nbytes + kGranule - 1) / kGranule * kGranule;
      {
        std::lock_guard lock(mutex_);
        auto it = free_.find(rounded);
        if (it != free_.end() && !it->second.empty()) {
          void* p = it->second.back();
          it->second.pop_back();
          cached_bytes_ -= rounded;
          return p;
        }
      }
      return raw_allocate(rounded, nbytes);
    }
    size_t rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
    return raw_allocate(rounded == 0 ? kAlign : rounded, nbytes);
  }

  // On failure, frees the idle cache and tries once more before giving up.
  void* raw_allocate(size_t rounded, size_t requested) {
    // posix_memalign, not aligned_alloc: the size need not be a multiple of the alignment
    // (sizes go in 64 KiB classes; AddressSanitizer rejects such an aligned_alloc).
    const size_t align = rounded >= kHugePage ? kHugePage : kAlign;
    void* p = nullptr;
    if (::posix_memalign(&p, align, rounded) != 0) {
      empty_cache();
      if (::posix_memalign(&p, align, rounded) != 0) p = nullptr;
    }
    if (!p) GENESIS_THROW(Error, "out of host memory: failed to allocate ", requested, " bytes");
    // Advice only: where the kernel has no huge pages to give (or refuses), 4 KiB pages serve.
    if (align == kHugePage && huge_pages_wanted()) (void)::madvise(p, rounded / kHugePage * kHugePage, MADV_HUGEPAGE);
    return p;
  }

  static bool huge_pages_wanted() {
    static const bool wanted = [] {
      const char* value = std::getenv("GENESIS_CPU_HUGEPAGES");
      return value == nullptr || std::string_view(value) != "0";
    }();
    return wanted;
  }

  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  size_t cached_bytes_ = 0;
  std::atomic<size_t> allocated_{0}, peak_{0};
};

CpuAllocator& cpu_allocator() {
  static CpuAllocator allocator;
  return allocator;
}

// One lookup per device type other than the CPU; written once at start-up, read on every
// allocation.
std::atomic<DeviceAllocatorLookup>& lookup_slot(DeviceType type) {
  static std::atomic<DeviceAllocatorLookup> slots[2]{};  // DeviceType::cpu, DeviceType::cuda
  return slots[static_cast<size_t>(type)];
}

}  // namespace

HostMemoryStats host_memory_stats() {
  return cpu_allocator().stats();
}

void reset_host_peak_memory() {
  cpu_allocator().reset_peak();
}

void register_device_allocators(DeviceType type, DeviceAllocatorLookup lookup) {
  GENESIS_CHECK(type != DeviceType::cpu, ValueError, "the CPU allocator is built in");
  lookup_slot(type).store(lookup, std::memory_order_release);
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  DeviceAllocatorLookup lookup = lookup_slot(device.type).load(std::memory_order_acquire);
  GENESIS_CHECK(lookup != nullptr, DeviceError, "device ", device.str(),
                " is not available: this build of genesis has no CUDA backend (rebuild with -DGENESIS_CUDA=ON)");
  return lookup(device.index);
}

Storage::Storage(size_t nbytes, Device device)
    : data_(allocator_for(device).allocate(nbytes)), nbytes_(nbytes), device_(device) {}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release)
    : data_(data), nbytes_(nbytes), device_(device), release_(std::move(release)) {}

void Storage::release() {
  GENESIS_CHECK(!release_, ValueError, "Storage::release: wrapped memory cannot be released");
  if (data_) allocator_for(device_).deallocate(data_, nbytes_);
  data_ = nullptr;
}

void Storage::restore() {
  GENESIS_CHECK(!release_, ValueError, "Storage::restore: wrapped memory cannot be restored");
  if (!data_ && nbytes_ > 0) data_ = allocator_for(device_).allocate(nbytes_);
}

Storage::~Storage() {
  if (release_) {
    release_(data_);
  } else if (data_) {
    allocator_for(device_).deallocate(data_, nbytes_);
  }
}

}  // namespace genesis
