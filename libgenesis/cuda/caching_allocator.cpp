#include "libgenesis/cuda/caching_allocator.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/cuda/device_guard.h"
#include "libgenesis/cuda/runtime.h"

namespace genesis::cuda {

namespace {

constexpr size_t kMinBlockSize = 512;           // every block size is a multiple of this
constexpr size_t kSmallSize = size_t{1} << 20;  // largest request served by the small pool
constexpr size_t kSegmentSize = size_t{2} << 20;
// Large blocks above this are never split (see the header): splitting them is what strands memory.
constexpr size_t kMaxSplitSize = size_t{32} << 20;
// Requests beyond this cannot be rounded without overflow; no device has that much memory.
constexpr size_t kMaxRequest = size_t{1} << 60;

size_t round_up(size_t n, size_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

std::string mib(size_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2) << static_cast<double>(bytes) / static_cast<double>(1 << 20) << " MiB";
  return os.str();
}

// The reserve cap from GENESIS_CUDA_MEMORY_FRACTION, or SIZE_MAX when unset.
size_t memory_limit_from_env(int device) {
  const char* text = std::getenv("GENESIS_CUDA_MEMORY_FRACTION");
  if (!text || !*text) return std::numeric_limits<size_t>::max();
  char* end = nullptr;
  errno = 0;
  double fraction = std::strtod(text, &end);
  GENESIS_CHECK(errno == 0 && *end == '\0' && fraction > 0.0 && fraction <= 1.0, ValueError,
                "GENESIS_CUDA_MEMORY_FRACTION must be a number in (0, 1], got '", text, "'");
  DeviceGuard guard(device);
  size_t free_bytes = 0, total_bytes = 0;
  GENESIS_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<size_t>(fraction * static_cast<double>(total_bytes));
}

}  // namespace

bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return std::less<cudaStream_t>()(a->stream, b->stream);
  if (a->size != b->size) return a->size < b->size;
  return std::less<char*>()(a->ptr, b->ptr);
}

CachingAllocator::CachingAllocator(int device) : device_(device), limit_(memory_limit_from_env(device)) {}

CachingAllocator::~CachingAllocator() {
  std::vector<Block*> blocks(small_pool_.begin(), small_pool_.end());
  blocks.insert(blocks.end(), large_pool_.begin(), large_pool_.end());
  for (const auto& [ptr, block] : active_) blocks.push_back(block);
  for (const PendingFree& pending : pending_) blocks.push_back(pending.block);
  int previous = 0;
  bool switched =
      cudaGetDevice(&previous) == cudaSuccess && previous != device_ && cudaSetDevice(device_) == cudaSuccess;
  for (Block* block : blocks) {
    if (!block->prev) cudaFree(block->ptr);  // a segment's first block holds the cudaMalloc pointer
  }
  for (Block* block : blocks) delete block;
  for (const PendingFree& pending : pending_)
    for (cudaEvent_t event : pending.events) cudaEventDestroy(event);
  for (cudaEvent_t event : spare_events_) cudaEventDestroy(event);
  if (switched) cudaSetDevice(previous);
}

void* CachingAllocator::allocate(size_t nbytes) {
  DeviceGuard guard(device_);
  cudaStream_t stream = current_stream();
  char* ptr = nullptr;
  size_t block_size = 0;
  {
    std::lock_guard lock(mutex_);
    if (nbytes > kMaxRequest) throw_out_of_memory(nbytes);
    size_t size = round_up(std::max<size_t>(nbytes, 1), kMinBlockSize);
    bool small = size <= kSmallSize;
    if (!pending_.empty()) process_pending_frees(false);
    Block* block = take_cached_block(stream, size, small);
    if (block) {
      ++stats_.num_cache_hits;
    } else {
      block = new_segment(stream, size, small, nbytes);
    }
    split(block, size);
    block->allocated = true;
    active_.emplace(block->ptr, block);
    stats_.allocated += block->size;
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
    ++stats_.num_allocs;
    ptr = block->ptr;
    block_size = block->size;
  }
  if (poison_.load()) GENESIS_CUDA_CHECK(cudaMemsetAsync(ptr, 0xFF, block_size, stream));
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t) {
  std::lock_guard lock(mutex_);
  auto it = active_.find(ptr);
  GENESIS_CHECK(it != active_.end(), ValueError, "CUDA caching allocator of cuda:", device_, ": pointer ", ptr,
                " was not allocated here or was already freed");
  Block* block = it->second;
  active_.erase(it);
  stats_.allocated -= block->size;
  ++stats_.num_frees;
  if (block->other_streams.empty()) {
    free_block(block);
    return;
  }
  DeviceGuard guard(device_);  // events belong to the device of the streams they are recorded on
  PendingFree pending{block, {}};
  for (cudaStream_t stream : block->other_streams) {
    cudaEvent_t event = nullptr;
    if (spare_events_.empty()) {
      GENESIS_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    } else {
      event = spare_events_.back();
      spare_events_.pop_back();
    }
    GENESIS_CUDA_CHECK(cudaEventRecord(event, stream));
    pending.events.push_back(event);
  }
  block->other_streams.clear();
  stats_.pending_free += block->size;
  pending_.push_back(std::move(pending));
}

