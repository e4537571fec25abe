// The CUDA caching allocator: cache hits, splitting and coalescing, stream ownership,
// statistics, empty_cache, out-of-memory handling and GENESIS_CUDA_MEMORY_FRACTION. Each test
// uses its own allocator instance so the counts are its own. Skipped without a GPU.
#if GENESIS_WITH_CUDA
#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "libgenesis/cuda/caching_allocator.h"
#include "libgenesis/cuda/runtime.h"
#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;
using Catch::Matchers::Contains;
using cuda::CachingAllocator;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

char* allocate(CachingAllocator& allocator, size_t nbytes) {
  return static_cast<char*>(allocator.allocate(nbytes));
}

}  // namespace

TEST_CASE("CUDA allocator reuses freed blocks", "[cuda]") {
  if (!cuda_ready()) return;
  CachingAllocator allocator(0);
  char* p = allocate(allocator, 1000);
  allocator.deallocate(p, 1000);
  cuda::MemoryStats before = allocator.stats();
  char* q = allocate(allocator, 1000);
  cuda::MemoryStats after = allocator.stats();
  CHECK(q == p);
  CHECK(after.num_cuda_mallocs == before.num_cuda_mallocs);
  CHECK(after.num_cache_hits == before.num_cache_hits + 1);
  allocator.deallocate(q, 1000);

  // Zero-byte requests still get distinct, valid pointers.
  char* z1 = allocate(allocator, 0);
  char* z2 = allocate(allocator, 0);
  CHECK(z1 != z2);
  allocator.deallocate(z1, 0);
  allocator.deallocate(z2, 0);
}

TEST_CASE("CUDA allocator splits segments and coalesces free neighbours", "[cuda]") {
  if (!cuda_ready()) return;
  CachingAllocator allocator(0);
  // Small requests are rounded to 512 B and carved out of one 2 MiB segment.
  char* a = allocate(allocator, 4000);
  char* b = allocate(allocator, 4096);
  char* c = allocate(allocator, 1);
  CHECK(b == a + 4096);
  CHECK(c == b + 4096);
  cuda::MemoryStats s = allocator.stats();
  CHECK(s.num_cuda_mallocs == 1);
  CHECK(s.reserved == 2 * kMiB);
  CHECK(s.allocated == 4096 + 4096 + 512);
  // Free the outer blocks first, then the middle one: all three merge back into the segment,
  // so a 1 MiB request starts at its beginning again.
  allocator.deallocate(a, 4000);
  allocator.deallocate(c, 1);
  allocator.deallocate(b, 4096);
  char* big = allocate(allocator, kMiB);
  CHECK(big == a);
  CHECK(allocator.stats().num_cuda_mallocs == 1);
  allocator.deallocate(big, kMiB);

  // Large requests: segments rounded to 2 MiB; a large cached block is split when the rest
  // exceeds 1 MiB, and the rest serves the next request.
  char* large = allocate(allocator, 10 * kMiB);
  CHECK(allocator.stats().reserved == 12 * kMiB);
  allocator.deallocate(large, 10 * kMiB);
  char* first = allocate(allocator, 3 * kMiB);
  char* second = allocate(allocator, 5 * kMiB);
  CHECK(first == large);
  CHECK(second == large + 3 * kMiB);
  CHECK(allocator.stats().num_cuda_mallocs == 2);
  allocator.deallocate(first, 3 * kMiB);
  allocator.deallocate(second, 5 * kMiB);
  CHECK(allocate(allocator, 10 * kMiB) == large);  // coalesced again
  allocator.deallocate(large, 10 * kMiB);
}

TEST_CASE("CUDA allocator keeps blocks with their stream", "[cuda]") {
  if (!cuda_ready()) return;
  CachingAllocator allocator(0);
  cudaStream_t side = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
  char* on_default = allocate(allocator, 2048);
  allocator.deallocate(on_default, 2048);
  cuda::set_current_stream(side);
  char* on_side = allocate(allocator, 2048);
  CHECK(on_side != on_default);  // the freed block belongs to the default stream
  CHECK(allocator.stats().num_cuda_mallocs == 2);
  allocator.deallocate(on_side, 2048);
  CHECK(allocate(allocator, 2048) == on_side);
  allocator.deallocate(on_side, 2048);
  cuda::set_current_stream(nullptr);
  CHECK(allocate(allocator, 2048) == on_default);
  allocator.deallocate(on_default, 2048);
  allocator.empty_cache();
  cudaStreamDestroy(side);
}

