#include "libgenesis/nn/module.h"

#include <map>
#include <sstream>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"

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
  params_.emplace_back(std::move(name), std::move(value));
  return params_.back().second;
}

Tensor& Module::register_buffer(std::string name, Tensor value) {
  buffers_.emplace_back(std::move(name), std::move(value));
  return buffers_.back().second;
}

void Module::collect_parameters(const std::string& prefix, std::vector<NamedTensor>& out) const {
  for (const auto& [name, t] : params_) out.push_back({join(prefix, name), t});
  for (const auto& [name, child] : children_) child->collect_parameters(join(prefix, name), out);
}

void Module::collect_buffers(const std::string& prefix, std::vector<NamedTensor>& out) const {
  for (const auto& [name, t] : buffers_) out.push_back({join(prefix, name), t});
  for (const auto& [name, child] : children_) child->collect_buffers(join(prefix, name), out);
}

std::vector<NamedTensor> Module::named_parameters() const {
  std::vector<NamedTensor> out;
  collect_parameters("", out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (NamedTensor& p : named_parameters()) out.push_back(std::move(p.tensor));
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

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const NamedTensor& p : named_parameters()) n += p.tensor.numel();
  return n;
}

std::vector<NamedTensor> Module::state_dict() const {
  std::vector<NamedTensor> out = named_parameters();
  for (NamedTensor& b : named_buffers()) out.push_back(std::move(b));
  return out;
}

void Module::load_state_dict(const std::vector<NamedTensor>& state) {
  std::map<std::string, const Tensor*> given;
  for (const NamedTensor& t : state) given[t.name] = &t.tensor;
  std::vector<NamedTensor> own = state_dict();
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
void Module::for_each_tensor(F&& f) {
  for (auto& [name, t] : params_) {
    Tensor moved = f(t.detach());
    t = moved.requires_grad() ? moved : moved.requires_grad_(true);
  }
  for (auto& [name, t] : buffers_) t = f(t);
  for (auto& [name, child] : children_) child->for_each_tensor(f);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for_each_tensor([&](const Tensor& t) { return t.to(device).contiguous(); });
}

void Module::to(DType dtype) {
  NoGradGuard no_grad;
  for_each_tensor([&](const Tensor& t) { return is_floating(t.dtype()) ? t.to(dtype) : t; });
}

std::string Module::summary() const {
  std::ostringstream os;
  for (const auto& [name, m] : named_modules()) {
    int64_t own = 0;
    for (const auto& [pname, t] : m->params_) own += t.numel();
    os << (name.empty() ? "(model)" : name) << ": " << m->describe();
    if (own > 0) os << "  [" << own << " params]";
    os << "\n";
  }
  os << "total parameters: " << num_parameters() << "\n";
  return os.str();
}

}  // namespace genesis::nn
