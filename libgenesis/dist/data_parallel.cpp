#include "libgenesis/dist/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <set>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#if GENESIS_WITH_CUDA
#include <cuda_runtime_api.h>

#include "libgenesis/cuda/device_guard.h"
#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis::dist {

namespace {

struct Bucket {
  Tensor flat;                   // the gradients of its parameters, back to back (ZeRO: padded to chunk * ranks;
                                 // ZeRO-2/3: resident from the armed backward's first gradient to its reduce-scatter's end)
  std::vector<Tensor> params;    // in the order they are laid out
  std::vector<int64_t> offsets;  // of each parameter in flat
  std::vector<std::string> names;  // ZeRO: the optimizer's name of each parameter ("" when it has none)
  std::vector<char> arrived;     // ZeRO-2/3: the parameter's gradient is in flat (this armed backward)
  int64_t chunk = 0;             // ZeRO: elements per rank
  Tensor param_flat;             // ZeRO: the parameters' storage, laid out as flat (ZeRO-3: resident while whole)
  Tensor param_shard;            // ZeRO: this rank's chunk of param_flat (ZeRO-3: its own storage, kept)
  Tensor grad_shard;             // ZeRO: this rank's chunk of the averaged gradients
  int64_t pending = 0;           // gradients not yet accumulated in the armed backward
  WorkHandle work;               // the running collective, once started (reset once waited for)
  bool started = false;          // its collective started in this armed backward
  // ZeRO-3: whether the whole parameters are resident (arriving: an all-gather is filling them).
  enum class Whole { no, arriving, yes } whole = Whole::yes;
  bool exact = true;  // ZeRO-3: the whole parameters hold the shards' values (not rounded on the wire)
  WorkHandle gather;
  // ZeRO-3: the tensors of the unit's frozen parameters (any dtypes), kept back to back in one
  // buffer of 4-byte words, each at a 256-byte boundary; sharded and gathered with the unit in
  // their own bytes, never reduced.
  std::vector<Tensor> frozen;
  Tensor frozen_flat;   // resident while whole
  Tensor frozen_shard;  // this rank's chunk of frozen_flat, its own storage
  WorkHandle frozen_gather;
  // ZeRO-3, while counting: what the backward has yet to pass before the unit is freed (its
  // gradients, and the block's input gradient when one flows).
  int64_t until_free = 0;
  bool counting = false;
};

// ZeRO-3: moves `tensors` (a unit's frozen parameters) into one buffer of 4-byte words, each at a
// 256-byte boundary (what vectorized kernels may assume of their own allocations), padded to
// `ranks` equal chunks; each tensor becomes a view of it, and this rank's chunk is kept apart.
void place_frozen(Bucket& b, std::vector<Tensor> tensors, Device device, int64_t ranks, int64_t rank) {
  if (tensors.empty()) return;
  constexpr int64_t kAlign = 256, kWord = 4;
  std::vector<int64_t> at;  // byte offsets
  int64_t bytes = 0;
  for (const Tensor& t : tensors) {
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    at.push_back(bytes);
    bytes += t.numel() * static_cast<int64_t>(t.element_size());
  }
  const int64_t words = (bytes + kWord - 1) / kWord;
  const int64_t chunk = (words + ranks - 1) / ranks;
  b.frozen_flat = zeros({chunk * ranks}, {.dtype = DType::i32, .device = device});
  for (size_t i = 0; i < tensors.size(); ++i) {
    Tensor& t = tensors[i];
    const auto size = static_cast<int64_t>(t.element_size());
    Tensor home(std::make_shared<TensorImpl>(b.frozen_flat.storage(), t.shape(), contiguous_strides(t.shape()),
                                             at[i] / size, t.dtype()));
    home.copy_(t.detach());
    t.set_data(home);
  }
  b.frozen = std::move(tensors);
  b.frozen_shard = b.frozen_flat.narrow(0, rank * chunk, chunk).clone();
}

}  // namespace

struct DataParallel::State {
  Communicator* comm;
  int zero = 0;
  DType wire = DType::f32;         // the dtype the buckets travel in
  DType gather_wire = DType::f32;  // ZeRO-3: the dtype the units' gathers for computing travel in
  std::vector<Bucket> buckets;
  std::vector<size_t> unit_bucket;  // ZeRO-3: unit -> its bucket
  std::deque<size_t> in_flight;     // ZeRO-2/3: buckets whose reduce-scatter runs, oldest first
  bool armed = false;

  bool sharded() const { return zero > 0; }
  bool copies_grads() const { return zero >= 2; }

