#include "libgenesis/nn/module.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/quant.h"

namespace genesis::nn {

namespace {
std::string join(const std::string& prefix, const std::string& name) { return prefix.empty() ? name : prefix + "." + name; }
}  // namespace

Tensor Module::operator()(const Tensor& x) {
  if (autocast_enabled_ || !autocast_dtype()) return forward(x);
  AutocastGuard f32(std::nullopt);
  const bool half = x.dtype() == DType::f16 || x.dtype() == DType::bf16;
  return forward(half ? x.to(DType::f32) : x);
}

Tensor& Module::register_parameter(std::string name, Tensor value) {
  GENESIS_CHECK(value.defined(), ValueError, "register_parameter: '", name, "' is undefined");
  if (!value.requires_grad()) value.requires_grad_(true);
  params_.push_back({.name = std::move(name), .tensor = std::move(value), .trainable = true, .nf4 = nullptr});
  return params_.back().tensor;
}

Tensor& Module::register_buffer(std::string name, Tensor value) {
  buffers_.emplace_back(std::move(name), std::move(value));
  return buffers_.back().second;
}

namespace {
bool selected(Params which, bool trainable) {
  return which == Params::all || (which == Params::trainable) == trainable;
}
}  // namespace

void Module::collect_parameters(const std::string& prefix, Params which, std::vector<NamedTensor>& out) const {
  for (const Parameter& p : params_)
    if (!p.nf4 && selected(which, p.trainable)) out.push_back({join(prefix, p.name), p.tensor});
  for (const auto& [name, child] : children_) child->collect_parameters(join(prefix, name), which, out);
}

std::vector<Tensor> Module::frozen_storage() const {
  std::vector<Tensor> out;
  for (const Parameter& p : params_) {
    if (p.nf4) out.insert(out.end(), {p.nf4->codes, p.nf4->absmax_codes, p.nf4->absmax_scale});
    else if (!p.trainable) out.push_back(p.tensor);
  }
  for (const auto& [name, child] : children_) {
    std::vector<Tensor> inner = child->frozen_storage();
    out.insert(out.end(), inner.begin(), inner.end());
  }
  return out;
}

void Module::collect_buffers(const std::string& prefix, std::vector<NamedTensor>& out) const {
  for (const auto& [name, t] : buffers_) out.push_back({join(prefix, name), t});
  for (const auto& [name, child] : children_) child->collect_buffers(join(prefix, name), out);
}

std::vector<NamedTensor> Module::named_parameters(Params which) const {
  std::vector<NamedTensor> out;
  collect_parameters("", which, out);
  return out;
}

std::vector<Tensor> Module::parameters(Params which) const {
  std::vector<Tensor> out;
  for (NamedTensor& p : named_parameters(which)) out.push_back(std::move(p.tensor));
  return out;
}

std::vector<NamedTensor> Module::named_buffers() const {
  std::vector<NamedTensor> out;
  collect_buffers("", out);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, Module*>> out{{"", const_cast<Module*>(this)}};
  for (const auto& [name, child] : children_) {
    for (auto& [sub, m] : child->named_modules()) out.emplace_back(sub.empty() ? name : join(name, sub), m);
  }
  return out;
}

void Module::collect_info(const std::string& prefix, std::vector<ParameterInfo>& out) const {
  for (const Parameter& p : params_)
    out.push_back({join(prefix, p.name), p.nf4 ? p.nf4->numel() : p.tensor.numel(), p.trainable, p.nf4 != nullptr});
  for (const auto& [name, child] : children_) child->collect_info(join(prefix, name), out);
}

std::vector<ParameterInfo> Module::parameter_info() const {
  std::vector<ParameterInfo> out;
  collect_info("", out);
  return out;
}

int64_t Module::num_parameters(Params which) const {
  int64_t n = 0;
  for (const ParameterInfo& p : parameter_info())
    if (selected(which, p.trainable)) n += p.numel;
  return n;
}

const Nf4Weight& Module::quantize_parameter(const std::string& name, Device device, DType compute_dtype,
                                            bool transpose) {
  auto it = std::find_if(params_.begin(), params_.end(), [&](const Parameter& p) { return p.name == name; });
  GENESIS_CHECK(it != params_.end(), ValueError, "quantize_parameter: ", describe(), " has no parameter '", name, "'");
  GENESIS_CHECK(!it->nf4, ValueError, "quantize_parameter: '", name, "' of ", describe(), " is already quantized");
  GENESIS_CHECK(!it->trainable, ValueError, "quantize_parameter: '", name, "' of ", describe(),
                " trains: only a frozen parameter can be stored in NF4 (freeze it first)");
  NoGradGuard no_grad;
  const Tensor weight = it->tensor.to(device);
  it->nf4 = std::make_shared<Nf4Weight>(quantize_nf4(transpose ? weight.t().contiguous() : weight, compute_dtype));
  it->tensor = Tensor();
  return *it->nf4;
}

template <class F>
void Module::for_each_parameter(const std::string& prefix, F&& f) {
  for (Parameter& p : params_) f(join(prefix, p.name), p);
  for (auto& [name, child] : children_) child->for_each_parameter(join(prefix, name), f);
}

std::vector<int64_t> Module::set_trainable(const std::vector<std::string>& patterns, bool trainable) {
  std::vector<int64_t> matched(patterns.size(), 0);
  for_each_parameter("", [&](const std::string& name, Parameter& p) {
    bool hit = false;
    for (size_t i = 0; i < patterns.size(); ++i) {
      if (name.find(patterns[i]) == std::string::npos) continue;
      ++matched[i];
      hit = true;
    }
    if (!hit) return;
    GENESIS_CHECK(!p.nf4 || !trainable, ValueError, "'", name,
                  "' is stored in NF4 (a quantized frozen base) and cannot train");
    if (p.nf4) return;
    p.trainable = trainable;
    if (!trainable) p.tensor.zero_grad_(/*set_to_none=*/true);
    p.tensor.requires_grad_(trainable);
  });
  return matched;
}

void Module::set_trainable(bool trainable) { set_trainable(std::vector<std::string>{""}, trainable); }

std::vector<NamedTensor> Module::state_dict() const {
  std::vector<NamedTensor> out = named_parameters();
  for (NamedTensor& b : named_buffers()) out.push_back(std::move(b));
  return out;
}

void Module::load_state_dict(const std::vector<NamedTensor>& state, Params which) {
  std::map<std::string, const Tensor*> given;
  for (const NamedTensor& t : state) given[t.name] = &t.tensor;
  std::vector<NamedTensor> own = which == Params::all ? state_dict() : named_parameters(which);
  std::string missing, unexpected, mismatched;
  for (const NamedTensor& t : own) {
    auto it = given.find(t.name);
    if (it == given.end()) {
      missing += (missing.empty() ? "" : ", ") + t.name;
    } else if (it->second->shape() != t.tensor.shape()) {
      mismatched += (mismatched.empty() ? "" : ", ") + t.name + " (checkpoint " + shape_str(it->second->shape()) +
                    ", model " + shape_str(t.tensor.shape()) + ")";
    }
  }
  std::map<std::string, bool> own_names;
  for (const NamedTensor& t : own) own_names[t.name] = true;
  for (const auto& [name, t] : given)
    if (!own_names.count(name)) unexpected += (unexpected.empty() ? "" : ", ") + name;
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string msg = "state dict does not match the model:";
    if (!missing.empty()) msg += " missing [" + missing + "];";
    if (!unexpected.empty()) msg += " unexpected [" + unexpected + "];";
    if (!mismatched.empty()) msg += " shape mismatch [" + mismatched + "];";
    msg.pop_back();
    throw ShapeError(msg);
  }
  NoGradGuard no_grad;
  for (NamedTensor& t : own) t.tensor.copy_(*given[t.name]);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

template <class F>
void Module::for_each_tensor(F&& f, Params which, bool buffers) {
  for (Parameter& p : params_) {
    if (p.nf4 || !selected(which, p.trainable)) continue;
    Tensor moved = f(p.tensor.detach());  // a new leaf, even where f changes nothing
    moved.requires_grad_(p.trainable);
    p.tensor = std::move(moved);
  }
  if (buffers)
    for (auto& [name, t] : buffers_) t = f(t);
  for (auto& [name, child] : children_) child->for_each_tensor(f, which, buffers);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for_each_tensor([&](const Tensor& t) { return t.to(device).contiguous(); });
  for_each_parameter("", [&](const std::string&, Parameter& p) {
    if (p.nf4) *p.nf4 = p.nf4->to(device);
  });
}

void Module::to(DType dtype) {
  NoGradGuard no_grad;
  for_each_tensor([&](const Tensor& t) { return is_floating(t.dtype()) ? t.to(dtype) : t; });
}

void Module::to(DType dtype, Params which) {
  NoGradGuard no_grad;
  for_each_tensor([&](const Tensor& t) { return is_floating(t.dtype()) ? t.to(dtype) : t; }, which,
                  /*buffers=*/false);
}

std::string name_kinds(const std::vector<std::string>& names) {
  std::vector<std::string> kinds;
  for (const std::string& name : names) {
    std::string kind;
    for (size_t i = 0; i <= name.size();) {
      const size_t end = std::min(name.find('.', i), name.size());
      const std::string part = name.substr(i, end - i);
      const bool index = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
      kind += (i == 0 ? "" : ".") + (index ? std::string("N") : part);
      i = end + 1;
    }
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
  }
  std::string out;
  for (const std::string& k : kinds) out += (out.empty() ? "" : ", ") + k;
  return out;
}

std::string Module::summary() const {
  std::ostringstream os;
  for (const auto& [name, m] : named_modules()) {
    int64_t own = 0;
    for (const Parameter& p : m->params_) own += p.nf4 ? p.nf4->numel() : p.tensor.numel();
    os << (name.empty() ? "(model)" : name) << ": " << m->describe();
    if (own > 0) os << "  [" << own << " params]";
    os << "\n";
  }
  os << "total parameters: " << num_parameters() << "\n";
  if (const int64_t frozen = num_parameters(Params::frozen); frozen > 0)
    os << "trainable parameters: " << num_parameters() - frozen << " (" << frozen << " frozen)\n";
  return os.str();
}

}  // namespace genesis::nn