TEST_CASE("CUDA allocator statistics and empty_cache", "[cuda]") {
  if (!cuda_ready()) return;
  CachingAllocator allocator(0);
  // 3 MiB takes a 4 MiB segment whole: a rest of 1 MiB is not worth a block of its own.
  char* a = allocate(allocator, 3 * kMiB);
  char* b = allocate(allocator, 1000);
  cuda::MemoryStats s = allocator.stats();
  CHECK(s.allocated == 4 * kMiB + 1024);
  CHECK(s.peak_allocated == s.allocated);
  CHECK(s.reserved == 4 * kMiB + 2 * kMiB);
  CHECK(s.num_allocs == 2);
  allocator.deallocate(a, 3 * kMiB);
  s = allocator.stats();
  CHECK(s.allocated == 1024);
  CHECK(s.peak_allocated == 4 * kMiB + 1024);
  CHECK(s.num_frees == 1);
  allocator.reset_peak_stats();
  CHECK(allocator.stats().peak_allocated == 1024);
  // The large segment is entirely free and goes back; the small one still holds `b`.
  allocator.empty_cache();
  CHECK(allocator.stats().reserved == 2 * kMiB);
  allocator.deallocate(b, 1000);
  allocator.empty_cache();
  s = allocator.stats();
  CHECK(s.reserved == 0);
  CHECK(s.allocated == 0);
}

TEST_CASE("CUDA allocator reports peak reserved and stranded bytes", "[cuda]") {
  if (!cuda_ready()) return;
  CachingAllocator allocator(0);
  // Three blocks carved from one 2 MiB small segment; freeing the middle one strands it.
  char* a = allocate(allocator, 256 * 1024);
  char* b = allocate(allocator, 256 * 1024);
  char* c = allocate(allocator, 256 * 1024);
  allocator.deallocate(b, 256 * 1024);
  cuda::MemoryStats s = allocator.stats();
  CHECK(s.peak_reserved == 2 * kMiB);
  CHECK(s.cached() == 2 * kMiB - 512 * 1024);
  // Both the freed middle block and the segment's unused tail sit next to live blocks.
  CHECK(s.inactive_split == s.cached());
  CHECK(s.fragmentation() == 1.0);
  allocator.deallocate(a, 256 * 1024);
  allocator.deallocate(c, 256 * 1024);
  s = allocator.stats();
  CHECK(s.inactive_split == 0);  // one whole free segment again
  CHECK(s.fragmentation() == 0.0);
  allocator.empty_cache();
  CHECK(allocator.stats().reserved == 0);
  CHECK(allocator.stats().peak_reserved == 2 * kMiB);
  allocator.reset_peak_stats();
  CHECK(allocator.stats().peak_reserved == 0);
}

// A host callback that holds its stream until the test lets it go.
void CUDART_CB wait_for_release(void* flag) {
  auto* released = static_cast<std::atomic<bool>*>(flag);
  while (!released->load()) std::this_thread::yield();
}

TEST_CASE("CUDA allocator holds a block used on another stream until that work is done", "[cuda]") {
  if (!cuda_ready()) return;
  CachingAllocator allocator(0);
  cudaStream_t side = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
  char* block = allocate(allocator, 4096);
  allocator.record_stream(block, side);
  allocator.record_stream(block, side);  // recording twice is harmless
  std::atomic<bool> released{false};
  REQUIRE(cudaLaunchHostFunc(side, wait_for_release, &released) == cudaSuccess);
  allocator.deallocate(block, 4096);
  CHECK(allocator.stats().pending_free == 4096);
  char* next = allocate(allocator, 4096);
  CHECK(next != block);  // the side stream is still "using" it
  released.store(true);
  REQUIRE(cudaStreamSynchronize(side) == cudaSuccess);
  allocator.deallocate(next, 4096);
  char* reused = allocate(allocator, 4096);
  CHECK(allocator.stats().pending_free == 0);
  CHECK((reused == block || reused == next));
  allocator.deallocate(reused, 4096);
  allocator.empty_cache();
  CHECK(allocator.stats().reserved == 0);
  CHECK_THROWS_AS(allocator.record_stream(block, side), ValueError);
  cudaStreamDestroy(side);
}

