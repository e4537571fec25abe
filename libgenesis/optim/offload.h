#pragma once
// The transfers of optimizer offload (dist.offload_optimizer; Optimizer::offload_to_host): each
// parameter and its gradient pass through host buffers in chunks, where the optimizer's CPU
// update runs, and the updated parameter goes back. For CUDA tensors the buffers are pinned and
// three chunks are in flight at once: the next one downloading, this one updated on the host,
// the previous one uploading, each direction on its own copy stream. The device's current stream
// is ordered around the whole exchange (the gradients are read after the work queued before it;
// work queued after it sees the updated parameters), with no device-wide synchronization.
// CPU tensors go through the same chunks as plain copies, which lets the tests check the
// chunking on any machine.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "libgenesis/core/tensor.h"

namespace genesis {

// One chunk as the host update sees it: elements [offset, offset + n) of items[item], the
// parameter's (updated in place, then written back) and the gradient's, host copies.
struct HostChunk {
  size_t item = 0;
  int64_t offset = 0;
  int64_t n = 0;
  void* param = nullptr;
  const void* grad = nullptr;
};

class HostExchange {
 public:
  // Chunks of at most chunk_bytes of one tensor (a multiple of 64 bytes; tests use small ones).
  explicit HostExchange(int64_t chunk_bytes = int64_t{64} << 20);
  ~HostExchange();
  HostExchange(const HostExchange&) = delete;
  HostExchange& operator=(const HostExchange&) = delete;

  // A parameter and its gradient: contiguous, one dtype and element count, on one device that
  // every item shares.
  struct Item {
    Tensor param;
    Tensor grad;
  };
  // Calls update once per chunk, items and chunks in order, and writes each chunk's parameter
  // back after it. Returns when every chunk has been updated; on CUDA the last uploads may still
  // run, ordered before what the current stream runs next.
  void run(std::span<const Item> items, const std::function<void(const HostChunk&)>& update);

 private:
  struct Buffers;  // the host buffers and, on CUDA, the streams and events
  int64_t chunk_bytes_;
  std::unique_ptr<Buffers> buffers_;
};

}  // namespace genesis
