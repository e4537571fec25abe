#include "libgenesis/cuda/runtime.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
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

// Pinned buffers that host-to-device copies are staged through, each reusable once the copy that
// last read it has completed (its event). One pool per device.
struct StagingBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  cudaEvent_t done = nullptr;
};
constexpr size_t kMaxStagedCopy = size_t{64} << 20;  // larger uploads go directly (and wait)
constexpr size_t kMaxStagingBuffers = 16;

struct StagingPool {
  std::mutex mutex;
  std::vector<StagingBuffer> buffers;
};

StagingPool& staging_pool(int device) {
  static const int count = cached_device_count();
  static std::unique_ptr<StagingPool[]> pools(new StagingPool[count > 0 ? count : 1]);
  return pools[device];
}

// Copies n bytes from pageable host memory into a free pinned buffer and enqueues its upload to
// dst on `stream`; false when no buffer can be had (the caller then copies directly).
bool staged_upload(void* dst, const void* src, size_t n, int device, cudaStream_t stream) {
  if (n > kMaxStagedCopy) return false;
  StagingPool& pool = staging_pool(device);
  std::lock_guard lock(pool.mutex);
  StagingBuffer* chosen = nullptr;
  for (StagingBuffer& b : pool.buffers) {
    if (b.bytes < n) continue;
    cudaError_t status = cudaEventQuery(b.done);
    if (status == cudaErrorNotReady) continue;
    GENESIS_CUDA_CHECK(status);
    if (!chosen || b.bytes < chosen->bytes) chosen = &b;
  }
  if (!chosen) {
    if (pool.buffers.size() >= kMaxStagingBuffers) return false;
    StagingBuffer b;
    b.bytes = std::max<size_t>(n, size_t{1} << 20);
    GENESIS_CUDA_CHECK(cudaHostAlloc(&b.data, b.bytes, cudaHostAllocDefault));
    GENESIS_CUDA_CHECK(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming));
    pool.buffers.push_back(b);
    chosen = &pool.buffers.back();
  }
  std::memcpy(chosen->data, src, n);
  GENESIS_CUDA_CHECK(cudaMemcpyAsync(dst, chosen->data, n, cudaMemcpyHostToDevice, stream));
  GENESIS_CUDA_CHECK(cudaEventRecord(chosen->done, stream));
  return true;
}

struct FaultSlots {
  std::mutex mutex;
  std::vector<KernelFault*> slots;  // per device, mapped pinned memory (never freed)
  std::vector<std::string> op_names;
};

FaultSlots& fault_slots() {
  static FaultSlots slots;
  return slots;
}

}  // namespace

bool is_available() {
  return cached_device_count() > 0;
}

int device_count() {
  return cached_device_count();
}

DeviceMemory device_memory(int device) {
  DeviceGuard guard(device);
  DeviceMemory memory;
  GENESIS_CUDA_CHECK(cudaMemGetInfo(&memory.free, &memory.total));
  return memory;
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

StreamGuard::StreamGuard(cudaStream_t stream) : device_(current_device()) {
  auto slot = static_cast<size_t>(device_);
  previous_ = slot < stream_overrides.size() ? stream_overrides[slot] : nullptr;
  set_current_stream(stream);
}

StreamGuard::~StreamGuard() { stream_overrides[static_cast<size_t>(device_)] = previous_; }

void synchronize() {
  GENESIS_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  raise_kernel_fault();
}

KernelFault* kernel_fault_slot() {
  const int device = current_device();
  FaultSlots& f = fault_slots();
  std::lock_guard lock(f.mutex);
  if (f.slots.size() <= static_cast<size_t>(device)) f.slots.resize(static_cast<size_t>(device) + 1, nullptr);
  KernelFault*& slot = f.slots[static_cast<size_t>(device)];
  if (!slot) {
    void* host = nullptr;
    GENESIS_CUDA_CHECK(cudaHostAlloc(&host, sizeof(KernelFault), cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(host, 0, sizeof(KernelFault));
    void* on_device = nullptr;
    GENESIS_CUDA_CHECK(cudaHostGetDevicePointer(&on_device, host, 0));
    GENESIS_CHECK(on_device == host, DeviceError, "cuda:", device,
                  ": mapped host memory needs unified addressing, which this platform lacks");
    slot = static_cast<KernelFault*>(host);
  }
  return slot;
}

int fault_op_id(const char* op) {
  FaultSlots& f = fault_slots();
  std::lock_guard lock(f.mutex);
  for (size_t i = 0; i < f.op_names.size(); ++i)
    if (f.op_names[i] == op) return static_cast<int>(i);
  f.op_names.emplace_back(op);
  return static_cast<int>(f.op_names.size() - 1);
}

void raise_kernel_fault() {
  const int device = current_device();
  FaultSlots& f = fault_slots();
  KernelFault fault{};
  std::string op;
  {
    std::lock_guard lock(f.mutex);
    if (f.slots.size() <= static_cast<size_t>(device) || !f.slots[static_cast<size_t>(device)]) return;
    volatile KernelFault* slot = f.slots[static_cast<size_t>(device)];
    if (slot->set == 0) return;
    fault.op = slot->op;
    fault.value = slot->value;
    fault.bound = slot->bound;
    slot->set = 0;
    op = fault.op >= 0 && static_cast<size_t>(fault.op) < f.op_names.size() ? f.op_names[static_cast<size_t>(fault.op)]
                                                                             : "a CUDA kernel";
  }
  GENESIS_THROW(IndexError, op, ": index ", fault.value, " is out of range [0, ", fault.bound, ") on cuda:", device,
                " (found by the kernel; reported at the next synchronization)");
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
  if (src_device.is_cpu() && staged_upload(dst, src, nbytes, owner.index, stream)) return;
  GENESIS_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream));
  // The source block may be freed and reused on its own stream right after we return. (An event
  // is recorded on the device of its stream: here the destination, which is current.)
  if (cross_device) stream_wait(source_stream, stream);
  // Host buffers come from the pageable CPU allocator and may be freed or read as soon as we
  // return, so a copy touching the host without staging completes before memcpy does.
  if (dst_device.is_cpu() || src_device.is_cpu()) GENESIS_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (dst_device.is_cpu()) raise_kernel_fault();
}

}  // namespace genesis::cuda