  void start(Bucket& b) {
    if (copies_grads()) {
      // A parameter whose gradient did not arrive in this backward: what earlier micro-batches
      // accumulated, or zero; the padding is zero.
      b.flat.storage()->restore();
      for (size_t i = 0; i < b.params.size(); ++i) {
        if (b.arrived[i]) continue;
        Tensor slot = b.flat.narrow(0, b.offsets[i], b.params[i].numel());
        if (b.params[i].autograd_meta() && b.params[i].autograd_meta()->grad.defined())
          slot.copy_(b.params[i].grad().reshape({-1}));
        else
          slot.zero_();
      }
      const int64_t used = b.offsets.back() + b.params.back().numel();
      if (used < b.flat.numel()) b.flat.narrow(0, used, b.flat.numel() - used).zero_();
    } else {
      // A parameter the backward did not reach still holds a zeroed-lazily gradient: make it zero.
      for (const Tensor& p : b.params) (void)p.grad();
    }
    b.started = true;
    b.work = sharded() ? comm->reduce_scatter_as(b.flat, b.grad_shard, ReduceOp::avg, wire)
                       : comm->all_reduce_as(b.flat, ReduceOp::avg, wire);
    if (copies_grads()) in_flight.push_back(static_cast<size_t>(&b - buckets.data()));
  }

  // Waits for a started bucket; ZeRO-2/3 free its whole gradients.
  void retire(Bucket& b) {
    b.work->wait();
    b.work.reset();
    if (copies_grads()) b.flat.storage()->release();
  }

  // ZeRO-2/3, in the armed backward: parameter i of bucket bi has its gradient.
  void take_gradient(size_t bi, size_t i) {
    Bucket& b = buckets[bi];
    Tensor& p = b.params[i];
    b.flat.storage()->restore();
    b.flat.narrow(0, b.offsets[i], p.numel()).copy_(p.grad().reshape({-1}));
    p.set_grad(Tensor());
    b.arrived[i] = 1;
  }

  void on_gradient(size_t bi, size_t i) {
    Bucket& b = buckets[bi];
    if (armed) {
      if (copies_grads()) take_gradient(bi, i);
      if (--b.pending == 0) {
        start(b);
        // At most two buckets' whole gradients in flight: the oldest goes once a third starts.
        while (in_flight.size() > 2) {
          retire(buckets[in_flight.front()]);
          in_flight.pop_front();
        }
      }
    }
    if (b.counting) passed(b);
  }

  // --- ZeRO-3 units ---
  // Makes the unit's parameters whole: for computing, on the gathers' wire; `exact` (checkpoints,
  // the start's broadcast) in the shards' own dtype, gathering again what a narrower wire rounded.
  void gather(Bucket& b, bool wait, bool exact = false) {
    if (b.whole == Bucket::Whole::no && b.params.empty() && b.frozen.empty()) b.whole = Bucket::Whole::yes;
    if (exact && !b.exact && b.whole != Bucket::Whole::no) free(b);
    if (b.whole == Bucket::Whole::no) {
      if (!b.params.empty()) {
        b.param_flat.storage()->restore();
        const DType on_wire = exact ? b.param_shard.dtype() : gather_wire;
        b.gather = comm->all_gather_as(b.param_shard, b.param_flat, on_wire);
        b.exact = on_wire == b.param_shard.dtype();
      }
      if (!b.frozen.empty()) {
        b.frozen_flat.storage()->restore();
        b.frozen_gather = comm->all_gather(b.frozen_shard, b.frozen_flat);
      }
      b.whole = Bucket::Whole::arriving;
    }
    if (wait && b.whole == Bucket::Whole::arriving) {
      for (WorkHandle* work : {&b.gather, &b.frozen_gather})
        if (*work) {
          (*work)->wait();
          work->reset();
        }
      b.whole = Bucket::Whole::yes;
    }
  }
  void free(Bucket& b) {
    if (b.whole == Bucket::Whole::no) return;
    if (b.whole == Bucket::Whole::arriving) gather(b, /*wait=*/true);  // an all-gather still writing ends first
    b.param_flat.storage()->release();
    if (!b.frozen.empty()) b.frozen_flat.storage()->release();
    b.whole = Bucket::Whole::no;
  }
  void passed(Bucket& b) {
    if (--b.until_free > 0) return;
    b.counting = false;
    free(b);
  }
  Bucket& unit(size_t u) { return buckets[unit_bucket[u]]; }
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

// ZeRO-3's models::UnitHooks: gathers and frees the units around the model's computation.
class DataParallel::Units final : public models::UnitHooks {
 public:
  explicit Units(std::weak_ptr<State> state) : state_(std::move(state)) {}

