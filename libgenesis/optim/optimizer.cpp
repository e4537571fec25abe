#include "libgenesis/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "kernels/cpu/optim.h"
#include "kernels/cpu/reduce.h"
#include "libgenesis/autograd/autocast_weights.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/core/storage.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/reduce.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/optim.h"
#endif

namespace genesis {

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  size_t count = 0;
  for (const ParamGroup& g : groups_) {
    GENESIS_CHECK(g.lr >= 0.0, UsageError, "optimizer: learning rate must be >= 0 (got ", g.lr, ")");
    GENESIS_CHECK(g.weight_decay >= 0.0, UsageError, "optimizer: weight_decay must be >= 0 (got ", g.weight_decay, ")");
    for (const NamedTensor& p : g.params) {
      GENESIS_CHECK(p.tensor.requires_grad() && p.tensor.is_leaf(), ValueError, "optimizer: parameter '", p.name,
                    "' is not a leaf that requires grad");
      ++count;
    }
  }
  states_.resize(count);
}

namespace {

// The gradient as the update kernels take it: contiguous, in the parameter's dtype, except
// that f32 CUDA parameters keep half-precision gradients (widened inside the kernel).
Tensor gradient_for_update(const Tensor& param, const Tensor& grad) {
  bool keep_half = param.device().is_cuda() && param.dtype() == DType::f32 &&
                   (grad.dtype() == DType::bf16 || grad.dtype() == DType::f16);
  return (keep_half ? grad : grad.to(param.dtype())).contiguous();
}

}  // namespace

Tensor Optimizer::gradient_to_apply(const NamedTensor& p, ParamState& state, Device home) const {
  Tensor grad = p.tensor.grad();
  if (!grad.defined()) return grad;
  GENESIS_CHECK(p.tensor.is_contiguous(), ValueError, "optimizer: parameter '", p.name, "' is not contiguous");
  GENESIS_CHECK(grad.shape() == p.tensor.shape(), ShapeError, "optimizer: gradient of '", p.name, "' has shape ",
                grad.shape(), " but the parameter has shape ", p.tensor.shape());
  if (state.slots.empty())
    for (size_t s = 0; s < slot_names().size(); ++s)
      state.slots.push_back(zeros(p.tensor.shape(), {.dtype = p.tensor.dtype(), .device = home}));
  return grad;
}

void Optimizer::step(const Tensor& skip_if, const Tensor& clip_norm, double max_norm) {
  NoGradGuard no_grad;
  GENESIS_CHECK(!skip_if.defined() || (skip_if.dtype() == DType::f32 && skip_if.numel() == 1), ValueError,
                "optimizer: skip_if must be one f32 element (a GradScaler's found_inf)");
  GENESIS_CHECK(!clip_norm.defined() || (clip_norm.dtype() == DType::f32 && clip_norm.numel() == 1 && max_norm > 0.0),
                ValueError, "optimizer: clip_norm must be one f32 element (a global gradient norm) with max_norm > 0");
  ++step_count_;
  if (exchange_) {
    offloaded_step(skip_if, clip_norm, max_norm);
    return;
  }
  size_t index = 0;
  std::vector<autocast_weights::Refresh> copies;  // autocast copies the updates write
  for (ParamGroup& g : groups_) {
    // Consecutive parameters that one kernel launch can update together.
    std::vector<ParamUpdate> batch;
    auto flush = [&] {
      if (!batch.empty()) update(g, batch);
      batch.clear();
    };
    for (NamedTensor& p : g.params) {
      ParamState& state = states_[index++];
      const Tensor grad = gradient_to_apply(p, state, p.tensor.device());
      if (!grad.defined()) continue;
      kernels::StepGate gate;
      if (skip_if.defined()) {
        GENESIS_CHECK(skip_if.device() == p.tensor.device(), DeviceError, "optimizer: skip_if is on ",
                      skip_if.device().str(), " but parameter '", p.name, "' is on ", p.tensor.device().str());
        gate.skip_if = skip_if.data<float>();
        // The host cannot know whether a gated step happens, so the count moves to the device.
        if (!state.applied_steps.defined())
          state.applied_steps =
              scalar_tensor(static_cast<double>(state.steps), {.dtype = DType::i64, .device = p.tensor.device()});
      }
      if (state.applied_steps.defined()) gate.step = state.applied_steps.data<int64_t>();
      ++state.steps;
      const autocast_weights::Refresh copy =
          writes_autocast_copies() && p.tensor.device().is_cuda() ? autocast_weights::refresh(p.tensor)
                                                                   : autocast_weights::Refresh{};
      p.tensor.storage()->bump_version();  // an in-place update: graphs that saved it are stale
      const bool fold_clip = clip_norm.defined() && p.tensor.device().is_cuda() && grad.dtype() == p.tensor.dtype() &&
                             clip_norm.device() == p.tensor.device();
      if (clip_norm.defined() && !fold_clip) scale_grads_by_clip({grad}, clip_norm, max_norm);
      ParamUpdate u{p.tensor, gradient_for_update(p.tensor, grad), &state, gate};
      if (copy.data) {
        u.low = copy.data;
        copies.push_back(copy);
      }
      if (fold_clip) {
        u.clip_norm = clip_norm.data<float>();
        u.max_norm = static_cast<float>(max_norm);
      }
      if (!batch.empty()) {
        const ParamUpdate& first = batch.front();
        if (first.param.device() != u.param.device() || first.param.dtype() != u.param.dtype() ||
            first.grad.dtype() != u.grad.dtype() || first.state->steps != u.state->steps ||
            first.clip_norm != u.clip_norm)
          flush();
      }
      batch.push_back(std::move(u));
    }
    flush();
  }
  for (const autocast_weights::Refresh& copy : copies) copy.mark_written();
}

