#include "libgenesis/optim/offload.h"

#include <array>
#include <cstring>
#include <vector>

#include "libgenesis/core/error.h"
#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/device_guard.h"
#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis {

namespace {

// Chunks in flight: one downloading, one updated on the host, one uploading.
constexpr size_t kSlots = 3;

struct Chunk {
  size_t item = 0;
  int64_t offset = 0, n = 0;
};

std::vector<Chunk> plan_chunks(std::span<const HostExchange::Item> items, int64_t chunk_bytes) {
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t numel = items[i].param.numel();
    const int64_t step = chunk_bytes / static_cast<int64_t>(dtype_size(items[i].param.dtype()));
    for (int64_t offset = 0; offset < numel; offset += step)
      chunks.push_back({.item = i, .offset = offset, .n = std::min(step, numel - offset)});
  }
  return chunks;
}

char* element(const Tensor& t, int64_t offset) {
  return static_cast<char*>(t.data_ptr()) + offset * static_cast<int64_t>(dtype_size(t.dtype()));
}

}  // namespace

struct HostExchange::Buffers {
  struct Slot {
    void* param = nullptr;
    void* grad = nullptr;
#if GENESIS_WITH_CUDA
    cudaEvent_t downloaded = nullptr;
    cudaEvent_t uploaded = nullptr;  // this slot's buffers may be refilled once it has passed
#endif
  };

  Buffers(Device d, size_t buffer_bytes) : device(d), bytes(buffer_bytes) {
    if (device.is_cpu()) {
      host.resize(2 * kSlots * bytes);
      for (size_t s = 0; s < kSlots; ++s) {
        slots[s].param = host.data() + 2 * s * bytes;
        slots[s].grad = host.data() + (2 * s + 1) * bytes;
      }
      return;
    }
#if GENESIS_WITH_CUDA
    cuda::DeviceGuard guard(device.index);
    GENESIS_CUDA_CHECK(cudaStreamCreateWithFlags(&down, cudaStreamNonBlocking));
    GENESIS_CUDA_CHECK(cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking));
    GENESIS_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    GENESIS_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    for (Slot& s : slots) {
      GENESIS_CUDA_CHECK(cudaHostAlloc(&s.param, bytes, cudaHostAllocDefault));
      GENESIS_CUDA_CHECK(cudaHostAlloc(&s.grad, bytes, cudaHostAllocDefault));
      GENESIS_CUDA_CHECK(cudaEventCreateWithFlags(&s.downloaded, cudaEventDisableTiming));
      GENESIS_CUDA_CHECK(cudaEventCreateWithFlags(&s.uploaded, cudaEventDisableTiming));
    }
#else
    GENESIS_THROW(DeviceError, "optimizer offload: ", device.str(), " tensors need the CUDA build");
#endif
  }

  ~Buffers() {
#if GENESIS_WITH_CUDA
    if (device.is_cpu()) return;
    // Cleanup cannot throw: errors here would only hide the one that ended the run.
    cuda::DeviceGuard guard(device.index);
    drain();
    for (Slot& s : slots) {
      cudaFreeHost(s.param);
      cudaFreeHost(s.grad);
      cudaEventDestroy(s.downloaded);
      cudaEventDestroy(s.uploaded);
    }
    cudaEventDestroy(ready);
    cudaEventDestroy(done);
    cudaStreamDestroy(down);
    cudaStreamDestroy(up);
#endif
  }

  // The gradients and parameters are read after the work queued on the current stream so far.
  void begin() {
#if GENESIS_WITH_CUDA
    if (device.is_cpu()) return;
    GENESIS_CUDA_CHECK(cudaEventRecord(ready, cuda::current_stream()));
    GENESIS_CUDA_CHECK(cudaStreamWaitEvent(down, ready, 0));
#endif
  }

  void download(Slot& s, const Item& item, const Chunk& c) {
    const size_t n = static_cast<size_t>(c.n) * dtype_size(item.param.dtype());
    if (device.is_cpu()) {
      std::memcpy(s.param, element(item.param, c.offset), n);
      std::memcpy(s.grad, element(item.grad, c.offset), n);
      return;
    }
#if GENESIS_WITH_CUDA
    GENESIS_CUDA_CHECK(cudaEventSynchronize(s.uploaded));  // the slot's previous chunk has left
    GENESIS_CUDA_CHECK(cudaMemcpyAsync(s.param, element(item.param, c.offset), n, cudaMemcpyDeviceToHost, down));
    GENESIS_CUDA_CHECK(cudaMemcpyAsync(s.grad, element(item.grad, c.offset), n, cudaMemcpyDeviceToHost, down));
    GENESIS_CUDA_CHECK(cudaEventRecord(s.downloaded, down));
#endif
  }

  void wait_download(Slot& s) {
#if GENESIS_WITH_CUDA
    if (!device.is_cpu()) GENESIS_CUDA_CHECK(cudaEventSynchronize(s.downloaded));
#endif
    (void)s;
  }

  void upload(Slot& s, const Item& item, const Chunk& c) {
    const size_t n = static_cast<size_t>(c.n) * dtype_size(item.param.dtype());
    if (device.is_cpu()) {
      std::memcpy(element(item.param, c.offset), s.param, n);
      return;
    }
#if GENESIS_WITH_CUDA
    GENESIS_CUDA_CHECK(cudaMemcpyAsync(element(item.param, c.offset), s.param, n, cudaMemcpyHostToDevice, up));
    GENESIS_CUDA_CHECK(cudaEventRecord(s.uploaded, up));
#endif
  }

  // What the current stream runs next sees the uploaded parameters.
  void end() {
#if GENESIS_WITH_CUDA
    if (device.is_cpu()) return;
    GENESIS_CUDA_CHECK(cudaEventRecord(done, up));
    GENESIS_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(), done, 0));