  void begin_forward() override {
    const std::shared_ptr<State> s = state_.lock();
    if (!s) return;
    s->gather(s->unit(0), /*wait=*/true);
    if (s->unit_bucket.size() > 1) s->gather(s->unit(1), /*wait=*/false);
  }

  Tensor enter_block(size_t block, const Tensor& x) override {
    const std::shared_ptr<State> s = state_.lock();
    if (!s) return x;
    const size_t u = 1 + block;
    Bucket& b = s->unit(u);
    s->gather(b, /*wait=*/true);
    if (u + 1 < s->unit_bucket.size()) s->gather(s->unit(u + 1), /*wait=*/false);  // the next block's, meanwhile
    if (!grad_enabled()) return x;
    // The backward frees the unit once it has passed every gradient of the block and its input.
    b.counting = true;
    b.until_free = static_cast<int64_t>(b.params.size()) + (x.requires_grad() ? 1 : 0);
    if (!x.requires_grad()) return x;
    return through(x, "unit_input", [weak = state_, u] {
      if (const std::shared_ptr<State> st = weak.lock(); st && st->unit(u).counting) st->passed(st->unit(u));
    });
  }

  Tensor leave_block(size_t block, const Tensor& y) override {
    const std::shared_ptr<State> s = state_.lock();
    if (!s) return y;
    const size_t u = 1 + block;
    Bucket& b = s->unit(u);
    Tensor out = y;
    if (grad_enabled() && y.requires_grad()) {
      // Before the block's backward: its parameters again, and the previous block's meanwhile.
      out = through(y, "unit_output", [weak = state_, u] {
        const std::shared_ptr<State> st = weak.lock();
        if (!st) return;
        st->gather(st->unit(u), /*wait=*/true);
        if (u > 1) st->gather(st->unit(u - 1), /*wait=*/false);
      });
    }
    s->free(b);
    if (b.until_free <= 0) b.counting = false;
    return out;
  }

 private:
  // x itself, through a step whose backward calls `on_backward` and passes the gradient on.
  static Tensor through(const Tensor& x, const char* name, std::function<void()> on_backward) {
    Tensor out = x.detach();
    record(name, {x}, {out}, [f = std::move(on_backward)](const TensorList& g) {
      f();
      return TensorList{g[0]};
    });
    return out;
  }

