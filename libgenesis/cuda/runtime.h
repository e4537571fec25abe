#pragma once
// CUDA runtime services for the op layer: device queries, the current stream, copies
// between host and device, and kernel faults (the error check is kernels/cuda/check.h's). Compiled only when the CUDA backend is
// built (GENESIS_WITH_CUDA).
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda/check.h"
#include "libgenesis/core/device.h"

namespace genesis::cuda {

// True when the driver answers and at least one device is present (never throws).
bool is_available();
int device_count();
// A device's free and total memory as the driver reports them (cudaMemGetInfo): what other
// processes and this one's caches hold is not free.
struct DeviceMemory {
  size_t free = 0, total = 0;
};
DeviceMemory device_memory(int device);
// The stream ops enqueue on for the current device (a non-blocking stream per device,
// created on first use). Nothing in the op layer synchronizes it.
cudaStream_t current_stream();
// Replaces the current stream for this thread (nullptr restores the default).
void set_current_stream(cudaStream_t stream);
// Makes `stream` the current device's current stream for this thread while it lives, then
// restores what was current before.
class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  cudaStream_t previous_;  // the thread's override before (nullptr: none)
};

// Waits for all work on the current stream (then raises a pending kernel fault, see below).
void synchronize();
// Copies nbytes between any two of host/device memory. Enqueued on the current stream;
// returns after the copy completes when the destination is host memory (then raises a pending
// kernel fault). A host source is staged through pinned memory, so an upload returns without
// waiting for the work queued before it.
void memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

// Faults that kernels find without stopping the stream (an index out of range, recorded in a
// cuda::KernelFault, kernels/cuda/check.h): the next host synchronization point
// (synchronize(), a copy to the host, so item() and to(kCPU)) throws the first one as an
// IndexError. As with PyTorch's device-side asserts the error surfaces after the op has
// returned.
// The current device's fault record, readable and writable by kernels (created on first use).
KernelFault* kernel_fault_slot();
// A stable small id for an op name, stored by kernels in KernelFault::op.
int fault_op_id(const char* op);
// Throws the fault recorded on the current device, if any, and clears it. Call only after the
// stream that ran the reporting kernels has been synchronized.
void raise_kernel_fault();

}  // namespace genesis::cuda