TEST_CASE("CUDA allocator reports out of memory and stays usable", "[cuda][oom]") {
  if (!cuda_ready()) return;
  CachingAllocator allocator(0);
  char* kept = allocate(allocator, 1000);
  const size_t absurd = size_t{1} << 50;  // a petabyte
  CHECK_THROWS_AS(allocator.allocate(absurd), Error);
  CHECK_THROWS_WITH(allocator.allocate(absurd), Contains("CUDA out of memory: requested") && Contains("on cuda:0") &&
                                                    Contains("allocated") && Contains("reserved"));
  CHECK(cudaGetLastError() == cudaSuccess);
  char* after = allocate(allocator, 1000);
  CHECK(after != nullptr);
  allocator.deallocate(after, 1000);
  allocator.deallocate(kept, 1000);

  // Through tensors: the op fails cleanly and the next one works.
  CHECK_THROWS_WITH(empty({int64_t{1} << 48}, {.device = kCuda0}), Contains("out of memory"));
  CHECK(add(full({3}, 1.0, {.device = kCuda0}), 1.0).to_vector<float>() == std::vector<float>{2, 2, 2});
}

TEST_CASE("CUDA allocator honours GENESIS_CUDA_MEMORY_FRACTION", "[cuda][oom]") {
  if (!cuda_ready()) return;
  size_t free_bytes = 0, total_bytes = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  setenv("GENESIS_CUDA_MEMORY_FRACTION", "0.001", 1);
  CachingAllocator capped(0);
  unsetenv("GENESIS_CUDA_MEMORY_FRACTION");
  const size_t limit = capped.memory_limit();
  CHECK(limit == static_cast<size_t>(0.001 * static_cast<double>(total_bytes)));
  // Fill up to the cap with 2 MiB segments, then one more request fails.
  std::set<char*> held;
  while (capped.stats().reserved + 2 * kMiB <= limit) held.insert(allocate(capped, 2 * kMiB));
  CHECK_THROWS_WITH(capped.allocate(2 * kMiB), Contains("out of memory") && Contains("GENESIS_CUDA_MEMORY_FRACTION"));
  CHECK(capped.stats().reserved <= limit);
  for (char* p : held) capped.deallocate(p, 2 * kMiB);
  CHECK(allocate(capped, 2 * kMiB) != nullptr);  // cached memory serves it again

  setenv("GENESIS_CUDA_MEMORY_FRACTION", "1.5", 1);
  CHECK_THROWS_AS(CachingAllocator(0), ValueError);
  setenv("GENESIS_CUDA_MEMORY_FRACTION", "half", 1);
  CHECK_THROWS_AS(CachingAllocator(0), ValueError);
  unsetenv("GENESIS_CUDA_MEMORY_FRACTION");
  CHECK(CachingAllocator(0).memory_limit() == std::numeric_limits<size_t>::max());
}

// An allocator whose cap (GENESIS_CUDA_MEMORY_FRACTION) is about `cap` bytes.
static std::unique_ptr<CachingAllocator> capped_allocator(size_t cap) {
  size_t free_bytes = 0, total_bytes = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  setenv("GENESIS_CUDA_MEMORY_FRACTION",
         std::to_string(static_cast<double>(cap) / static_cast<double>(total_bytes)).c_str(), 1);
  auto allocator = std::make_unique<CachingAllocator>(0);
  unsetenv("GENESIS_CUDA_MEMORY_FRACTION");
  return allocator;
}