  std::weak_ptr<State> state_;
};

DataParallel::DataParallel(std::vector<Tensor> params, Communicator& comm, DataParallelOptions options)
    : params_(std::move(params)), comm_(comm), options_(options), state_(std::make_shared<State>()) {
  GENESIS_CHECK(!params_.empty(), ValueError, "data parallel: the model has no parameters");
  GENESIS_CHECK(options.bucket_mb >= 0, ValueError, "data parallel: bucket_mb must be >= 0");
  GENESIS_CHECK(options.zero >= 0 && options.zero <= 3, ValueError, "data parallel: zero must be 0, 1, 2 or 3 (got ",
                options.zero, ")");
  GENESIS_CHECK(options.zero == 3 || options.units.empty(), ValueError, "data parallel: units are for zero = 3");
  GENESIS_CHECK(options.zero != 3 || !options.units.empty(), ValueError,
                "data parallel: zero = 3 needs the model's units (a language model)");
  state_->comm = &comm;
  state_->zero = options.zero;
  const DType dtype = params_.front().dtype();
  const Device device = params_.front().device();
  state_->wire = options.reduce_dtype.value_or(dtype);
  GENESIS_CHECK(is_floating(state_->wire) && dtype_size(state_->wire) <= dtype_size(dtype), ValueError,
                "data parallel: gradients of ", dtype_name(dtype), " cannot travel as ", dtype_name(state_->wire),
                " (reduce_dtype must be a floating type no wider than the parameters)");
  state_->gather_wire = options.param_dtype.value_or(dtype);
  GENESIS_CHECK(is_floating(state_->gather_wire) && dtype_size(state_->gather_wire) <= dtype_size(dtype), ValueError,
                "data parallel: parameters of ", dtype_name(dtype), " cannot be gathered as ",
                dtype_name(state_->gather_wire), " (param_dtype must be a floating type no wider than the parameters)");
  GENESIS_CHECK(options.zero == 3 || state_->gather_wire == dtype, ValueError,
                "data parallel: param_dtype is for zero = 3 (ZeRO-1/2 gather the updated parameters themselves)");
#if GENESIS_WITH_CUDA
  if (device.is_cuda()) stall_ = std::make_unique<StreamStall>(device.index);
#endif
  const auto bucket_bytes = static_cast<int64_t>(options.bucket_mb * 1024 * 1024);
  const int64_t ranks = comm.size(), rank = comm.rank();
  for (const Tensor& p : params_)
    GENESIS_CHECK(p.dtype() == dtype && p.device() == device, ValueError,
                  "data parallel: parameters of one dtype and device are expected; found ", dtype_name(p.dtype()),
                  " on ", p.device().str(), " next to ", dtype_name(dtype), " on ", device.str());

  // Reverse order: the last layers' gradients arrive first in the backward.
  std::vector<std::vector<Tensor>> groups;
  if (options.zero == 3) {
    std::set<const TensorImpl*> given, placed;
    for (const Tensor& p : params_) given.insert(p.impl_ptr().get());
    state_->unit_bucket.resize(options.units.size());
    for (size_t u = options.units.size(); u-- > 0;) {
      for (const Tensor& p : options.units[u])
        GENESIS_CHECK(given.contains(p.impl_ptr().get()) && placed.insert(p.impl_ptr().get()).second, ValueError,
                      "data parallel: every unit's parameter must be one of the parameters, in one unit only");
      state_->unit_bucket[u] = groups.size();
      groups.push_back(options.units[u]);  // an empty unit is an empty bucket, never started
    }
    GENESIS_CHECK(placed.size() == given.size(), ValueError, "data parallel: ", given.size() - placed.size(),
                  " parameter(s) lie in no unit");
    GENESIS_CHECK(options.frozen_units.empty() || options.frozen_units.size() == options.units.size(), ValueError,
                  "data parallel: ", options.frozen_units.size(), " lists of frozen tensors for ",
                  options.units.size(), " units");
    for (const std::vector<Tensor>& unit : options.frozen_units)
      for (const Tensor& t : unit)
        GENESIS_CHECK(!given.contains(t.impl_ptr().get()) && placed.insert(t.impl_ptr().get()).second &&
                          !t.requires_grad() && t.is_contiguous() && t.device() == device,
                      ValueError,
                      "data parallel: a unit's frozen tensors must be contiguous, on the parameters' device, "
                      "need no gradient, and lie in one unit only, apart from the trained parameters");
  } else {
    groups.emplace_back();
    int64_t group_bytes = 0;
    for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
      if (bucket_bytes > 0 && group_bytes >= bucket_bytes) {
        groups.emplace_back();
        group_bytes = 0;
      }
      groups.back().push_back(*it);
      group_bytes += it->numel() * static_cast<int64_t>(it->element_size());
    }
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
    b.arrived.resize(b.params.size());
    b.chunk = (numel + ranks - 1) / ranks;
    const int64_t padded = sharded() ? b.chunk * ranks : numel;
    b.flat = zeros({padded}, {.dtype = dtype, .device = device});
    if (state_->copies_grads()) {
      b.flat.storage()->release();  // taken at the bucket's first gradient
    } else {
      for (size_t i = 0; i < b.params.size(); ++i) {
        Tensor& p = b.params[i];
        Tensor view = b.flat.narrow(0, b.offsets[i], p.numel()).view(p.shape());
        if (Tensor g = p.grad(); g.defined()) view.copy_(g);
        p.set_grad(view);
      }
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
      b.param_shard = b.param_flat.narrow(0, rank * b.chunk, b.chunk).detach();
      // ZeRO-3: the chunk has its own storage, filled by broadcast_parameters(); the whole
      // parameters stay resident until then (a resume loads into them).
      if (options.zero == 3) b.param_shard = b.param_shard.clone();
      Tensor shard = b.param_shard.detach();
      shard.requires_grad_(true);
      shard.set_grad(b.grad_shard);
      shards_.push_back(shard);
    }
    state_->buckets.push_back(std::move(b));
  }
  if (options.zero == 3 && !options.frozen_units.empty())
    for (size_t u = 0; u < options.units.size(); ++u)
      place_frozen(state_->unit(u), options.frozen_units[u], device, ranks, rank);

  // The hooks hold the state weakly: the parameters may outlive this object.
  for (size_t bi = 0; bi < state_->buckets.size(); ++bi) {
    for (size_t i = 0; i < state_->buckets[bi].params.size(); ++i) {
      state_->buckets[bi].params[i].register_post_accumulate_grad_hook(
          [weak = std::weak_ptr<State>(state_), bi, i](const Tensor&) {
            if (const std::shared_ptr<State> state = weak.lock()) state->on_gradient(bi, i);
          });
    }
  }
}

