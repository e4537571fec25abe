#include "libgenesis/optim/optimizer.h"

#include <cmath>
#include <map>

#include "kernels/cpu/optim.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/reduce.h"

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

void Optimizer::step() {
  NoGradGuard no_grad;
  ++step_count_;
  size_t index = 0;
  for (ParamGroup& g : groups_) {
    for (NamedTensor& p : g.params) {
      ParamState& state = states_[index++];
      Tensor grad = p.tensor.grad();
      if (!grad.defined()) continue;
      GENESIS_CHECK(p.tensor.is_contiguous(), ValueError, "optimizer: parameter '", p.name, "' is not contiguous");
      GENESIS_CHECK(grad.shape() == p.tensor.shape(), ShapeError, "optimizer: gradient of '", p.name, "' has shape ",
                    grad.shape(), " but the parameter has shape ", p.tensor.shape());
      if (state.slots.empty()) {
        for (size_t s = 0; s < slot_names().size(); ++s) state.slots.push_back(zeros_like(p.tensor));
      }
      ++state.steps;
      p.tensor.storage()->bump_version();  // an in-place update: graphs that saved it are stale
      update(g, p.tensor, grad.to(p.tensor.dtype()).contiguous(), state);
    }
  }
}

void Optimizer::zero_grad() {
  for (ParamGroup& g : groups_)
    for (NamedTensor& p : g.params) p.tensor.set_grad(Tensor());
}

std::vector<NamedTensor> Optimizer::state() const {
  std::vector<NamedTensor> out;
  std::vector<std::string> slot_list = slot_names();
  size_t index = 0;
  for (const ParamGroup& g : groups_) {
    for (const NamedTensor& p : g.params) {
      const ParamState& state = states_[index++];
      if (state.steps == 0) continue;
      for (size_t s = 0; s < state.slots.size(); ++s) out.push_back({p.name + "." + slot_list[s], state.slots[s]});
      out.push_back({p.name + ".step", scalar_tensor(static_cast<double>(state.steps), {.dtype = DType::i64})});
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
      ps.steps = static_cast<int64_t>(step_it->second.item());
      by_name.erase(step_it);
      for (const std::string& slot : slot_list) {
        std::string key = p.name + "." + slot;
        auto it = by_name.find(key);
        GENESIS_CHECK(it != by_name.end(), ValueError, "optimizer state: missing '", key, "'");
        GENESIS_CHECK(it->second.shape() == p.tensor.shape(), ShapeError, "optimizer state: '", key, "' has shape ",
                      it->second.shape(), " but the parameter has shape ", p.tensor.shape());
        ps.slots.push_back(it->second.to(p.tensor.dtype()).to(p.tensor.device()).clone());
        by_name.erase(it);
      }
    }
  }
  if (!by_name.empty()) GENESIS_THROW(ValueError, "optimizer state: unexpected entry '", by_name.begin()->first, "'");
  states_ = std::move(loaded);
  step_count_ = step_count;
}

namespace detail {

// The same updates as the fused CPU kernels, composed of elementwise ops so they run on any
// device with elementwise kernels (CUDA, until fused CUDA optimizer kernels arrive).
void sgd_update_with_ops(const kernels::SgdStep& s, Tensor& p, const Tensor& grad, Tensor* momentum_buffer) {
  Tensor d = s.weight_decay != 0.0 ? add(grad, mul(p, s.weight_decay)) : grad;
  if (s.momentum != 0.0) {
    Tensor b = s.first_step ? d : add(mul(*momentum_buffer, s.momentum), mul(d, 1.0 - s.dampening));
    momentum_buffer->copy_(b);
    d = s.nesterov ? add(d, mul(b, s.momentum)) : b;
  }
  p.copy_(sub(p, mul(d, s.lr)));
}

void adam_update_with_ops(const kernels::AdamStep& s, Tensor& p, const Tensor& grad, std::vector<Tensor>& slots) {
  Tensor g = grad;
  if (s.decoupled) {
    if (s.weight_decay != 0.0) p.copy_(mul(p, 1.0 - s.lr * s.weight_decay));
  } else if (s.weight_decay != 0.0) {
    g = add(g, mul(p, s.weight_decay));
  }
  slots[0].copy_(add(mul(slots[0], s.beta1), mul(g, 1.0 - s.beta1)));
  slots[1].copy_(add(mul(slots[1], s.beta2), mul(mul(g, g), 1.0 - s.beta2)));
  Tensor second = slots[1];
  if (s.amsgrad) {
    slots[2].copy_(maximum(slots[2], slots[1]));
    second = slots[2];
  }
  Tensor denom = add(div(sqrt(second), std::sqrt(s.bias_correction2)), s.eps);
  p.copy_(sub(p, mul(div(slots[0], denom), s.lr / s.bias_correction1)));
}

void lion_update_with_ops(const kernels::LionStep& s, Tensor& p, const Tensor& grad, Tensor& exp_avg) {
  Tensor c = add(mul(exp_avg, s.beta1), mul(grad, 1.0 - s.beta1));
  p.copy_(sub(mul(p, 1.0 - s.lr * s.weight_decay), mul(sign(c), s.lr)));
  exp_avg.copy_(add(mul(exp_avg, s.beta2), mul(grad, 1.0 - s.beta2)));
}

}  // namespace detail