TEST_CASE("CUDA allocator keeps big segments whole so small blocks do not strand them", "[cuda][oom]") {
  if (!cuda_ready()) return;
  auto allocator = capped_allocator(300 * kMiB);
  // Splitting the freed 200 MiB segment for 4 MiB used to strand 196 MiB, and the next
  // 200 MiB request then ran out of memory under the cap.
  char* big = allocate(*allocator, 200 * kMiB);
  allocator->deallocate(big, 200 * kMiB);
  char* small = allocate(*allocator, 4 * kMiB);
  CHECK((small < big || small >= big + 200 * kMiB));
  char* again = allocate(*allocator, 200 * kMiB);
  CHECK(again == big);
  CHECK(allocator->stats().reserved == 204 * kMiB);
  // An oversize block serves only requests close to its size.
  allocator->deallocate(again, 200 * kMiB);
  char* medium = allocate(*allocator, 40 * kMiB);
  CHECK((medium < big || medium >= big + 200 * kMiB));
  // 100 MiB more would pass the cap: the free 200 MiB segment goes back, the live ones stay.
  char* hundred = allocate(*allocator, 100 * kMiB);
  CHECK(allocator->stats().reserved == 144 * kMiB);
  allocator->deallocate(small, 4 * kMiB);
  allocator->deallocate(medium, 40 * kMiB);
  allocator->deallocate(hundred, 100 * kMiB);
}

TEST_CASE("CUDA allocator survives a random live set near its cap", "[cuda][oom]") {
  if (!cuda_ready()) return;
  // genesis bench alloc's pressure scenario scaled down: live blocks of 1 to 64 MiB
  // (log-uniform) held at up to 80% of a 1 GiB cap, one freed and one allocated per step.
  const size_t cap = size_t{1} << 30, live_cap = cap * 8 / 10;
  auto allocator = capped_allocator(cap);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> log_size(std::log(1.0 * kMiB), std::log(64.0 * kMiB));
  std::vector<std::pair<char*, size_t>> live;
  size_t live_bytes = 0;
  auto draw = [&] {
    const auto bytes = static_cast<size_t>(std::exp(log_size(rng)));
    return std::min(bytes, live_cap - live_bytes);
  };
  while (live_bytes + 2 * kMiB < live_cap) {
    const size_t n = draw();
    live.push_back({allocate(*allocator, n), n});
    live_bytes += n;
  }
  for (int step = 0; step < 3000; ++step) {
    const size_t k = rng() % live.size();
    allocator->deallocate(live[k].first, live[k].second);
    live_bytes -= live[k].second;
    const size_t n = std::max<size_t>(draw(), 512);
    REQUIRE_NOTHROW(live[k] = {allocate(*allocator, n), n});
    live_bytes += n;
  }
  CHECK(allocator->stats().reserved <= allocator->memory_limit());
  for (auto [p, n] : live) allocator->deallocate(p, n);
}

TEST_CASE("CUDA allocator poisons blocks on request", "[cuda]") {
  if (!cuda_ready()) return;
  CachingAllocator allocator(0);
  allocator.set_poison_allocations(true);
  const size_t n = 37;
  auto* p = static_cast<float*>(allocator.allocate(n * sizeof(float)));
  std::vector<float> host(n, 0.0f);
  cuda::memcpy(host.data(), kCPU, p, kCuda0, n * sizeof(float));
  for (float v : host) CHECK(std::isnan(v));
  allocator.deallocate(p, n * sizeof(float));
}

TEST_CASE("CUDA tensors reuse cached memory", "[cuda]") {
  if (!cuda_ready()) return;
  { Tensor warm = empty({37, 129}, {.device = kCuda0}); }
  cuda::MemoryStats before = cuda::memory_stats(0);
  for (int i = 0; i < 10; ++i) {
    Tensor t = full({37, 129}, 1.0, {.device = kCuda0});
    CHECK(cuda::memory_stats().allocated >= before.allocated + 37 * 129 * 4);
  }
  cuda::MemoryStats after = cuda::memory_stats(0);
  CHECK(after.num_cuda_mallocs == before.num_cuda_mallocs);
  CHECK(after.num_allocs == before.num_allocs + 10);
  CHECK(after.num_frees == before.num_frees + 10);
  CHECK(after.allocated == before.allocated);
  CHECK_THROWS_AS(cuda::device_allocator(cuda::device_count()), DeviceError);
}
#endif  // GENESIS_WITH_CUDA