namespace {

// A CPU tensor over n elements of memory owned elsewhere (an offload chunk's host buffer).
Tensor host_view(void* data, int64_t n, DType dtype) {
  auto storage = std::make_shared<Storage>(data, static_cast<size_t>(n) * dtype_size(dtype), kCPU, [](void*) {});
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), Shape{n}, Strides{1}, 0, dtype));
}

}  // namespace

void Optimizer::offload_to_host(int64_t chunk_bytes) {
  const bool fresh = std::all_of(states_.begin(), states_.end(), [](const ParamState& s) { return s.steps == 0; });
  GENESIS_CHECK(fresh, ValueError, "optimizer offload: call offload_to_host before the first step and load_state");
  exchange_ = std::make_unique<HostExchange>(chunk_bytes);
}

void Optimizer::offloaded_step(const Tensor& skip_if, const Tensor& clip_norm, double max_norm) {
  // The host runs the update, so the host decides whether it happens (one read of the flag).
  if (skip_if.defined() && skip_if.item() != 0.0) return;
  struct Entry {
    ParamGroup* group;
    ParamState* state;
  };
  std::vector<HostExchange::Item> items;
  std::vector<Entry> entries;
  size_t index = 0;
  for (ParamGroup& g : groups_) {
    for (NamedTensor& p : g.params) {
      ParamState& state = states_[index++];
      GENESIS_CHECK(p.tensor.dtype() == DType::f32 || p.tensor.dtype() == DType::f64, ValueError,
                    "optimizer offload: parameter '", p.name, "' is ", dtype_name(p.tensor.dtype()),
                    "; the host update takes f32 or f64 parameters (keep f32 weights and train under [amp])");
      const Tensor grad = gradient_to_apply(p, state, kCPU);  // the state in host memory
      if (!grad.defined()) continue;
      ++state.steps;
      p.tensor.storage()->bump_version();  // an in-place update: graphs that saved it are stale
      items.push_back({.param = p.tensor, .grad = grad.to(p.tensor.dtype()).contiguous()});
      entries.push_back({.group = &g, .state = &state});
    }
  }
  if (clip_norm.defined()) {  // scaled where they are, before they travel
    std::vector<Tensor> grads;
    for (const HostExchange::Item& item : items) grads.push_back(item.grad);
    scale_grads_by_clip(grads, clip_norm, max_norm);
  }
  exchange_->run(items, [&](const HostChunk& c) {
    const DType dtype = items[c.item].param.dtype();
    ParamUpdate u{.param = host_view(c.param, c.n, dtype),
                  .grad = host_view(const_cast<void*>(c.grad), c.n, dtype),
                  .state = entries[c.item].state,
                  .gate = {},
                  .offset = c.offset};
    update(*entries[c.item].group, std::span<ParamUpdate>(&u, 1));
  });
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (ParamGroup& g : groups_)
    for (NamedTensor& p : g.params) p.tensor.zero_grad_(set_to_none);
}

