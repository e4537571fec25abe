#include "apps/genesis/bench_timing.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "libgenesis/core/error.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/reduce.h"
#if GENESIS_WITH_CUDA
#include <cuda_runtime_api.h>

#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis::cli::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "cpu";
}

// The largest cache this CPU shares (bytes): the highest level under
// /sys/devices/system/cpu/cpu0/cache, which is what one core's data can occupy. glibc's
// sysconf(_SC_LEVEL3_CACHE_SIZE) reports the L3 of the whole package from CPUID instead (384 MiB
// on a 2-core VM of a large EPYC, whose cores share 32 MiB), so it is only the fallback.
size_t cpu_cache_bytes() {
  int best_level = 0;
  size_t best = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_in(dir + "level"), size_in(dir + "size");
    int level = 0;
    std::string size;
    if (!(level_in >> level) || !(size_in >> size) || size.empty()) continue;
    size_t bytes = std::strtoull(size.c_str(), nullptr, 10);
    if (size.back() == 'K') bytes <<= 10;
    if (size.back() == 'M') bytes <<= 20;
    if (level > best_level && bytes > 0) best_level = level, best = bytes;
  }
  if (best > 0) return best;
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<size_t>(l3) : size_t{32} << 20;
}

double percentile(const std::vector<double>& sorted, double q) {
  double pos = q * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(pos);
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

}  // namespace

Stats summarize(std::vector<double> ms) {
  Stats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.median_ms = percentile(ms, 0.5);
  s.p10_ms = percentile(ms, 0.1);
  s.p90_ms = percentile(ms, 0.9);
  s.reps = static_cast<int>(ms.size());
  return s;
}

DeviceTimer::DeviceTimer(Device device, int64_t flush_mib, FlushMode flush_mode)
    : device_(device), flush_mode_(flush_mode) {
  if (device.is_cuda()) {
#if GENESIS_WITH_CUDA
    GENESIS_CHECK(cuda::is_available(), DeviceError, "genesis bench: no CUDA device is available; use --device cpu");
    GENESIS_CUDA_CHECK(cudaSetDevice(device.index));
    cudaDeviceProp p{};
    GENESIS_CUDA_CHECK(cudaGetDeviceProperties(&p, device.index));
    device_name_ = p.name;
    cache_bytes_ = static_cast<size_t>(p.l2CacheSize);
#else
    GENESIS_THROW(DeviceError, "genesis bench: this build has no CUDA backend; use --device cpu");
#endif
  } else {
    device_name_ = cpu_model_name();
    cache_bytes_ = cpu_cache_bytes();
  }
  // Where only the package's total is known, one core sees a slice of it: 128 MiB is plenty.
  size_t cap = device.is_cuda() ? SIZE_MAX : size_t{128} << 20;
  flush_bytes_ = flush_mib >= 0 ? static_cast<size_t>(flush_mib) << 20 : std::min(2 * cache_bytes_, cap);
  if (flush_bytes_ > 0)
    flush_buffer_ = zeros({static_cast<int64_t>(flush_bytes_ / sizeof(float))}, {.dtype = DType::f32, .device = device});
}

DeviceTimer::~DeviceTimer() = default;

void DeviceTimer::flush(int rep) {
  if (flush_bytes_ == 0) return;
  if (flush_mode_ == FlushMode::read) {
    (void)sum(flush_buffer_);  // queued on the device's stream like the op it precedes
    return;
  }
  flush_buffer_.fill_(static_cast<double>(rep & 0x7f));
}

void DeviceTimer::synchronize() {
#if GENESIS_WITH_CUDA
  if (device_.is_cuda()) cuda::synchronize();
#endif
}

std::vector<double> DeviceTimer::time(const std::function<void(int)>& fn, int reps) {
  std::vector<double> ms(static_cast<size_t>(reps));
#if GENESIS_WITH_CUDA
  if (device_.is_cuda()) {
    cudaStream_t stream = cuda::current_stream();
    std::vector<cudaEvent_t> events(2 * ms.size());
    for (cudaEvent_t& e : events) GENESIS_CUDA_CHECK(cudaEventCreate(&e));
    struct Destroy {
      std::vector<cudaEvent_t>& events;
      ~Destroy() {
        for (cudaEvent_t e : events) cudaEventDestroy(e);
      }
    } destroy{events};
    for (int i = 0; i < reps; ++i) {
      flush(i);
      GENESIS_CUDA_CHECK(cudaEventRecord(events[2 * i], stream));
      fn(i);
      GENESIS_CUDA_CHECK(cudaEventRecord(events[2 * i + 1], stream));
    }
    GENESIS_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int i = 0; i < reps; ++i) {
      float elapsed = 0;
      GENESIS_CUDA_CHECK(cudaEventElapsedTime(&elapsed, events[2 * i], events[2 * i + 1]));
      ms[i] = elapsed;
    }
    return ms;
  }
#endif
  for (int i = 0; i < reps; ++i) {
    flush(i);
    auto t0 = Clock::now();
    fn(i);
    ms[i] = ms_between(t0, Clock::now());
  }
  return ms;
}

int DeviceTimer::warm_up(const std::function<void(int)>& fn, int max_reps, double budget_ms) {
  // The first call pays for module loading, cuBLAS handles and cache growth; it is not counted.
  fn(0);
  synchronize();
  std::vector<double> ms = time(fn, 3);
  double per_call = std::max(summarize(ms).median_ms, 1e-3);
  return std::clamp(static_cast<int>(budget_ms / per_call), std::min(5, max_reps), max_reps);
}

std::pair<double, double> DeviceTimer::host_overhead_us(const std::function<void(int)>& fn, int n) {
  synchronize();
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) fn(i);
  auto issued = Clock::now();
  synchronize();
  auto done = Clock::now();
  return {1e3 * ms_between(t0, issued) / n, 1e3 * ms_between(t0, done) / n};
}

}  // namespace genesis::cli::bench
