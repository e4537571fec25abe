#pragma once
// Timing for `genesis bench`: CUDA events on the current stream (or the steady clock on the
// CPU), the last-level cache flushed before every repetition by streaming a buffer twice its
// size, medians and percentiles.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "libgenesis/core/device.h"
#include "libgenesis/core/tensor.h"

namespace genesis::cli::bench {

struct Stats {
  double median_ms = 0, p10_ms = 0, p90_ms = 0;
  int reps = 0;
};
Stats summarize(std::vector<double> ms);

// How the flush streams its buffer. Reading leaves the cache holding clean lines, so the timed
// op starts cold without first writing back the flush's own data (which a written buffer,
// dirty in the cache, makes it pay for: up to the cache's size of extra DRAM writes).
enum class FlushMode { read, write };

class DeviceTimer {
 public:
  // flush_mib < 0: flush twice the last-level cache (at most 128 MiB on the CPU); 0: no flush.
  explicit DeviceTimer(Device device, int64_t flush_mib = -1, FlushMode flush_mode = FlushMode::read);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  // Times `reps` calls fn(i), each after a cache flush that is not timed; milliseconds per call.
  std::vector<double> time(const std::function<void(int)>& fn, int reps);
  // Warm-up calls, then the number of repetitions that fits `budget_ms` (between 5 and max_reps).
  int warm_up(const std::function<void(int)>& fn, int max_reps, double budget_ms);
  // Host cost of issuing n calls back to back without waiting, and the wall time until they
  // finished, both in microseconds per call.
  std::pair<double, double> host_overhead_us(const std::function<void(int)>& fn, int n);
  void synchronize();

  Device device() const { return device_; }
  std::string device_name() const { return device_name_; }
  std::string method() const { return device_.is_cuda() ? "cuda_events" : "steady_clock"; }
  size_t cache_bytes() const { return cache_bytes_; }
  size_t flush_bytes() const { return flush_bytes_; }
  const char* flush_mode() const { return flush_mode_ == FlushMode::read ? "read" : "write"; }

 private:
  void flush(int rep);

  Device device_;
  std::string device_name_;
  size_t cache_bytes_ = 0;
  size_t flush_bytes_ = 0;
  FlushMode flush_mode_;
  Tensor flush_buffer_;  // f32, so that a read flush is one sum over it
};

}  // namespace genesis::cli::bench
