#include "apps/genesis/bench_alloc.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "libgenesis/core/allocator.h"
#include "libgenesis/core/error.h"
#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/caching_allocator.h"
#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis::cli::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMiB = size_t{1} << 20;

struct Backend {
  std::function<void*(size_t)> alloc;
  std::function<void(void*, size_t)> free;
};

// 64-bit LCG (Knuth's MMIX constants): scripts/bench/torch_ops.py draws the same sizes.
class SizeStream {
 public:
  explicit SizeStream(uint64_t seed) : state_(seed) {}
  double uniform() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state_ >> 11) / 9007199254740992.0;
  }
  // Log-uniform in [lo, hi], rounded to 512 bytes.
  size_t log_uniform(size_t lo, size_t hi) {
    double l = std::log(static_cast<double>(lo)), h = std::log(static_cast<double>(hi));
    auto bytes = static_cast<size_t>(std::exp(l + uniform() * (h - l)));
    return std::max<size_t>(512, bytes / 512 * 512);
  }
  size_t index(size_t n) { return std::min(n - 1, static_cast<size_t>(uniform() * static_cast<double>(n))); }

 private:
  uint64_t state_;
};

double ns_per_pair(Clock::time_point start, int64_t pairs) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / static_cast<double>(pairs);
}

double same_size(const Backend& b, size_t bytes, int64_t pairs) {
  b.free(b.alloc(bytes), bytes);  // warm: the first request fills the cache
  auto t0 = Clock::now();
  for (int64_t i = 0; i < pairs; ++i) b.free(b.alloc(bytes), bytes);
  return ns_per_pair(t0, pairs);
}

// Activations of a 12-layer decoder allocated in forward order, freed in reverse (backward).
std::vector<size_t> transformer_sizes(int64_t tokens) {
  const size_t d = 768, t = static_cast<size_t>(tokens), half = 2;
  std::vector<size_t> sizes;
  for (int layer = 0; layer < 12; ++layer) {
    for (size_t width : {d, 3 * d, d, 4 * d, 4 * d, d}) sizes.push_back(t * width * half);
    sizes.push_back(t * 4);  // layer-norm statistics (f32)
    sizes.push_back(t * 4);
  }
  return sizes;
}

double transformer(const Backend& b, int64_t tokens, int64_t iterations) {
  std::vector<size_t> sizes = transformer_sizes(tokens);
  std::vector<void*> live(sizes.size());
  auto step = [&] {
    for (size_t i = 0; i < sizes.size(); ++i) live[i] = b.alloc(sizes[i]);
    for (size_t i = sizes.size(); i-- > 0;) b.free(live[i], sizes[i]);
  };
  step();
  auto t0 = Clock::now();
  for (int64_t it = 0; it < iterations; ++it) step();
  return ns_per_pair(t0, iterations * static_cast<int64_t>(sizes.size()));
}

// A random window of live blocks; each pair frees one at random and allocates a new size.
double random_window(const Backend& b, size_t lo, size_t hi, size_t window, size_t live_cap, int64_t pairs,
                     uint64_t seed) {
  SizeStream rng(seed);
  std::vector<std::pair<void*, size_t>> live;
  size_t live_bytes = 0;
  auto draw = [&] {
    return std::min(rng.log_uniform(lo, hi), live_bytes + 512 < live_cap ? live_cap - live_bytes : 512);
  };
  while (live.size() < window && live_bytes < live_cap) {
    size_t s = draw();
    live.push_back({b.alloc(s), s});
    live_bytes += s;
  }
  auto t0 = Clock::now();
  for (int64_t i = 0; i < pairs; ++i) {
    size_t k = rng.index(live.size());
    b.free(live[k].first, live[k].second);
    live_bytes -= live[k].second;
    size_t s = draw();
    live[k] = {b.alloc(s), s};
    live_bytes += s;
  }
  double ns = ns_per_pair(t0, pairs);
  for (auto [p, s] : live) b.free(p, s);
  return ns;
}

Backend wrap(Allocator& a) {
  return {[&a](size_t n) { return a.allocate(n); }, [&a](void* p, size_t n) { a.deallocate(p, n); }};
}