void CachingAllocator::record_stream(void* ptr, cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  auto it = active_.find(ptr);
  GENESIS_CHECK(it != active_.end(), ValueError, "record_stream: pointer ", ptr, " is not a live block of cuda:",
                device_);
  Block* block = it->second;
  if (stream == block->stream) return;
  if (std::find(block->other_streams.begin(), block->other_streams.end(), stream) == block->other_streams.end())
    block->other_streams.push_back(stream);
}

void CachingAllocator::free_block(Block* block) {
  block->allocated = false;
  Pool& pool = pool_of(block->small);
  if (Block* prev = block->prev; prev && !prev->allocated) {
    pool.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (prev->next) prev->next->prev = prev;
    delete block;
    block = prev;
  }
  if (Block* next = block->next; next && !next->allocated) {
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (block->next) block->next->prev = block;
    delete next;
  }
  pool.insert(block);
}

void CachingAllocator::process_pending_frees(bool wait) {
  std::erase_if(pending_, [&](PendingFree& pending) {
    for (cudaEvent_t event : pending.events) {
      cudaError_t status = wait ? cudaEventSynchronize(event) : cudaEventQuery(event);
      if (status == cudaErrorNotReady) return false;
      GENESIS_CUDA_CHECK(status);
    }
    spare_events_.insert(spare_events_.end(), pending.events.begin(), pending.events.end());
    stats_.pending_free -= pending.block->size;
    free_block(pending.block);
    return true;
  });
}

CachingAllocator::Block* CachingAllocator::take_cached_block(cudaStream_t stream, size_t size, bool small) {
  Pool& pool = pool_of(small);
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);  // the smallest cached block of this stream that fits
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  // Every later block is larger, so when the best fit is an oversize block that is too loose, all are.
  if (!small && block->size > kMaxSplitSize && (size <= kMaxSplitSize || block->size - size > size / 8)) return nullptr;
  pool.erase(it);
  return block;
}

CachingAllocator::Block* CachingAllocator::new_segment(cudaStream_t stream, size_t size, bool small, size_t requested) {
  size_t segment = small ? kSegmentSize : round_up(size, kSegmentSize);
  void* ptr = nullptr;
  bool retried = false;
  while (true) {
    const bool within_limit = stats_.reserved + segment <= limit_;
    if (within_limit) {
      cudaError_t err = cudaMalloc(&ptr, segment);
      if (err == cudaSuccess) break;
      if (err != cudaErrorMemoryAllocation) throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
      cudaGetLastError();  // out of memory is not sticky: clear it before trying again
    }
    if (retried) throw_out_of_memory(requested);
    // Over the cap, the largest free segments make room; when the driver itself is out of memory, all go.
    release_free_segments(within_limit ? std::numeric_limits<size_t>::max() : stats_.reserved + segment - limit_);
    retried = true;
  }
  ++stats_.num_cuda_mallocs;
  stats_.reserved += segment;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  auto* block = new Block;
  block->ptr = static_cast<char*>(ptr);
  block->size = segment;
  block->stream = stream;
  block->small = small;
  return block;
}

void CachingAllocator::split(Block* block, size_t size) {
  if (!block->small && block->size > kMaxSplitSize) return;
  size_t rest_size = block->size - size;
  // A large-pool rest of at most 1 MiB could only serve small requests, which never use this pool.
  bool worth_keeping = block->small ? rest_size >= kMinBlockSize : rest_size > kSmallSize;
  if (!worth_keeping) return;
  auto* rest = new Block;
  rest->ptr = block->ptr + size;
  rest->size = rest_size;
  rest->stream = block->stream;
  rest->small = block->small;
  rest->prev = block;
  rest->next = block->next;
  if (rest->next) rest->next->prev = rest;
  block->next = rest;
  block->size = size;
  pool_of(rest->small).insert(rest);
}

