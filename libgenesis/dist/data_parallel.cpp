#include "libgenesis/dist/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#if GENESIS_WITH_CUDA
#include <cuda_runtime_api.h>

#include <deque>

#include "libgenesis/cuda/device_guard.h"
#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis::dist {

namespace {

struct Bucket {
  Tensor flat;                   // the gradients of its parameters, back to back (ZeRO-1: padded to chunk * ranks)
  std::vector<Tensor> params;    // in the order they are laid out
  std::vector<int64_t> offsets;  // of each parameter in flat
  std::vector<std::string> names;  // ZeRO-1: the optimizer's name of each parameter ("" when it has none)
  int64_t chunk = 0;             // ZeRO-1: elements per rank
  Tensor param_flat;             // ZeRO-1: the parameters' storage, laid out as flat
  Tensor grad_shard;             // ZeRO-1: this rank's chunk of the averaged gradients
  int64_t pending = 0;           // gradients not yet accumulated in the armed backward
  WorkHandle work;               // the running collective, once started
};

}  // namespace

struct DataParallel::State {
  Communicator* comm;
  bool sharded = false;
  DType wire = DType::f32;  // the dtype the buckets travel in
  std::vector<Bucket> buckets;
  bool armed = false;

  void start(Bucket& b) {
    // A parameter the backward did not reach still holds a zeroed-lazily gradient: make it zero.
    for (const Tensor& p : b.params) (void)p.grad();
    b.work = sharded ? comm->reduce_scatter_as(b.flat, b.grad_shard, ReduceOp::avg, wire)
                     : comm->all_reduce_as(b.flat, ReduceOp::avg, wire);
  }
};


#if GENESIS_WITH_CUDA
// The compute stream's stall on the collectives: an event before finish()'s waits and one after
// them; the time between is what the stream spent waiting. Read when the second has completed,
// so timing never blocks the host.
class DataParallel::StreamStall {
 public:
  explicit StreamStall(int device) : device_(device) {}
  ~StreamStall() {
    cuda::DeviceGuard guard(device_);
    for (auto [a, b] : pending_) {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  }
  void begin() { pending_.push_back({record(), nullptr}); }
  void end() {
    pending_.back().second = record();
    collect(false);
  }
  double seconds() {
    collect(true);
    return seconds_;
  }

 private:
  cudaEvent_t record() {
    cuda::DeviceGuard guard(device_);
    cudaEvent_t e = nullptr;
    GENESIS_CUDA_CHECK(cudaEventCreate(&e));
    GENESIS_CUDA_CHECK(cudaEventRecord(e, cuda::current_stream()));
    return e;
  }
  void collect(bool all) {
    cuda::DeviceGuard guard(device_);
    while (!pending_.empty() && pending_.front().second) {
      auto [a, b] = pending_.front();
      if (all) GENESIS_CUDA_CHECK(cudaEventSynchronize(b));
      else if (cudaEventQuery(b) != cudaSuccess) break;
      float ms = 0;
      GENESIS_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      seconds_ += ms / 1e3;
      cudaEventDestroy(a);
      cudaEventDestroy(b);
      pending_.pop_front();
    }
  }
  int device_;
  std::deque<std::pair<cudaEvent_t, cudaEvent_t>> pending_;
  double seconds_ = 0;
};
#else
class DataParallel::StreamStall {
 public:
  void begin() {}
  void end() {}
  double seconds() { return 0; }
};
#endif

DataParallel::~DataParallel() = default;

double DataParallel::wait_seconds() const { return stall_ ? stall_->seconds() : wait_seconds_; }

DataParallel::DataParallel(std::vector<Tensor> params, Communicator& comm, DataParallelOptions options)
    : params_(std::move(params)), comm_(comm), options_(options), state_(std::make_shared<State>()) {
  GENESIS_CHECK(!params_.empty(), ValueError, "data parallel: the model has no parameters");
  GENESIS_CHECK(options.bucket_mb >= 0, ValueError, "data parallel: bucket_mb must be >= 0");
  GENESIS_CHECK(options.zero == 0 || options.zero == 1, ValueError, "data parallel: zero must be 0 or 1 (got ",
                options.zero, ")");
  state_->comm = &comm;
  state_->sharded = sharded();
  const DType dtype = params_.front().dtype();
  const Device device = params_.front().device();
  state_->wire = options.reduce_dtype.value_or(dtype);
  GENESIS_CHECK(is_floating(state_->wire) && dtype_size(state_->wire) <= dtype_size(dtype), ValueError,
                "data parallel: gradients of ", dtype_name(dtype), " cannot travel as ", dtype_name(state_->wire),
                " (reduce_dtype must be a floating type no wider than the parameters)");
#if GENESIS_WITH_CUDA
  if (device.is_cuda()) stall_ = std::make_unique<StreamStall>(device.index);
#endif
  const auto bucket_bytes = static_cast<int64_t>(options.bucket_mb * 1024 * 1024);
  const int64_t ranks = comm.size(), rank = comm.rank();

  // Reverse order: the last layers' gradients arrive first in the backward.
  std::vector<std::vector<Tensor>> groups(1);
  int64_t group_bytes = 0;
  for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
    const Tensor& p = *it;
    GENESIS_CHECK(p.dtype() == dtype && p.device() == device, ValueError,
                  "data parallel: parameters of one dtype and device are expected; found ", dtype_name(p.dtype()),
                  " on ", p.device().str(), " next to ", dtype_name(dtype), " on ", device.str());
    if (bucket_bytes > 0 && group_bytes >= bucket_bytes) {
      groups.emplace_back();
      group_bytes = 0;
    }
    groups.back().push_back(p);
    group_bytes += p.numel() * static_cast<int64_t>(p.element_size());
  }

