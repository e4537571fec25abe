#pragma once
// Stream-ordered caching allocator for CUDA device memory, one per device.
//
// Sizes: requests are rounded up to a multiple of 512 B. Blocks of up to 1 MiB come from the
// small pool, carved out of 2 MiB segments; larger blocks come from the large pool, whose
// segments are the request rounded up to 2 MiB (so freed large segments fit a range of later
// requests). A cached block is found by best fit in a set ordered by (stream, size, address)
// and split when the rest is worth keeping (any rest in the small pool, more than 1 MiB in the
// large one); freeing merges a block with its free neighbours of the same segment.
// Oversize blocks (above 32 MiB, PyTorch's max_split_size idea) are never split: they serve
// only requests above 32 MiB that leave at most an eighth of the request unused. A small live
// block inside a big segment would otherwise strand the rest, which under a cap no later big
// request can use and which cannot go back to the driver.
//
// Streams: a block belongs to the stream that was current when it was allocated. Freeing
// returns it to that stream's pool without synchronizing, and only allocations on the same
// stream reuse it, so the next user is ordered after all work the previous one enqueued.
// A block also used on other streams is marked with record_stream(); when it is freed, an
// event is recorded on each of those streams and the block returns to the pool only once all
// of them have completed (checked without blocking at the next allocation).
//
// Limits: GENESIS_CUDA_MEMORY_FRACTION=f, f in (0, 1], caps the reserved bytes at f times the
// device's total memory. When a segment cannot be obtained, the allocator releases unused
// segments (largest first, as many as the cap needs; all when cudaMalloc fails) and tries once
// more, then throws genesis::Error
// ("CUDA out of memory: ...") with the request and the statistics.
//
// Nothing here touches the GPU until the first CUDA tensor of a device is allocated.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "libgenesis/core/allocator.h"

namespace genesis::cuda {

struct MemoryStats {
  size_t allocated = 0;       // bytes in blocks handed out (rounded sizes)
  size_t reserved = 0;        // bytes held from cudaMalloc: handed out plus cached
  size_t peak_allocated = 0;  // highest `allocated` since creation or reset_peak_stats()
  uint64_t num_allocs = 0;
  uint64_t num_frees = 0;
  uint64_t num_cuda_mallocs = 0;  // segments obtained from the driver
  uint64_t num_cache_hits = 0;    // allocations served from a cached block
  size_t peak_reserved = 0;       // highest `reserved` since creation or reset_peak_stats()
  // Cached bytes in segments that also hold live blocks: they serve only requests that fit
  // between those blocks and cannot go back to the driver (PyTorch's "inactive split").
  size_t inactive_split = 0;
  size_t pending_free = 0;  // freed bytes still waiting for another stream's work (record_stream)

  size_t cached() const { return reserved - allocated; }
  // Share of the cache stranded between live blocks, in [0, 1].
  double fragmentation() const {
    return reserved == allocated ? 0.0 : static_cast<double>(inactive_split) / static_cast<double>(cached());
  }
};

class CachingAllocator final : public Allocator {
 public:
  // Reads GENESIS_CUDA_MEMORY_FRACTION (throws ValueError when it is malformed).
  explicit CachingAllocator(int device);
  // Returns every segment to the driver; blocks still handed out become invalid.
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block on this device for the current stream of this device.
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  // Declares that work on `stream` uses the block at ptr (allocated here, on another stream), so
  // that freeing it waits for that work before another allocation reuses the memory.
  void record_stream(void* ptr, cudaStream_t stream);

  // Waits for the device, then returns every fully free segment to the driver.
  void empty_cache();
  MemoryStats stats() const;
  void reset_peak_stats();
  int device() const { return device_; }
  // Cap on reserved bytes (SIZE_MAX when GENESIS_CUDA_MEMORY_FRACTION is unset).
  size_t memory_limit() const { return limit_; }
  // Testing aid: when on, every block handed out is first filled with 0xFF bytes (NaN in every
  // floating dtype, -1 in integers), so output elements a kernel leaves unwritten show up.
  void set_poison_allocations(bool on) { poison_.store(on); }

 private:
  struct Block {
    char* ptr = nullptr;
    size_t size = 0;
    cudaStream_t stream = nullptr;
    bool small = false;
    bool allocated = false;
    Block* prev = nullptr;  // neighbours within the same segment
    Block* next = nullptr;
    std::vector<cudaStream_t> other_streams;  // from record_stream, until the block is freed
  };
  struct PendingFree {
    Block* block;
    std::vector<cudaEvent_t> events;
  };
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;

  Pool& pool_of(bool small) { return small ? small_pool_ : large_pool_; }
  Block* take_cached_block(cudaStream_t stream, size_t size, bool small);
  Block* new_segment(cudaStream_t stream, size_t size, bool small, size_t requested);
  void split(Block* block, size_t size);
  void free_block(Block* block);
  // Returns pending blocks whose events have completed to their pool (all of them, waiting for
  // the events, when `wait` is set).
  void process_pending_frees(bool wait);
  // Returns fully free segments to the driver, largest first, until at least `bytes` went back.
  void release_free_segments(size_t bytes);
  size_t inactive_split_bytes() const;  // caller holds mutex_
  [[noreturn]] void throw_out_of_memory(size_t requested) const;

  int device_;
  size_t limit_;
  std::atomic<bool> poison_{false};
  mutable std::mutex mutex_;
  Pool small_pool_, large_pool_;
  std::unordered_map<void*, Block*> active_;
  std::vector<PendingFree> pending_;
  std::vector<cudaEvent_t> spare_events_;
  MemoryStats stats_;
};

// The allocator of `device` (created on first use, never destroyed); throws DeviceError for a
// device that does not exist.
Allocator* device_allocator(int device);
// Statistics and cache control of a device's allocator; device -1 means the current device.
MemoryStats memory_stats(int device = -1);
void reset_peak_stats(int device = -1);
void empty_cache(int device = -1);
// The allocator's record_stream for the device memory at ptr (see CachingAllocator).
void record_stream(void* ptr, int device, cudaStream_t stream);
void set_poison_allocations(bool on, int device = -1);

}  // namespace genesis::cuda
