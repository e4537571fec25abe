#include "libgenesis/dist/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/dist/failure.h"
#include "libgenesis/cuda/caching_allocator.h"
#include "libgenesis/cuda/runtime.h"
#include "libgenesis/ops/factory.h"

namespace genesis::dist {

namespace {

using Clock = std::chrono::steady_clock;

#define GENESIS_NCCL_CHECK(expr)                                                                      \
  do {                                                                                                \
    ncclResult_t genesis_nccl_ = (expr);                                                              \
    if (genesis_nccl_ != ncclSuccess) nccl_failed(#expr, genesis_nccl_);                              \
  } while (0)

[[noreturn]] void nccl_failed(const char* call, ncclResult_t result) {
  const std::string message = detail::concat("nccl: ", call, " failed: ", ncclGetErrorString(result), " (",
                                             ncclGetLastError(nullptr), ")");
  report_failure(message);
  throw DistError(message);
}

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
      : host_(host), rank_(host.rank()), size_(host.size()), device_(device.index), timeout_s_(timeout_s) {
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
    poller_ = std::thread([this] { poll(); });
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    std::vector<std::pair<cudaEvent_t, bool>> running;
    {
      std::lock_guard lock(mutex_);
      for (const Running& r : running_) running.push_back({r.event, r.recorded});
    }
    bool pending = false;
    for (auto [event, recorded] : running) pending |= !recorded || cudaEventQuery(event) != cudaSuccess;
    {
      std::lock_guard lock(mutex_);
      aborting_ = pending || std::uncaught_exceptions() > 0;
    }
    // Torn down while an error unwinds or a collective is unfinished (a peer may be gone): abort
    // rather than wait for work that may never end, and wait for the abort a bounded time (it
    // can itself wait on a stuck kernel); the process is ending then. The watchdog keeps running
    // meanwhile.
    if (aborting_) {
      release_comm();
      auto done = std::make_shared<std::atomic<bool>>(false);
      std::thread([comm = comm_, done] {
        ncclCommAbort(comm);
        *done = true;
      }).detach();
      for (int i = 0; i < 100 && !*done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!*done) {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        cv_.notify_all();
        // Leave the threads and the stream to the process's end: they may be stuck with NCCL.
        poller_.detach();
        watchdog_.detach();
        return;
      }
    } else {
      cudaStreamSynchronize(stream_);
      release_comm();
      ncclCommDestroy(comm_);
    }
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    poller_.join();
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "nccl"; }

  WorkHandle all_reduce(Tensor& t, ReduceOp op) override {
    check(t, "all_reduce");
    return launch("all_reduce", bytes_of(t), {&t}, [&] {
      GENESIS_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                                       nccl_op(op), comm_, stream_));
    });
  }