  NoGradGuard no_grad;
  for (std::vector<Tensor>& group : groups) {
    Bucket b;
    b.params = std::move(group);
    int64_t numel = 0;
    for (const Tensor& p : b.params) {
      b.offsets.push_back(numel);
      numel += p.numel();
    }
    b.names.resize(b.params.size());
    b.chunk = (numel + ranks - 1) / ranks;
    const int64_t padded = sharded() ? b.chunk * ranks : numel;
    b.flat = zeros({padded}, {.dtype = dtype, .device = device});
    for (size_t i = 0; i < b.params.size(); ++i) {
      Tensor& p = b.params[i];
      Tensor view = b.flat.narrow(0, b.offsets[i], p.numel()).view(p.shape());
      if (Tensor g = p.grad(); g.defined()) view.copy_(g);
      p.set_grad(view);
    }
    if (sharded()) {
      // The parameters move into one buffer of the gradients' layout: chunk r of it is what rank r
      // updates and then sends to the others.
      b.param_flat = zeros({padded}, {.dtype = dtype, .device = device});
      for (size_t i = 0; i < b.params.size(); ++i) {
        Tensor& p = b.params[i];
        Tensor home = b.param_flat.narrow(0, b.offsets[i], p.numel()).view(p.shape());
        home.copy_(p.detach());
        p.set_data(home);
      }
      b.grad_shard = zeros({b.chunk}, {.dtype = dtype, .device = device});
      Tensor shard = b.param_flat.narrow(0, rank * b.chunk, b.chunk).detach();
      shard.requires_grad_(true);
      shard.set_grad(b.grad_shard);
      shards_.push_back(shard);
    }
    state_->buckets.push_back(std::move(b));
  }

  // The hooks hold the state weakly: the parameters may outlive this object.
  for (size_t i = 0; i < state_->buckets.size(); ++i) {
    for (Tensor& p : state_->buckets[i].params) {
      p.register_post_accumulate_grad_hook([weak = std::weak_ptr<State>(state_), i](const Tensor&) {
        const std::shared_ptr<State> state = weak.lock();
        if (!state || !state->armed) return;
        Bucket& b = state->buckets[i];
        if (--b.pending == 0) state->start(b);
      });
    }
  }
}

int64_t DataParallel::bucket_count() const { return static_cast<int64_t>(state_->buckets.size()); }

void DataParallel::broadcast_parameters() {
  NoGradGuard no_grad;
  std::vector<WorkHandle> works;
  std::vector<Tensor> sent;
  if (sharded()) {
    for (Bucket& b : state_->buckets) {
      works.push_back(comm_.broadcast(b.param_flat, 0));
      b.param_flat.storage()->bump_version();
    }
  } else {
    for (const Tensor& p : params_) {
      Tensor data = p.detach();
      works.push_back(comm_.broadcast(data, 0));
      sent.push_back(data);
    }
  }
  for (const WorkHandle& w : works) w->wait();
}