namespace {

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
  void update(ParamGroup& g, Tensor& p, const Tensor& grad, ParamState& state) override {
    kernels::SgdStep s{.lr = g.lr, .momentum = o_.momentum, .dampening = o_.dampening,
                       .weight_decay = g.weight_decay, .nesterov = o_.nesterov, .first_step = state.steps == 1};
    if (!p.device().is_cpu()) {
      detail::sgd_update_with_ops(s, p, grad, state.slots.empty() ? nullptr : &state.slots[0]);
      return;
    }
    kernels::cpu::sgd_step(p.dtype(), p.numel(), p.data_ptr(), grad.data_ptr(),
                           state.slots.empty() ? nullptr : state.slots[0].data_ptr(), s);
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
  std::vector<std::string> slot_names() const override {
    if (o_.amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    return {"exp_avg", "exp_avg_sq"};
  }
  void update(ParamGroup& g, Tensor& p, const Tensor& grad, ParamState& state) override {
    auto t = static_cast<double>(state.steps);
    std::vector<Tensor>& slots = state.slots;
    kernels::AdamStep s{.lr = g.lr, .beta1 = o_.beta1, .beta2 = o_.beta2, .eps = o_.eps,
                        .weight_decay = g.weight_decay, .decoupled = o_.decoupled_weight_decay,
                        .amsgrad = o_.amsgrad, .bias_correction1 = 1.0 - std::pow(o_.beta1, t),
                        .bias_correction2 = 1.0 - std::pow(o_.beta2, t)};
    if (!p.device().is_cpu()) {
      detail::adam_update_with_ops(s, p, grad, slots);
      return;
    }
    kernels::cpu::adam_step(p.dtype(), p.numel(), p.data_ptr(), grad.data_ptr(), slots[0].data_ptr(),
                            slots[1].data_ptr(), o_.amsgrad ? slots[2].data_ptr() : nullptr, s);
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
  void update(ParamGroup& g, Tensor& p, const Tensor& grad, ParamState& state) override {
    kernels::LionStep s{.lr = g.lr, .beta1 = o_.beta1, .beta2 = o_.beta2, .weight_decay = g.weight_decay};
    if (!p.device().is_cpu()) {
      detail::lion_update_with_ops(s, p, grad, state.slots[0]);
      return;
    }
    kernels::cpu::lion_step(p.dtype(), p.numel(), p.data_ptr(), grad.data_ptr(), state.slots[0].data_ptr(), s);
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

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  NoGradGuard no_grad;
  Tensor total;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor gf = g.to(DType::f32);  // square in f32: half-precision squares overflow
    Tensor sq = sum(mul(gf, gf));
    total = total.defined() ? add(total, sq) : sq;
  }
  if (!total.defined()) return scalar_tensor(0.0);
  Tensor norm = sqrt(total);
  if (max_norm > 0.0) {
    // coef = min(1, max_norm / (norm + 1e-6)), applied on the device: no host read.
    Tensor coef = clamp(div(max_norm, add(norm, 1e-6)), std::nullopt, 1.0);
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) mul_(g, coef);
    }
  }
  return norm;
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