std::vector<NamedTensor> Optimizer::state() const {
  std::vector<NamedTensor> out;
  std::vector<std::string> slot_list = slot_names();
  size_t index = 0;
  for (const ParamGroup& g : groups_) {
    for (const NamedTensor& p : g.params) {
      const ParamState& state = states_[index++];
      if (state.steps == 0) continue;
      // Gated updates that were all skipped leave no state (a host read, at checkpoints only).
      if (state.applied_steps.defined() && state.applied_steps.item() == 0) continue;
      for (size_t s = 0; s < state.slots.size(); ++s) out.push_back({p.name + "." + slot_list[s], state.slots[s]});
      out.push_back({p.name + ".step", state.applied_steps.defined()
                                           ? state.applied_steps
                                           : scalar_tensor(static_cast<double>(state.steps), {.dtype = DType::i64})});
    }
  }
  return out;
}

void Optimizer::load_state(const std::vector<NamedTensor>& state, int64_t step_count) {
  std::map<std::string, Tensor> by_name;
  for (const NamedTensor& t : state) by_name[t.name] = t.tensor;
  std::vector<std::string> slot_list = slot_names();
  std::vector<ParamState> loaded(states_.size());
  size_t index = 0;
  for (const ParamGroup& g : groups_) {
    for (const NamedTensor& p : g.params) {
      ParamState& ps = loaded[index++];
      auto step_it = by_name.find(p.name + ".step");
      if (step_it == by_name.end()) continue;  // never updated before the checkpoint
      ps.steps = static_cast<int64_t>(step_it->second.item());  // applied updates; a gated step restarts
                                                                 // the device count from it
      by_name.erase(step_it);
      for (const std::string& slot : slot_list) {
        std::string key = p.name + "." + slot;
        auto it = by_name.find(key);
        GENESIS_CHECK(it != by_name.end(), ValueError, "optimizer state: missing '", key, "'");
        GENESIS_CHECK(it->second.shape() == p.tensor.shape(), ShapeError, "optimizer state: '", key, "' has shape ",
                      it->second.shape(), " but the parameter has shape ", p.tensor.shape());
        const Device home = exchange_ ? kCPU : p.tensor.device();  // offloaded state lives on the host
        ps.slots.push_back(it->second.to(p.tensor.dtype()).to(home).clone());
        by_name.erase(it);
      }
    }
  }
  if (!by_name.empty()) GENESIS_THROW(ValueError, "optimizer state: unexpected entry '", by_name.begin()->first, "'");
  states_ = std::move(loaded);
  step_count_ = step_count;
}

