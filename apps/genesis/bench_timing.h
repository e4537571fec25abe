#pragma once
// Timing for `genesis bench`: CUDA events on the current stream (or the steady clock on the
// CPU), the last-level cache flushed by writing a buffer twice its size before every
// repetition, medians and percentiles.
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

class DeviceTimer {
 public:
  // flush_mib < 0: flush twice the last-level cache (at most 128 MiB on the CPU); 0: no flush.
  explicit DeviceTimer(Device device, int64_t flush_mib = -1);
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

 private:
  void flush(int rep);

  Device device_;
  std::string device_name_;
  size_t cache_bytes_ = 0;
  size_t flush_bytes_ = 0;
  Tensor flush_buffer_;
};

}  // namespace genesis::cli::bench