void DataParallel::arm() {
  for (Bucket& b : state_->buckets) {
    // Something replaced a .grad (zero_grad(set_to_none), a load): make it a view of the bucket again.
    for (size_t i = 0; i < b.params.size(); ++i) {
      Tensor& p = b.params[i];
      const Tensor& g = p.autograd_meta()->grad;
      const void* expected =
          static_cast<const char*>(b.flat.data_ptr()) + b.offsets[i] * static_cast<int64_t>(p.element_size());
      if (!g.defined() || g.data_ptr() != expected) {
        NoGradGuard no_grad;
        Tensor view = b.flat.narrow(0, b.offsets[i], p.numel()).view(p.shape());
        if (g.defined()) view.copy_(p.grad());
        else view.zero_();
        p.set_grad(view);
      }
    }
    b.pending = static_cast<int64_t>(b.params.size());
    b.work.reset();
  }
  state_->armed = true;
}

void DataParallel::finish() {
  GENESIS_CHECK(state_->armed, ValueError, "data parallel: finish() without arm() before the backward");
  state_->armed = false;
  for (Bucket& b : state_->buckets)
    if (!b.work) state_->start(b);
  const auto t0 = std::chrono::steady_clock::now();
  if (stall_) stall_->begin();
  for (Bucket& b : state_->buckets) {
    b.work->wait();
    b.work.reset();
  }
  if (stall_) stall_->end();
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Tensor DataParallel::average(const Tensor& value) {
  Tensor mean = value.detach().contiguous().clone();
  comm_.all_reduce(mean, ReduceOp::avg)->wait();
  return mean;
}

const std::vector<Tensor>& DataParallel::update_params() const { return sharded() ? shards_ : params_; }

Tensor DataParallel::clip_grad_norm(double max_norm) {
  if (!sharded()) return genesis::clip_grad_norm(params_, max_norm);
  NoGradGuard no_grad;
  // Each rank measures its chunks (the padding is zero); the squares add up over the ranks.
  Tensor local = genesis::clip_grad_norm(shards_, 0.0);
  Tensor squares = mul(local, local);
  comm_.all_reduce(squares, ReduceOp::sum)->wait();
  Tensor norm = sqrt(squares);
  if (max_norm > 0.0) {
    std::vector<Tensor> grads;
    for (const Tensor& shard : shards_) grads.push_back(shard.grad());
    genesis::scale_grads_by_clip(grads, norm, max_norm);
  }
  return norm;
}

void DataParallel::agree_found_inf(const Tensor& found_inf) {
  if (!sharded()) return;  // every rank unscaled the same averaged gradients
  Tensor flag = found_inf;
  comm_.all_reduce(flag, ReduceOp::max)->wait();
}

void DataParallel::gather_parameters() {
  if (!sharded()) return;
  NoGradGuard no_grad;
  std::vector<WorkHandle> works;
  for (Bucket& b : state_->buckets) {
    Tensor mine = b.param_flat.narrow(0, comm_.rank() * b.chunk, b.chunk);
    works.push_back(comm_.all_gather(mine, b.param_flat));
    b.param_flat.storage()->bump_version();
  }
  for (const WorkHandle& w : works) w->wait();
}

void DataParallel::zero_grad() {
  NoGradGuard no_grad;
  for (Tensor& p : params_) p.zero_grad_();
}

std::vector<ParamGroup> DataParallel::shard_groups(const std::vector<ParamGroup>& groups) {
  GENESIS_CHECK(sharded(), ValueError, "data parallel: shard_groups needs zero = 1");
  GENESIS_CHECK(pieces_.empty(), ValueError, "data parallel: shard_groups was called before");
  std::map<const TensorImpl*, std::pair<size_t, size_t>> where;  // parameter -> (bucket, index)
  for (size_t bi = 0; bi < state_->buckets.size(); ++bi)
    for (size_t i = 0; i < state_->buckets[bi].params.size(); ++i)
      where[state_->buckets[bi].params[i].impl_ptr().get()] = {bi, i};
  const int64_t rank = comm_.rank();
  std::vector<ParamGroup> out;
  NoGradGuard no_grad;
  for (const ParamGroup& g : groups) {
    ParamGroup cut = g;
    cut.params.clear();
    for (const NamedTensor& p : g.params) {
      auto it = where.find(p.tensor.impl_ptr().get());
      GENESIS_CHECK(it != where.end(), ValueError, "data parallel: optimizer parameter '", p.name,
                    "' is not one of the model's parameters");
      auto [bi, i] = it->second;
      Bucket& b = state_->buckets[bi];
      b.names[i] = p.name;
      const int64_t offset = b.offsets[i];
      const int64_t lo = std::max(offset, rank * b.chunk);
      const int64_t hi = std::min(offset + p.tensor.numel(), (rank + 1) * b.chunk);
      if (lo >= hi) continue;  // all of it lies in other ranks' chunks
      Tensor piece = b.param_flat.narrow(0, lo, hi - lo).detach();
      piece.requires_grad_(true);
      piece.set_grad(b.grad_shard.narrow(0, lo - rank * b.chunk, hi - lo));
      cut.params.push_back({p.name, piece});
      pieces_.push_back({p.name, bi, offset, p.tensor.numel(), lo, hi - lo});
    }
    out.push_back(std::move(cut));
  }
  return out;
}

std::vector<NamedTensor> DataParallel::full_optimizer_state(const Optimizer& optimizer) {
  GENESIS_CHECK(sharded(), ValueError, "data parallel: full_optimizer_state needs zero = 1");
  NoGradGuard no_grad;
  std::map<std::string, Tensor> local;
  for (NamedTensor& t : optimizer.state()) local[t.name] = t.tensor;
  // Every piece is updated on every step (skipped steps skip them all), so one count serves all;
  // a rank whose chunks hold no piece learns it from the others.
  int64_t steps = 0;
  for (const Piece& piece : pieces_)
    if (auto it = local.find(piece.name + ".step"); it != local.end()) steps = std::max(steps, it->second.item<int64_t>());
  const Device device = params_.front().device();
  Tensor agreed = scalar_tensor(static_cast<double>(steps), {.dtype = DType::i64, .device = device}).reshape({1});
  comm_.all_reduce(agreed, ReduceOp::max)->wait();
  steps = agreed.item<int64_t>();
  if (steps == 0) return {};  // no update applied yet: no state, as Optimizer::state() says it

  const bool root = comm_.rank() == 0;
  const int64_t rank = comm_.rank();
  std::vector<NamedTensor> out;
  for (size_t bi = 0; bi < state_->buckets.size(); ++bi) {
    const Bucket& b = state_->buckets[bi];
    for (const std::string& slot : optimizer.slot_names()) {
      Tensor whole = zeros({b.flat.numel()}, {.dtype = b.param_flat.dtype(), .device = device});
      Tensor mine = whole.narrow(0, rank * b.chunk, b.chunk);
      for (const Piece& piece : pieces_) {
        if (piece.bucket != bi) continue;
        auto it = local.find(piece.name + "." + slot);
        GENESIS_CHECK(it != local.end(), ValueError, "data parallel: the optimizer has no '", piece.name, ".", slot, "'");
        mine.narrow(0, piece.start - rank * b.chunk, piece.length).copy_(it->second);
      }
      comm_.all_gather(mine, whole)->wait();
      if (!root) continue;
      for (size_t i = 0; i < b.params.size(); ++i) {
        if (b.names[i].empty()) continue;
        out.push_back({b.names[i] + "." + slot,
                       whole.narrow(0, b.offsets[i], b.params[i].numel()).view(b.params[i].shape()).to(kCPU).clone()});
      }
    }
    if (root)
      for (size_t i = 0; i < b.params.size(); ++i)
        if (!b.names[i].empty())
          out.push_back({b.names[i] + ".step", scalar_tensor(static_cast<double>(steps), {.dtype = DType::i64})});
  }
  return out;
}

void DataParallel::load_full_optimizer_state(Optimizer& optimizer, const std::vector<NamedTensor>& state,
                                             int64_t step_count) {
  GENESIS_CHECK(sharded(), ValueError, "data parallel: load_full_optimizer_state needs zero = 1");
  std::map<std::string, Tensor> by_name;
  for (const NamedTensor& t : state) by_name[t.name] = t.tensor;
  std::vector<NamedTensor> mine;
  for (const Piece& piece : pieces_) {
    auto step = by_name.find(piece.name + ".step");
    if (step == by_name.end()) continue;  // never updated before the checkpoint
    mine.push_back({step->first, step->second});
    for (const std::string& slot : optimizer.slot_names()) {
      const std::string key = piece.name + "." + slot;
      auto it = by_name.find(key);
      GENESIS_CHECK(it != by_name.end(), ValueError, "optimizer state: missing '", key, "'");
      const Tensor flat = it->second.reshape({-1});
      GENESIS_CHECK(flat.numel() == piece.param_numel, ShapeError, "optimizer state: '", key, "' holds ",
                    flat.numel(), " elements but the parameter ", piece.param_numel);
      mine.push_back({key, flat.narrow(0, piece.start - piece.param_offset, piece.length)});
    }
  }
  optimizer.load_state(mine, step_count);
}

}  // namespace genesis::dist