namespace {

#if GENESIS_WITH_CUDA
// The clipping a batch of CUDA parameter updates folds in (ParamUpdate::clip_norm).
template <class Batch>
kernels::cuda::GradClip cuda_clip(const Batch& batch) {
  return {.norm = batch.front().clip_norm, .max_norm = batch.front().max_norm};
}

// The kernel table of a batch of CUDA parameter updates.
template <class Batch>
std::vector<kernels::cuda::OptimTensor> cuda_tensors(const Batch& batch) {
  std::vector<kernels::cuda::OptimTensor> tensors;
  tensors.reserve(batch.size());
  for (const auto& u : batch) {
    kernels::cuda::OptimTensor t{
        .param = u.param.data_ptr(), .grad = u.grad.data_ptr(), .n = u.param.numel(), .step = u.gate.step, .low = u.low};
    for (size_t s = 0; s < u.state->slots.size(); ++s) t.slots[s] = u.slot(s);
    tensors.push_back(t);
  }
  return tensors;
}
#endif

void check_betas(const char* optimizer, double beta1, double beta2) {
  GENESIS_CHECK(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0, UsageError, optimizer,
                ": betas must be in [0, 1) (got ", beta1, ", ", beta2, ")");
}

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<ParamGroup> groups, SgdOptions o) : Optimizer(std::move(groups)), o_(o) {
    GENESIS_CHECK(o.momentum >= 0.0, UsageError, "sgd: momentum must be >= 0 (got ", o.momentum, ")");
    GENESIS_CHECK(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0), UsageError,
                  "sgd: nesterov needs momentum > 0 and dampening = 0");
  }
  std::string_view name() const override { return "sgd"; }

 protected:
  std::vector<std::string> slot_names() const override {
    return o_.momentum != 0.0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
  }
  void update(ParamGroup& g, std::span<ParamUpdate> batch) override {
    kernels::SgdStep s{.lr = g.lr, .momentum = o_.momentum, .dampening = o_.dampening,
                       .weight_decay = g.weight_decay, .nesterov = o_.nesterov,
                       .first_step = batch.front().state->steps == 1};
    if (batch.front().param.device().is_cpu()) {
      for (ParamUpdate& u : batch) {
        void* momentum_buffer = u.state->slots.empty() ? nullptr : u.slot(0);
        kernels::cpu::sgd_step(u.param.dtype(), u.param.numel(), u.param.data_ptr(), u.grad.data_ptr(),
                               momentum_buffer, s, u.gate);
      }
      return;
    }
    GENESIS_ON_CUDA(kernels::cuda::sgd_step(batch.front().param.dtype(), batch.front().grad.dtype(),
                                            cuda_tensors(batch), s, cuda::current_stream(), batch.front().gate.skip_if,
                                            cuda_clip(batch)));
  }

 private:
  SgdOptions o_;
};

class Adam final : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, AdamOptions o) : Optimizer(std::move(groups)), o_(o) {
    check_betas("adam", o.beta1, o.beta2);
    GENESIS_CHECK(o.eps > 0.0, UsageError, "adam: eps must be > 0 (got ", o.eps, ")");
  }
  std::string_view name() const override { return o_.decoupled_weight_decay ? "adamw" : "adam"; }

 protected:
  bool writes_autocast_copies() const override { return true; }
  std::vector<std::string> slot_names() const override {
    if (o_.amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    return {"exp_avg", "exp_avg_sq"};
  }
  void update(ParamGroup& g, std::span<ParamUpdate> batch) override {
    const int64_t t = batch.front().state->steps;
    kernels::AdamStep s{.lr = g.lr, .beta1 = o_.beta1, .beta2 = o_.beta2, .eps = o_.eps,
                        .weight_decay = g.weight_decay, .decoupled = o_.decoupled_weight_decay,
                        .amsgrad = o_.amsgrad, .bias_correction1 = kernels::bias_correction(o_.beta1, t),
                        .bias_correction2 = kernels::bias_correction(o_.beta2, t)};
    if (batch.front().param.device().is_cpu()) {
      for (ParamUpdate& u : batch) {
        kernels::cpu::adam_step(u.param.dtype(), u.param.numel(), u.param.data_ptr(), u.grad.data_ptr(), u.slot(0),
                                u.slot(1), o_.amsgrad ? u.slot(2) : nullptr, s, u.gate);
      }
      return;
    }
    GENESIS_ON_CUDA(kernels::cuda::adam_step(batch.front().param.dtype(), batch.front().grad.dtype(),
                                             cuda_tensors(batch), s, cuda::current_stream(), batch.front().gate.skip_if,
                                             cuda_clip(batch)));
  }

 private:
  AdamOptions o_;
};

class Lion final : public Optimizer {
 public:
  Lion(std::vector<ParamGroup> groups, LionOptions o) : Optimizer(std::move(groups)), o_(o) {
    check_betas("lion", o.beta1, o.beta2);
  }
  std::string_view name() const override { return "lion"; }

 protected:
  std::vector<std::string> slot_names() const override { return {"exp_avg"}; }
  void update(ParamGroup& g, std::span<ParamUpdate> batch) override {
    kernels::LionStep s{.lr = g.lr, .beta1 = o_.beta1, .beta2 = o_.beta2, .weight_decay = g.weight_decay};
    if (batch.front().param.device().is_cpu()) {
      for (ParamUpdate& u : batch) {
        kernels::cpu::lion_step(u.param.dtype(), u.param.numel(), u.param.data_ptr(), u.grad.data_ptr(),
                                u.slot(0), s, u.gate);
      }
      return;
    }
    GENESIS_ON_CUDA(kernels::cuda::lion_step(batch.front().param.dtype(), batch.front().grad.dtype(),
                                             cuda_tensors(batch), s, cuda::current_stream(), batch.front().gate.skip_if,
                                             cuda_clip(batch)));
  }