void CachingAllocator::release_free_segments(size_t bytes) {
  process_pending_frees(true);
  std::vector<Block*> whole;
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (Block* block : *pool)
      if (!block->prev && !block->next) whole.push_back(block);
  }
  if (whole.empty()) return;
  std::sort(whole.begin(), whole.end(), [](const Block* a, const Block* b) { return a->size > b->size; });
  // Cached blocks may still be read by kernels enqueued before they were freed.
  GENESIS_CUDA_CHECK(cudaDeviceSynchronize());
  size_t released = 0;
  for (Block* block : whole) {
    if (released >= bytes) break;
    pool_of(block->small).erase(block);
    GENESIS_CUDA_CHECK(cudaFree(block->ptr));
    stats_.reserved -= block->size;
    released += block->size;
    delete block;
  }
}

void CachingAllocator::empty_cache() {
  DeviceGuard guard(device_);
  std::lock_guard lock(mutex_);
  release_free_segments(std::numeric_limits<size_t>::max());
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  MemoryStats stats = stats_;
  stats.inactive_split = inactive_split_bytes();
  return stats;
}

size_t CachingAllocator::inactive_split_bytes() const {
  // Free neighbours coalesce, so a cached block with a neighbour shares its segment with a live one.
  size_t bytes = 0;
  for (const Pool* pool : {&small_pool_, &large_pool_}) {
    for (const Block* block : *pool)
      if (block->prev || block->next) bytes += block->size;
  }
  return bytes;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

void CachingAllocator::throw_out_of_memory(size_t requested) const {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) cudaGetLastError();
  std::ostringstream os;
  os << "CUDA out of memory: requested " << mib(requested) << " on cuda:" << device_ << "; allocated "
     << mib(stats_.allocated) << ", reserved " << mib(stats_.reserved) << ", peak allocated "
     << mib(stats_.peak_allocated) << ", device free " << mib(free_bytes) << " of " << mib(total_bytes);
  if (limit_ != std::numeric_limits<size_t>::max())
    os << ", limit " << mib(limit_) << " (GENESIS_CUDA_MEMORY_FRACTION)";
  os << ", stranded between live blocks " << mib(inactive_split_bytes());
  os << "; " << stats_.num_allocs << " allocs, " << stats_.num_frees << " frees, " << stats_.num_cuda_mallocs
     << " cudaMallocs, " << stats_.num_cache_hits << " cache hits";
  throw Error(os.str());
}

namespace {

CachingAllocator& allocator_of(int device) {
  static const int count = device_count();
  static std::unique_ptr<std::atomic<CachingAllocator*>[]> allocators(
      new std::atomic<CachingAllocator*>[count > 0 ? count : 1]());
  static std::mutex create_mutex;
  GENESIS_CHECK(count > 0, DeviceError, "no CUDA device is available");
  GENESIS_CHECK(device >= 0 && device < count, DeviceError, "device cuda:", device, " does not exist: ", count,
                " CUDA device(s) visible");
  CachingAllocator* allocator = allocators[device].load(std::memory_order_acquire);
  if (allocator) return *allocator;
  std::lock_guard lock(create_mutex);
  allocator = allocators[device].load(std::memory_order_relaxed);
  if (!allocator) {
    // Never destroyed: storages held by static objects may be freed after main returns.
    allocator = new CachingAllocator(device);
    allocators[device].store(allocator, std::memory_order_release);
  }
  return *allocator;
}

int resolve(int device) {
  return device < 0 ? current_device() : device;
}

}  // namespace

Allocator* device_allocator(int device) {
  return &allocator_of(device);
}

MemoryStats memory_stats(int device) {
  return allocator_of(resolve(device)).stats();
}

void reset_peak_stats(int device) {
  allocator_of(resolve(device)).reset_peak_stats();
}

void empty_cache(int device) {
  allocator_of(resolve(device)).empty_cache();
}

void record_stream(void* ptr, int device, cudaStream_t stream) {
  allocator_of(resolve(device)).record_stream(ptr, stream);
}

void set_poison_allocations(bool on, int device) {
  allocator_of(resolve(device)).set_poison_allocations(on);
}

}  // namespace genesis::cuda