#endif
  }

  // After a failure inside run(): the copies still in flight finish before their buffers are
  // reused or freed (errors ignored: the one that ended the exchange is what the user sees).
  void drain() {
#if GENESIS_WITH_CUDA
    if (device.is_cpu()) return;
    cudaStreamSynchronize(down);
    cudaStreamSynchronize(up);
#endif
  }

  Device device;
  size_t bytes;
  std::array<Slot, kSlots> slots;
  std::vector<char> host;  // the CPU buffers
#if GENESIS_WITH_CUDA
  cudaStream_t down = nullptr, up = nullptr;
  cudaEvent_t ready = nullptr, done = nullptr;
#endif
};

HostExchange::HostExchange(int64_t chunk_bytes) : chunk_bytes_(chunk_bytes) {
  GENESIS_CHECK(chunk_bytes >= 64 && chunk_bytes % 64 == 0, ValueError,
                "optimizer offload: the chunk size must be a positive multiple of 64 bytes (got ", chunk_bytes, ")");
}

HostExchange::~HostExchange() = default;

void HostExchange::run(std::span<const Item> items, const std::function<void(const HostChunk&)>& update) {
  if (items.empty()) return;
  const Device device = items.front().param.device();
  for (const Item& it : items) {
    GENESIS_CHECK(it.param.device() == device && it.grad.device() == device, DeviceError,
                  "optimizer offload: every parameter and gradient must be on ", device.str());
    GENESIS_CHECK(it.param.is_contiguous() && it.grad.is_contiguous() && it.param.dtype() == it.grad.dtype() &&
                      it.param.numel() == it.grad.numel(),
                  ValueError, "optimizer offload: a parameter and its gradient must be contiguous, of one dtype and size");
  }
  const std::vector<Chunk> chunks = plan_chunks(items, chunk_bytes_);
  if (chunks.empty()) return;
  if (!buffers_ || buffers_->device != device)
    buffers_ = std::make_unique<Buffers>(device, static_cast<size_t>(chunk_bytes_));
  Buffers& b = *buffers_;
  struct DrainOnError {
    Buffers& buffers;
    bool armed = true;
    ~DrainOnError() {
      if (armed) buffers.drain();
    }
  } guard{b};

  auto slot = [&](size_t k) -> Buffers::Slot& { return b.slots[k % kSlots]; };
  b.begin();
  b.download(slot(0), items[chunks[0].item], chunks[0]);
  for (size_t k = 0; k < chunks.size(); ++k) {
    const Chunk& c = chunks[k];
    if (k + 1 < chunks.size()) b.download(slot(k + 1), items[chunks[k + 1].item], chunks[k + 1]);
    Buffers::Slot& s = slot(k);
    b.wait_download(s);
    update({.item = c.item, .offset = c.offset, .n = c.n, .param = s.param, .grad = s.grad});
    b.upload(s, items[c.item], c);
  }
  b.end();
  guard.armed = false;
}

}  // namespace genesis