 private:
  LionOptions o_;
};

}  // namespace

std::unique_ptr<Optimizer> make_lion(std::vector<ParamGroup> groups, LionOptions options) {
  return std::make_unique<Lion>(std::move(groups), options);
}

std::unique_ptr<Optimizer> make_sgd(std::vector<ParamGroup> groups, SgdOptions options) {
  return std::make_unique<Sgd>(std::move(groups), options);
}

std::unique_ptr<Optimizer> make_adam(std::vector<ParamGroup> groups, AdamOptions options) {
  return std::make_unique<Adam>(std::move(groups), options);
}

namespace {

#if GENESIS_WITH_CUDA
// The fused path: every gradient contiguous, floating and on one CUDA device. Returns the
// norm, or an undefined tensor when the gradients do not qualify.
Tensor global_norm_cuda(const std::vector<Tensor>& grads) {
  const Device device = grads.front().device();
  std::vector<kernels::cuda::NormTensor> tensors;
  for (const Tensor& g : grads) {
    if (g.device() != device || !g.is_contiguous() || !is_floating(g.dtype())) return Tensor();
    tensors.push_back({.data = g.data_ptr(), .dtype = g.dtype(), .n = g.numel()});
  }
  auto count = static_cast<int64_t>(tensors.size());
  Tensor scratch = empty({kernels::cuda::global_norm_scratch(count)}, {.dtype = DType::f32, .device = device});
  Tensor norm = empty({}, {.dtype = DType::f32, .device = device});
  kernels::cuda::global_norm(tensors, scratch.data<float>(), norm.data<float>(), cuda::current_stream());
  return norm;
}
#endif

}  // namespace

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return scalar_tensor(0.0, {.dtype = DType::f32});
  Tensor norm;
#if GENESIS_WITH_CUDA
  if (grads.front().device().is_cuda()) norm = global_norm_cuda(grads);
#endif
  if (!norm.defined()) {  // CPU: one pass over every gradient, squares summed in f64
    std::vector<Tensor> dense;
    std::vector<kernels::cpu::SquaresInput> inputs;
    for (const Tensor& g : grads) {
      dense.push_back(g.contiguous());
      inputs.push_back({.dtype = g.dtype(), .n = g.numel(), .data = dense.back().data_ptr()});
    }
    const double squares = kernels::cpu::sum_of_squares(inputs.data(), static_cast<int64_t>(inputs.size()));
    norm = scalar_tensor(std::sqrt(squares), {.dtype = DType::f32});
  }
  if (max_norm > 0.0) scale_grads_by_clip(grads, norm, max_norm);
  return norm;
}

void scale_grads_by_clip(const std::vector<Tensor>& grads, const Tensor& norm, double max_norm) {
#if GENESIS_WITH_CUDA
  const bool kernel = std::all_of(grads.begin(), grads.end(), [&](const Tensor& g) {
    return g.device() == norm.device() && g.is_contiguous() && is_floating(g.dtype());
  });
  if (norm.device().is_cuda() && kernel) {
    std::vector<kernels::cuda::NormTensor> tensors;
    for (const Tensor& g : grads) tensors.push_back({.data = g.data_ptr(), .dtype = g.dtype(), .n = g.numel()});
    kernels::cuda::clip_by_norm(tensors, norm.data<float>(), max_norm, cuda::current_stream());
    return;
  }
#endif
  const Tensor coef = clamp(div(max_norm, add(norm, 1e-6)), std::nullopt, 1.0);
  for (Tensor g : grads) mul_(g, coef.to(g.device()));  // a handle: scales the gradient itself
}

void clip_grad_value(const std::vector<Tensor>& params, double value) {
  GENESIS_CHECK(value > 0.0, ValueError, "clip_grad_value: value must be > 0 (got ", value, ")");
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) g.copy_(clamp(g, -value, value));
  }
}

}  // namespace genesis
