#include "libgenesis/cuda/runtime.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/cuda/device_guard.h"

namespace genesis::cuda {

namespace {

int query_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear the error so later checks start clean
    return 0;
  }
  return count;
}

// Queried once: the set of visible devices is fixed for the life of the process.
int cached_device_count() {
  static const int count = query_device_count();
  return count;
}

// genesis' own stream of `device`, created on first use and kept for the life of the process.
cudaStream_t device_stream(int device) {
  static const int count = cached_device_count();
  static std::unique_ptr<std::atomic<cudaStream_t>[]> streams(new std::atomic<cudaStream_t>[count > 0 ? count : 1]());
  static std::mutex create_mutex;
  GENESIS_CHECK(device >= 0 && device < count, DeviceError, "device cuda:", device, " does not exist: ", count,
                " CUDA device(s) visible");
  cudaStream_t stream = streams[device].load(std::memory_order_acquire);
  if (stream) return stream;
  std::lock_guard lock(create_mutex);
  stream = streams[device].load(std::memory_order_relaxed);
  if (!stream) {
    DeviceGuard guard(device);
    // Non-blocking: genesis' work must not serialize with the legacy default stream of other libraries.
    GENESIS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    streams[device].store(stream, std::memory_order_release);
  }
  return stream;
}

// Per-thread replacements of the current stream, indexed by device (nullptr = none).
thread_local std::vector<cudaStream_t> stream_overrides;

// Orders `waiter` after everything enqueued on `producer` so far.
void stream_wait(cudaStream_t waiter, cudaStream_t producer) {
  cudaEvent_t event;
  GENESIS_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  GENESIS_CUDA_CHECK(cudaEventRecord(event, producer));
  GENESIS_CUDA_CHECK(cudaStreamWaitEvent(waiter, event, 0));
  GENESIS_CUDA_CHECK(cudaEventDestroy(event));  // released once the wait has been satisfied
}

}  // namespace

bool is_available() {
  return cached_device_count() > 0;
}

int device_count() {
  return cached_device_count();
}

cudaStream_t current_stream() {
  int device = current_device();
  auto slot = static_cast<size_t>(device);
  if (slot < stream_overrides.size() && stream_overrides[slot]) return stream_overrides[slot];
  return device_stream(device);
}

void set_current_stream(cudaStream_t stream) {
  auto slot = static_cast<size_t>(current_device());
  if (slot >= stream_overrides.size()) stream_overrides.resize(slot + 1, nullptr);
  stream_overrides[slot] = stream;
}

void synchronize() {
  GENESIS_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
}

void memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  // The copy runs on the destination's stream when the destination is a GPU, else on the source's.
  Device owner = dst_device.is_cuda() ? dst_device : src_device;
  DeviceGuard guard(owner.index);
  cudaStream_t stream = current_stream();
  cudaStream_t source_stream = nullptr;
  const bool cross_device = dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index;
  if (cross_device) {
    DeviceGuard source_guard(src_device.index);
    source_stream = current_stream();
    stream_wait(stream, source_stream);  // the source's pending writes land before the copy reads
  }
  GENESIS_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream));
  // The source block may be freed and reused on its own stream right after we return. (An event
  // is recorded on the device of its stream: here the destination, which is current.)
  if (cross_device) stream_wait(source_stream, stream);
  // Host buffers come from the pageable CPU allocator and may be freed or read as soon as we
  // return, so any copy touching the host completes before memcpy does.
  if (dst_device.is_cpu() || src_device.is_cpu()) GENESIS_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  cudaGetLastError();  // reset a non-sticky error so the next check reports only its own failure
  GENESIS_THROW(Error, "CUDA error ", cudaGetErrorName(err), ": ", cudaGetErrorString(err), " at ", expr, " (", file,
                ":", line, ")");
}

}  // namespace genesis::cuda
