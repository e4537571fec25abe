#include "libgenesis/dist/data_parallel.h"

#include <chrono>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/factory.h"

namespace genesis::dist {

namespace {

struct Bucket {
  Tensor flat;                 // the gradients of its parameters, back to back
  std::vector<Tensor> params;  // in the order they are laid out
  int64_t pending = 0;         // gradients not yet accumulated in the armed backward
  WorkHandle work;             // the running all-reduce, once started
};

}  // namespace

struct DataParallel::State {
  Communicator* comm;
  std::vector<Bucket> buckets;
  bool armed = false;

  void start(Bucket& b) {
    // A parameter the backward did not reach still holds a zeroed-lazily gradient: make it zero.
    for (const Tensor& p : b.params) (void)p.grad();
    b.work = comm->all_reduce(b.flat, ReduceOp::avg);
  }
};

DataParallel::DataParallel(std::vector<Tensor> params, Communicator& comm, double bucket_mb)
    : params_(std::move(params)), comm_(comm), state_(std::make_shared<State>()) {
  GENESIS_CHECK(!params_.empty(), ValueError, "data parallel: the model has no parameters");
  GENESIS_CHECK(bucket_mb >= 0, ValueError, "data parallel: bucket_mb must be >= 0");
  state_->comm = &comm;
  const DType dtype = params_.front().dtype();
  const Device device = params_.front().device();
  const auto bucket_bytes = static_cast<int64_t>(bucket_mb * 1024 * 1024);

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
    int64_t numel = 0;
    for (const Tensor& p : group) numel += p.numel();
    Bucket b;
    b.flat = zeros({numel}, {.dtype = dtype, .device = device});
    b.params = std::move(group);
    int64_t offset = 0;
    for (Tensor& p : b.params) {
      Tensor view = b.flat.narrow(0, offset, p.numel()).view(p.shape());
      if (Tensor g = p.grad(); g.defined()) view.copy_(g);
      p.set_grad(view);
      offset += p.numel();
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
  for (const Tensor& p : params_) {
    Tensor data = p.detach();
    works.push_back(comm_.broadcast(data, 0));
    sent.push_back(data);
  }
  for (const WorkHandle& w : works) w->wait();
}

void DataParallel::arm() {
  for (Bucket& b : state_->buckets) {
    // Something replaced a .grad (zero_grad(set_to_none), a load): make it a view of the bucket again.
    int64_t offset = 0;
    for (Tensor& p : b.params) {
      const AutogradMeta* meta = p.autograd_meta();
      const Tensor& g = meta->grad;
      const void* expected = static_cast<const char*>(b.flat.data_ptr()) + offset * static_cast<int64_t>(p.element_size());
      if (!g.defined() || g.data_ptr() != expected) {
        NoGradGuard no_grad;
        Tensor view = b.flat.narrow(0, offset, p.numel()).view(p.shape());
        if (g.defined()) view.copy_(p.grad());
        else view.zero_();
        p.set_grad(view);
      }
      offset += p.numel();
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
  for (Bucket& b : state_->buckets) {
    b.work->wait();
    b.work.reset();
  }
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Tensor DataParallel::average(const Tensor& value) {
  Tensor mean = value.detach().contiguous().clone();
  comm_.all_reduce(mean, ReduceOp::avg)->wait();
  return mean;
}

}  // namespace genesis::dist
