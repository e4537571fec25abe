#include "libgenesis/nn/lora.h"

#include <algorithm>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/nn/init.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/nn.h"
#include "libgenesis/ops/transformer.h"

namespace genesis::nn {

LoraFactor::LoraFactor(Tensor weight, std::string role) : role_(std::move(role)) {
  weight_ = &register_parameter("weight", std::move(weight));
}

Tensor LoraFactor::forward(const Tensor& x) { return linear(x, *weight_); }

std::string LoraFactor::describe() const {
  return "LoRA " + role_ + "(" + std::to_string(weight_->size(1)) + " -> " + std::to_string(weight_->size(0)) + ")";
}

Tensor LoraAdapter::add_to(const Tensor& y, const Tensor& x, bool training) const {
  const Tensor in = training && dropout > 0 ? genesis::dropout(x, dropout) : x;
  const Tensor down = mul(linear(in, a->weight()), scale);  // [..., r]: the scale costs r per row
  return add(y, linear(down, b->weight()));
}

LoraTarget::LoraTarget(Tensor weight, Tensor bias, bool transposed)
    : in_(weight.size(transposed ? 0 : 1)), out_(weight.size(transposed ? 1 : 0)), transposed_(transposed) {
  weight_ = &register_parameter("weight", std::move(weight));
  if (bias.defined()) bias_ = &register_parameter("bias", std::move(bias));
}

Tensor LoraTarget::base_forward(const Tensor& x) const {
  const Tensor b = bias_ ? *bias_ : Tensor();
  if (nf4_) return nf4_linear(x, *nf4_, b);
  return linear(x, transposed_ ? weight_->t() : *weight_, b);
}

Tensor LoraTarget::forward(const Tensor& x) {
  // One op (ops/linalg.h) for a full-precision base without adapter dropout; otherwise the base
  // product and the adapter's update composed.
  if (lora_ && !nf4_ && !(is_training() && lora_->dropout > 0))
    return lora_linear(x, transposed_ ? weight_->t() : *weight_, bias_ ? *bias_ : Tensor(), lora_->a->weight(),
                       lora_->b->weight(), lora_->scale);
  const Tensor y = base_forward(x);
  return lora_ ? lora_->add_to(y, x, is_training()) : y;
}

Tensor LoraTarget::forward_swiglu(const Tensor& gate, const Tensor& up) {
  const bool composed = nf4_ || (lora_ && is_training() && lora_->dropout > 0) ||
                        (!autocast_enabled() && autocast_dtype());
  if (composed) return (*this)(swiglu(gate, up));
  const Tensor w = transposed_ ? weight_->t() : *weight_;
  const Tensor b = bias_ ? *bias_ : Tensor();
  if (!lora_) return swiglu_linear(gate, up, w, b);
  return swiglu_linear(gate, up, w, b, lora_->a->weight(), lora_->b->weight(), lora_->scale);
}

void LoraTarget::attach_lora(LoraAdapter adapter) {
  register_module("lora_A", adapter.a);
  register_module("lora_B", adapter.b);
  lora_ = std::move(adapter);
}

void LoraTarget::quantize_nf4(Device device, DType compute_dtype) {
  nf4_ = &quantize_parameter("weight", device, compute_dtype, transposed_);
}

bool lora_pattern_matches(const std::string& name, const std::string& pattern) {
  if (pattern.empty() || name.size() < pattern.size() || !name.ends_with(pattern)) return false;
  return name.size() == pattern.size() || name[name.size() - pattern.size() - 1] == '.';
}

std::vector<std::pair<std::string, LoraTarget*>> lora_targets(const Module& model) {
  std::vector<std::pair<std::string, LoraTarget*>> out;
  for (const auto& [name, module] : model.named_modules())
    if (auto* target = dynamic_cast<LoraTarget*>(module)) out.emplace_back(name, target);
  return out;
}

std::vector<std::pair<std::string, LoraTarget*>> select_lora_targets(const Module& model, const LoraOptions& options) {
  const std::vector<std::pair<std::string, LoraTarget*>> all = lora_targets(model);
  GENESIS_CHECK(!all.empty(), ValueError, "LoRA: the model has no linear layer to adapt");
  const bool every = std::find(options.targets.begin(), options.targets.end(), "all-linear") != options.targets.end();
  GENESIS_CHECK(!options.targets.empty(), ValueError, "LoRA: no target modules given (e.g. [\"q_proj\", \"v_proj\"] or "
                "[\"all-linear\"])");
  std::vector<std::pair<std::string, LoraTarget*>> chosen;
  for (const auto& target : all) {
    const bool hit = every || std::any_of(options.targets.begin(), options.targets.end(), [&](const std::string& p) {
                       return lora_pattern_matches(target.first, p);
                     });
    if (hit) chosen.push_back(target);
  }
  for (const std::string& pattern : options.targets) {
    if (pattern == "all-linear") continue;
    const bool used = std::any_of(all.begin(), all.end(), [&](const auto& t) { return lora_pattern_matches(t.first, pattern); });
    if (used) continue;
    std::vector<std::string> names;
    for (const auto& [name, target] : all) names.push_back(name);
    GENESIS_THROW(ValueError, "LoRA target '", pattern, "' matches no linear layer (the model's: ", name_kinds(names),
                  "; or \"all-linear\")");
  }
  return chosen;
}

LoraAdapter make_lora_adapter(int64_t in, int64_t out, const LoraOptions& options, Device device, Generator* gen) {
  GENESIS_CHECK(options.r >= 1, ValueError, "LoRA: r must be at least 1, got ", options.r);
  GENESIS_CHECK(options.dropout >= 0 && options.dropout < 1, ValueError, "LoRA: dropout must be in [0, 1), got ",
                options.dropout);
  NoGradGuard no_grad;
  Tensor a = empty({options.r, in}), b = zeros({out, options.r});
  if (options.init == "default") {
    init::kaiming_uniform_(a, std::sqrt(5.0), true, gen);
  } else if (options.init == "gaussian") {
    init::normal_(a, 0.0, 1.0 / static_cast<double>(options.r), gen);
  } else {
    GENESIS_THROW(ValueError, "LoRA: unknown init '", options.init, "' (valid: default, gaussian)");
  }
  return {.a = std::make_shared<LoraFactor>(a.to(device).requires_grad_(), "A"),
          .b = std::make_shared<LoraFactor>(b.to(device).requires_grad_(), "B"),
          .scale = options.scale(),
          .dropout = options.dropout};
}

std::vector<std::string> add_lora(Module& model, const LoraOptions& options, Generator* gen) {
  const std::vector<std::pair<std::string, LoraTarget*>> chosen = select_lora_targets(model, options);
  for (const auto& [name, target] : chosen) {
    GENESIS_CHECK(!target->lora(), ValueError, "LoRA: '", name, "' already has an adapter");
    const int64_t limit = std::min(target->in_features(), target->out_features());
    GENESIS_CHECK(options.r <= limit, ValueError, "LoRA: r = ", options.r, " exceeds the dimensions of '", name, "' (",
                  target->in_features(), " -> ", target->out_features(), "): use r <= ", limit);
  }
  model.set_trainable(false);
  const Device device = model.parameters().front().device();
  std::vector<std::string> names;
  for (const auto& [name, target] : chosen) {
    target->attach_lora(make_lora_adapter(target->in_features(), target->out_features(), options, device, gen));
    names.push_back(name);
  }
  return names;
}

}  // namespace genesis::nn