std::shared_ptr<models::UnitHooks> DataParallel::unit_hooks() {
  GENESIS_CHECK(options_.zero == 3, ValueError, "data parallel: unit hooks are ZeRO-3's");
  return std::make_shared<Units>(state_);
}

int64_t DataParallel::bucket_count() const { return static_cast<int64_t>(state_->buckets.size()); }

void DataParallel::broadcast_parameters() {
  NoGradGuard no_grad;
  std::vector<WorkHandle> works;
  std::vector<Tensor> sent;
  if (sharded()) {
    for (Bucket& b : state_->buckets) {
      state_->gather(b, /*wait=*/true, /*exact=*/true);
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
  if (options_.zero != 3) return;
  // Each rank keeps its chunks; the whole parameters go until the forward needs them.
  // The frozen chunks again too: a resume may have loaded the frozen parameters.
  const int64_t rank = comm_.rank();
  for (Bucket& b : state_->buckets) {
    b.param_shard.copy_(b.param_flat.narrow(0, rank * b.chunk, b.chunk));
    if (!b.frozen.empty()) {
      const int64_t chunk = b.frozen_shard.numel();
      b.frozen_shard.copy_(b.frozen_flat.narrow(0, rank * chunk, chunk));
    }
    state_->free(b);
  }
}

std::vector<NamedTensor> DataParallel::whole_on_rank0(const std::vector<NamedTensor>& tensors) {
  const bool root = comm_.rank() == 0;
  if (options_.zero != 3) return root ? tensors : std::vector<NamedTensor>{};
  NoGradGuard no_grad;
  std::set<const TensorImpl*> wanted;
  for (const NamedTensor& t : tensors) wanted.insert(t.tensor.impl_ptr().get());
  std::map<const TensorImpl*, Tensor> host;  // a sharded tensor -> its whole value on the host
  for (Bucket& b : state_->buckets) {
    const bool was_whole = b.whole != Bucket::Whole::no;
    state_->gather(b, /*wait=*/true, /*exact=*/true);
    if (root)
      for (const std::vector<Tensor>* list : {&b.params, &b.frozen})
        for (const Tensor& p : *list)
          if (wanted.contains(p.impl_ptr().get())) host[p.impl_ptr().get()] = p.detach().to(kCPU).clone();
    if (!was_whole) state_->free(b);
  }
  if (!root) return {};
  std::vector<NamedTensor> out;
  for (const NamedTensor& t : tensors) {
    auto it = host.find(t.tensor.impl_ptr().get());
    out.push_back({t.name, it != host.end() ? it->second : t.tensor});
  }
  return out;
}

void DataParallel::arm() {
  for (Bucket& b : state_->buckets) {
    b.pending = static_cast<int64_t>(b.params.size());
    b.work.reset();
    b.started = false;
    std::fill(b.arrived.begin(), b.arrived.end(), 0);
    if (state_->copies_grads()) continue;
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
  }
  state_->in_flight.clear();
  state_->armed = true;
}

void DataParallel::finish() {
  GENESIS_CHECK(state_->armed, ValueError, "data parallel: finish() without arm() before the backward");
  state_->armed = false;
  for (Bucket& b : state_->buckets)
    if (!b.started && !b.params.empty()) state_->start(b);
  const auto t0 = std::chrono::steady_clock::now();
  if (stall_) stall_->begin();
  for (Bucket& b : state_->buckets)
    if (b.work) state_->retire(b);
  state_->in_flight.clear();
  if (stall_) stall_->end();
  // ZeRO-3: what the backward left whole (unit 0, a unit with a parameter that got no gradient) goes.
  if (options_.zero == 3)
    for (Bucket& b : state_->buckets) {
      b.counting = false;
      state_->free(b);
    }
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
  if (options_.zero == 3) {
    for (Bucket& b : state_->buckets) state_->free(b);  // stale now: the next forward gathers the update
    return;
  }
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
  // ZeRO-2/3 drop them: the next armed backward copies fresh ones into the buckets.
  for (Tensor& p : params_) p.zero_grad_(/*set_to_none=*/state_->copies_grads());
}

std::vector<ParamGroup> DataParallel::shard_groups(const std::vector<ParamGroup>& groups) {
  GENESIS_CHECK(sharded(), ValueError, "data parallel: shard_groups needs zero >= 1");
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
      Tensor piece = b.param_shard.narrow(0, lo - rank * b.chunk, hi - lo).detach();
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
  GENESIS_CHECK(sharded(), ValueError, "data parallel: full_optimizer_state needs zero >= 1");
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
  GENESIS_CHECK(sharded(), ValueError, "data parallel: load_full_optimizer_state needs zero >= 1");
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