  WorkHandle reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) override {
    check_scatter(in, out, in.dtype());
    return launch("reduce_scatter", bytes_of(in), {&in, &out}, [&] {
      GENESIS_NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()),
                                           nccl_type(in.dtype()), nccl_op(op), comm_, stream_));
    });
  }

  // The casts to and from the wire dtype run on our stream too, so the one back overlaps what
  // the current stream does next instead of waiting in it.
  WorkHandle all_reduce_as(Tensor& t, ReduceOp op, DType wire) override {
    if (wire == t.dtype()) return all_reduce(t, op);
    check(t, "all_reduce");
    check_wire_dtype(t, wire, "nccl all_reduce");
    Tensor narrow;
    return launch(
        "all_reduce", t.numel() * static_cast<int64_t>(dtype_size(wire)), {&t},
        [&] {
          GENESIS_NCCL_CHECK(ncclAllReduce(narrow.data_ptr(), narrow.data_ptr(), static_cast<size_t>(narrow.numel()),
                                           nccl_type(wire), nccl_op(op), comm_, stream_));
        },
        [&] { narrow = t.to(wire); }, [&] { t.copy_(narrow); });
  }

  WorkHandle reduce_scatter_as(const Tensor& in, Tensor& out, ReduceOp op, DType wire) override {
    if (wire == in.dtype()) return reduce_scatter(in, out, op);
    check_scatter(in, out, in.dtype());
    check_wire_dtype(in, wire, "nccl reduce_scatter");
    Tensor narrow_in, narrow_out;
    return launch(
        "reduce_scatter", in.numel() * static_cast<int64_t>(dtype_size(wire)), {&in, &out},
        [&] {
          GENESIS_NCCL_CHECK(ncclReduceScatter(narrow_in.data_ptr(), narrow_out.data_ptr(),
                                               static_cast<size_t>(narrow_out.numel()), nccl_type(wire), nccl_op(op),
                                               comm_, stream_));
        },
        [&] {
          narrow_in = in.to(wire);
          narrow_out = empty(out.shape(), {.dtype = wire, .device = out.device()});
        },
        [&] { out.copy_(narrow_out); });
  }

  WorkHandle all_gather(const Tensor& in, Tensor& out) override {
    check(in, "all_gather");
    check(out, "all_gather");
    GENESIS_CHECK(in.dtype() == out.dtype() && out.numel() == in.numel() * size_, ValueError, "nccl all_gather: output of ",
                  out.numel(), " elements for ", size_, " ranks of ", in.numel(), " elements each");
    return launch("all_gather", bytes_of(in), {&in, &out}, [&] {
      GENESIS_NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()),
                                       nccl_type(in.dtype()), comm_, stream_));
    });
  }

  WorkHandle broadcast(Tensor& t, int root) override {
    check(t, "broadcast");
    GENESIS_CHECK(root >= 0 && root < size_, ValueError, "nccl broadcast: root ", root, " is not a rank");
    return launch("broadcast", bytes_of(t), {&t}, [&] {
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

  void check_scatter(const Tensor& in, const Tensor& out, DType dtype) const {
    check(in, "reduce_scatter");
    check(out, "reduce_scatter");
    GENESIS_CHECK(in.dtype() == dtype && out.dtype() == dtype && in.numel() == out.numel() * size_, ValueError,
                  "nccl reduce_scatter: input of ", in.numel(), " elements for ", size_, " ranks needs an output of ",
                  in.numel() / size_, " elements of its dtype");
  }

  static int64_t bytes_of(const Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

  // Enqueues `call` on the communicator's stream after the work queued so far on the current
  // stream, with `before` and `after` (ops, e.g. casts) around it on that stream; the watchdog
  // follows it until it completes. `used`: the tensors the work reads or writes.
  WorkHandle launch(const char* what, int64_t bytes, std::initializer_list<const Tensor*> used,
                    const std::function<void()>& call, const std::function<void()>& before = {},
                    const std::function<void()>& after = {}) {
    GENESIS_CUDA_CHECK(cudaSetDevice(device_));
    cudaEvent_t ready = nullptr, done = nullptr, watched = nullptr;
    GENESIS_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    GENESIS_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    GENESIS_CUDA_CHECK(cudaEventCreateWithFlags(&watched, cudaEventDisableTiming));
    GENESIS_CUDA_CHECK(cudaEventRecord(ready, cuda::current_stream()));
    GENESIS_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    cudaEventDestroy(ready);
    // The buffers are in use on our stream too: the caching allocator must not hand them out
    // again before it is done with them.
    for (const Tensor* t : used) cuda::record_stream(t->storage()->data(), device_, stream_);
    // Once watched, the entry is marked recorded however this ends, so that the poller can retire
    // it (an exception here leaves no collective behind that the watchdog must wait for).
    auto mark_recorded = [&] {
      cudaEventRecord(watched, stream_);
      {
        std::lock_guard lock(mutex_);
        for (Running& r : running_)
          if (r.event == watched) r.recorded = true;
      }
      cv_.notify_all();
    };
    bool watching = false;
    try {
      cuda::StreamGuard ours(stream_);
      NoGradGuard no_grad;
      if (before) before();
      // Watched from before the call: NCCL may block inside it (a first use of a connection to a
      // dead peer), and the watchdog must see that too.
      {
        std::lock_guard lock(mutex_);
        running_.push_back({watched, Clock::now(), std::string(what) + " of " + std::to_string(bytes) + " bytes"});
        watching = true;
      }
      call();
      if (after) after();
    } catch (...) {
      if (watching) mark_recorded();
      else cudaEventDestroy(watched);
      cudaEventDestroy(done);
      throw;
    }
    GENESIS_CUDA_CHECK(cudaEventRecord(done, stream_));
    mark_recorded();
    return std::make_shared<NcclWork>(done, device_);
  }

  // Two threads follow the running collectives. The poller asks CUDA which have finished and NCCL
  // for an asynchronous error; either call may block while the compute thread is stuck behind a
  // collective that cannot finish, so the watchdog, which decides, calls neither: it reads the
  // oldest unfinished collective's age, the poller's findings and the host communicator's word on
  // the peers, and ends the process (see the header).
  void poll() {
    cudaSetDevice(device_);
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      while (!running_.empty() && running_.front().recorded) {
        const cudaEvent_t event = running_.front().event;
        lock.unlock();
        const bool done = cudaEventQuery(event) == cudaSuccess;
        lock.lock();
        if (!done || running_.empty() || running_.front().event != event) break;
        running_.pop_front();
        // Not under the lock: the call can block while the compute thread waits in the driver,
        // and the watchdog must still get the lock to decide.
        lock.unlock();
        cudaEventDestroy(event);
        lock.lock();
      }
      lock.unlock();
      ncclResult_t async = ncclSuccess;
      {
        std::lock_guard comm_lock(comm_mutex_);
        if (!comm_released_) ncclCommGetAsyncError(comm_, &async);
      }
      lock.lock();
      if (async != ncclSuccess && async != ncclInProgress) async_error_ = async;
    }
  }

  void watch() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      const double running_s =
          running_.empty() ? 0.0 : std::chrono::duration<double>(Clock::now() - running_.front().started).count();
      const std::string what = running_.empty() ? std::string() : running_.front().what;
      const ncclResult_t async = async_error_;
      const bool aborting = aborting_;  // the destructor's abort is under way: not a second one
      lock.unlock();
      // A collective that waits for long: the host communicator can tell whether a peer is gone
      // (NCCL itself may wait for a dead peer forever).
      const std::string lost = running_s > kPeerCheckAfterS ? host_.lost_peers() : std::string();
      std::string problem;
      if (async != ncclSuccess) {
        problem = std::string("an NCCL error: ") + ncclGetErrorString(async) +
                  (lost.empty() ? " (a rank died or the network failed)" : "; " + lost);
      } else if (!lost.empty()) {
        problem = what + " cannot complete: " + lost;
      } else if (running_s > timeout_s_) {
        problem = what + " did not complete within " + std::to_string(timeout_s_) +
                  " s (a rank died or hangs; dist.timeout_s)";
      }
      if (!problem.empty()) {
        announce_failure(detail::concat("nccl, rank ", rank_, " of ", size_, ": ", problem, "; aborting"));
        // The abort can itself wait on a stuck kernel: give it a moment, then exit regardless
        // (the driver tears the context down).
        if (!aborting) {
          release_comm();
          std::thread([comm = comm_] { ncclCommAbort(comm); }).detach();
        }
        std::this_thread::sleep_for(std::chrono::seconds(2));
        std::_Exit(1);
      }
      lock.lock();
    }
  }

  // From here on the poller leaves the NCCL communicator alone (it is being aborted or destroyed).
  void release_comm() {
    std::lock_guard comm_lock(comm_mutex_);
    comm_released_ = true;
  }

  struct Running {
    cudaEvent_t event;  // recorded after the collective (an unrecorded event would query as done)
    Clock::time_point started;
    std::string what;
    bool recorded = false;
  };

  // How long a collective runs before the watchdog asks the host communicator about the peers.
  static constexpr double kPeerCheckAfterS = 2.0;

  Communicator& host_;  // outlives this communicator (the process group destroys it last)
  int rank_, size_, device_;
  double timeout_s_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::thread poller_, watchdog_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Running> running_;
  ncclResult_t async_error_ = ncclSuccess;  // the poller's finding
  bool aborting_ = false;                    // the destructor aborts the communicator
  bool stopping_ = false;
  std::mutex comm_mutex_;  // orders the poller's NCCL queries before the communicator's release
  bool comm_released_ = false;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, Device device, double timeout_s) {
  return std::make_unique<NcclCommunicator>(host, device, timeout_s);
}

}  // namespace genesis::dist