Backend raw_backend(Device device) {
#if GENESIS_WITH_CUDA
  if (device.is_cuda()) {
    return {[](size_t n) {
              void* p = nullptr;
              GENESIS_CUDA_CHECK(cudaMalloc(&p, n));
              return p;
            },
            [](void* p, size_t) { GENESIS_CUDA_CHECK(cudaFree(p)); }};
  }
#endif
  (void)device;
  return {[](size_t n) { return std::malloc(n); }, [](void* p, size_t) { std::free(p); }};
}

}  // namespace

nlohmann::json run_alloc_bench(Device device, int64_t pairs) {
  GENESIS_CHECK(pairs >= 20, UsageError, "genesis bench alloc: --pairs must be at least 20");
  bool gpu = device.is_cuda();
  Allocator& cached = allocator_for(device);
  Backend genesis_backend = wrap(cached), raw = raw_backend(device);
  int64_t raw_pairs = std::max<int64_t>(10, pairs / 20);
  int64_t tokens = gpu ? 8192 : 512;
  size_t pressure_cap = gpu ? size_t{4} << 30 : 256 * kMiB;
  size_t random_hi = gpu ? 256 * kMiB : 16 * kMiB;

  struct Scenario {
    std::string name, description;
    std::function<double(const Backend&, int64_t)> run;
    int64_t pairs, raw_pairs;
  };
  std::vector<Scenario> scenarios{
      {"same_1MiB", "1 MiB allocated and freed repeatedly",
       [&](const Backend& b, int64_t n) { return same_size(b, kMiB, n); }, pairs, raw_pairs},
      {"large_64MiB", "64 MiB allocated and freed repeatedly",
       [&](const Backend& b, int64_t n) { return same_size(b, 64 * kMiB, n); }, pairs, raw_pairs},
      {"transformer",
       "12-layer activations (" + std::to_string(tokens) + " tokens, d 768, bf16) forward, freed in reverse",
       [&](const Backend& b, int64_t n) { return transformer(b, tokens, n); }, std::max<int64_t>(2, pairs / 500),
       std::max<int64_t>(1, raw_pairs / 100)},
      {"pressure", "random live set held near " + std::to_string(pressure_cap / kMiB) + " MiB (the cap under genesis)",
       [&](const Backend& b, int64_t n) {
         return random_window(b, pressure_cap / 1024, pressure_cap / 16, 1 << 20, pressure_cap * 8 / 10, n, 11);
       },
       pairs / 4, raw_pairs},
      {"random_sizes", "16 live blocks, log-uniform 512 B to " + std::to_string(random_hi / kMiB) + " MiB",
       [&](const Backend& b, int64_t n) { return random_window(b, 512, random_hi, 16, SIZE_MAX / 2, n, 12); }, pairs,
       raw_pairs},
  };

  nlohmann::json out = nlohmann::json::array();
  for (const Scenario& s : scenarios) {
    nlohmann::json row{
        {"name", s.name}, {"description", s.description}, {"pairs", s.pairs}, {"raw_pairs", s.raw_pairs}};
    try {
      double ns;
#if GENESIS_WITH_CUDA
      if (gpu && s.name == "pressure") {
        // A separate allocator whose cap (GENESIS_CUDA_MEMORY_FRACTION) sits just above the live set.
        size_t free_bytes = 0, total_bytes = 0;
        GENESIS_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        std::string fraction = std::to_string(static_cast<double>(pressure_cap) / static_cast<double>(total_bytes));
        const char* previous = std::getenv("GENESIS_CUDA_MEMORY_FRACTION");
        std::optional<std::string> saved = previous ? std::optional<std::string>(previous) : std::nullopt;
        setenv("GENESIS_CUDA_MEMORY_FRACTION", fraction.c_str(), 1);
        cuda::CachingAllocator capped(device.index);
        if (saved)
          setenv("GENESIS_CUDA_MEMORY_FRACTION", saved->c_str(), 1);
        else
          unsetenv("GENESIS_CUDA_MEMORY_FRACTION");
        ns = s.run(wrap(capped), s.pairs);
      } else {
        ns = s.run(genesis_backend, s.pairs);
      }
#else
      ns = s.run(genesis_backend, s.pairs);
#endif
      double raw_ns = s.run(raw, s.raw_pairs);
      row["allocator_ns"] = ns;
      row["raw_ns"] = raw_ns;
      row["raw_over_allocator"] = raw_ns / ns;
    } catch (const Error& e) {
      row["error"] = e.what();
    }
    out.push_back(row);
  }
  return out;
}

}  // namespace genesis::cli::bench
