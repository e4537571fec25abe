#include "libgenesis/dist/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "libgenesis/core/error.h"
#include "libgenesis/cuda/caching_allocator.h"
#include "libgenesis/cuda/runtime.h"
#include "libgenesis/ops/factory.h"

namespace genesis::dist {

namespace {

using Clock = std::chrono::steady_clock;

#define GENESIS_NCCL_CHECK(expr)                                                                      \
  do {                                                                                                \
    ncclResult_t genesis_nccl_ = (expr);                                                              \
    GENESIS_CHECK(genesis_nccl_ == ncclSuccess, DistError, "nccl: ", #expr, " failed: ",              \
                  ncclGetErrorString(genesis_nccl_), " (", ncclGetLastError(nullptr), ")");           \
  } while (0)

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    default: throw_unsupported_dtype("nccl collective", dtype);
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

class NcclWork final : public Work {
 public:
  NcclWork(cudaEvent_t done, int device) : done_(done), device_(device) {}
  ~NcclWork() override { cudaEventDestroy(done_); }
  // Orders the current stream after the collective; the host does not wait.
  void wait() override {
    GENESIS_CUDA_CHECK(cudaSetDevice(device_));
    GENESIS_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(), done_, 0));
  }

 private:
  cudaEvent_t done_;
  int device_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& host, Device device, double timeout_s)
      : rank_(host.rank()), size_(host.size()), device_(device.index), timeout_s_(timeout_s) {
    GENESIS_CHECK(device.is_cuda(), DeviceError, "nccl: the communicator needs a CUDA device, not ", device.str());
    GENESIS_CUDA_CHECK(cudaSetDevice(device_));
    ncclUniqueId id{};
    static_assert(sizeof(ncclUniqueId) % sizeof(int64_t) == 0);
    Tensor id_bytes = zeros({static_cast<int64_t>(sizeof id / sizeof(int64_t))}, {.dtype = DType::i64});
    if (rank_ == 0) {
      GENESIS_NCCL_CHECK(ncclGetUniqueId(&id));
      std::memcpy(id_bytes.data_ptr(), &id, sizeof id);
    }
    host.broadcast(id_bytes, 0)->wait();
    std::memcpy(&id, id_bytes.data_ptr(), sizeof id);
    GENESIS_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
    GENESIS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "nccl"; }

  WorkHandle all_reduce(Tensor& t, ReduceOp op) override {
    check(t, "all_reduce");
    return launch("all_reduce", t, [&] {
      GENESIS_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                                       nccl_op(op), comm_, stream_));
    });
  }

  WorkHandle reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    check(in, "reduce_scatter");
    check(out, "reduce_scatter");
    GENESIS_CHECK(in.dtype() == out.dtype() && in.numel() == out.numel() * size_, ValueError,
                  "nccl reduce_scatter: input of ", in.numel(), " elements for ", size_, " ranks needs an output of ",
                  in.numel() / size_, " elements of its dtype");
    return launch("reduce_scatter", in, [&] {
      GENESIS_NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()),
                                           nccl_type(in.dtype()), nccl_op(op), comm_, stream_));
    }, &out);
  }

  WorkHandle all_gather(const Tensor& in, Tensor& out) override {
    check(in, "all_gather");
    check(out, "all_gather");
    GENESIS_CHECK(in.dtype() == out.dtype() && out.numel() == in.numel() * size_, ValueError, "nccl all_gather: output of ",
                  out.numel(), " elements for ", size_, " ranks of ", in.numel(), " elements each");
    return launch("all_gather", in, [&] {
      GENESIS_NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()),
                                       nccl_type(in.dtype()), comm_, stream_));
    }, &out);
  }

  WorkHandle broadcast(Tensor& t, int root) override {
    check(t, "broadcast");
    GENESIS_CHECK(root >= 0 && root < size_, ValueError, "nccl broadcast: root ", root, " is not a rank");
    return launch("broadcast", t, [&] {
      GENESIS_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                                       root, comm_, stream_));
    });
  }

  void barrier() override {
    Tensor one = ones({1}, {.dtype = DType::f32, .device = Device(DeviceType::cuda, device_)});
    all_reduce(one, ReduceOp::sum)->wait();
    cuda::synchronize();
  }

 private:
  void check(const Tensor& t, const char* what) const {
    GENESIS_CHECK(t.defined() && t.device().is_cuda() && t.device().index == device_, DeviceError, "nccl ", what,
                  ": the tensor is on ", t.device().str(), " but this rank's communicator on cuda:", device_);
    GENESIS_CHECK(t.is_contiguous(), ValueError, "nccl ", what, ": the tensor must be contiguous");
  }

  // Enqueues `call` on the communicator's stream after the work queued so far on the current
  // stream; the watchdog follows it until it completes.
  template <class Call>
  WorkHandle launch(const char* what, const Tensor& t, Call&& call, const Tensor* second = nullptr) {
    GENESIS_CUDA_CHECK(cudaSetDevice(device_));
    cudaEvent_t ready = nullptr, done = nullptr;
    GENESIS_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    GENESIS_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    GENESIS_CUDA_CHECK(cudaEventRecord(ready, cuda::current_stream()));
    GENESIS_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    cudaEventDestroy(ready);
    call();
    GENESIS_CUDA_CHECK(cudaEventRecord(done, stream_));
    // The buffers are in use on our stream too: the caching allocator must not hand them out
    // again before it is done with them.
    cuda::record_stream(t.storage()->data(), device_, stream_);
    if (second) cuda::record_stream(second->storage()->data(), device_, stream_);
    cudaEvent_t watched = nullptr;
    GENESIS_CUDA_CHECK(cudaEventCreateWithFlags(&watched, cudaEventDisableTiming));
    GENESIS_CUDA_CHECK(cudaEventRecord(watched, stream_));
    {
      std::lock_guard lock(mutex_);
      running_.push_back({watched, Clock::now(), std::string(what) + " of " +
                                                     std::to_string(t.numel() * static_cast<int64_t>(t.element_size())) +
                                                     " bytes"});
    }
    cv_.notify_all();
    return std::make_shared<NcclWork>(done, device_);
  }

  // The watchdog: collectives that finish are forgotten; an NCCL error or one that runs past
  // the timeout ends the process (see the header).
  void watch() {
    cudaSetDevice(device_);
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      while (!running_.empty() && cudaEventQuery(running_.front().event) == cudaSuccess) {
        cudaEventDestroy(running_.front().event);
        running_.pop_front();
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      std::string problem;
      if (async != ncclSuccess && async != ncclInProgress) {
        problem = std::string("an NCCL error: ") + ncclGetErrorString(async) + " (a rank died or the network failed)";
      } else if (!running_.empty() &&
                 Clock::now() - running_.front().started > std::chrono::duration<double>(timeout_s_)) {
        problem = running_.front().what + " did not complete within " + std::to_string(timeout_s_) +
                  " s (a rank died or hangs; dist.timeout_s)";
      }
      if (!problem.empty()) {
        std::fprintf(stderr, "genesis: error: nccl, rank %d of %d: %s; aborting\n", rank_, size_, problem.c_str());
        std::fflush(stderr);
        ncclCommAbort(comm_);
        std::_Exit(1);
      }
    }
  }

  struct Running {
    cudaEvent_t event;
    Clock::time_point started;
    std::string what;
  };

  int rank_, size_, device_;
  double timeout_s_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::thread watchdog_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Running> running_;
  bool stopping_ = false;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, Device device, double timeout_s) {
  return std::make_unique<NcclCommunicator>(host, device, timeout_s);
}

}  // namespace genesis::dist
