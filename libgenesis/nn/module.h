#pragma once
// Module: named parameters, buffers and child modules, train/eval mode, and strict
// state dicts whose names follow the PyTorch / Hugging Face convention ("0.weight",
// "encoder.layers.3.bias").
//
// A parameter is trainable (the default) or frozen. A frozen parameter does not require grad:
// backward computes no gradient for it, and the training layers (optimizer groups, clipping,
// data-parallel buckets, the FLOPs count) take the trainable parameters only. Freezing keeps
// the parameter's storage and dtype.
//
// A frozen parameter may also be quantized (QLoRA's NF4 base, quantize_parameter): it then has
// no tensor. It leaves named_parameters() and the state dict, and stays in parameter_info() and
// num_parameters() as a frozen parameter.
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "libgenesis/core/named_tensor.h"
#include "libgenesis/core/tensor.h"

namespace genesis {
struct Nf4Weight;
}  // namespace genesis

namespace genesis::nn {

// Which parameters a query returns.
enum class Params { all, trainable, frozen };

// One parameter as parameter_info() lists it, quantized ones included.
struct ParameterInfo {
  std::string name;  // dotted
  int64_t numel = 0;
  bool trainable = true;
  bool quantized = false;  // stored in NF4 (frozen, no tensor)
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& x) = 0;
  // forward(x); with autocast disabled for this module (set_autocast_enabled(false), e.g. amp.keep_f32),
  // under autocast it runs with autocast off and a bf16/f16 input cast to f32 first. Calls of
  // forward() itself bypass this: parents keep a child in f32 by calling it as (*child)(x).
  Tensor operator()(const Tensor& x);
  // Whether this module's forward runs under the caller's autocast (the default) or in f32.
  void set_autocast_enabled(bool enabled) { autocast_enabled_ = enabled; }
  bool autocast_enabled() const { return autocast_enabled_; }
  // Short type name for printing ("Linear(784 -> 256)").
  virtual std::string describe() const = 0;

  // Recursive, in registration order, with dotted names.
  std::vector<NamedTensor> named_parameters(Params which = Params::all) const;
  std::vector<Tensor> parameters(Params which = Params::all) const;
  // The tensors that hold the frozen parameters: each frozen parameter's own, and each quantized
  // one's codes and scales (what sharding a frozen base moves between ranks). Replacing their
  // data (Tensor::set_data) changes what the module computes with.
  std::vector<Tensor> frozen_storage() const;
  std::vector<NamedTensor> named_buffers() const;
  std::vector<std::pair<std::string, Module*>> named_modules() const;  // includes this module as ""
  // Quantized parameters count as frozen.
  int64_t num_parameters(Params which = Params::all) const;
  // Every parameter in registration order, quantized ones included: what counting needs (the
  // FLOPs of a step) where the tensors do not matter.
  std::vector<ParameterInfo> parameter_info() const;

  // Freezes (trainable = false) or unfreezes every parameter whose dotted name contains one of
  // `patterns` (plain substrings, as optimizer.no_decay matches). Returns how many parameters
  // each pattern matched, in the patterns' order, so callers can name a pattern that matched
  // nothing. A frozen parameter loses its gradient. Unfreezing a quantized one is a ValueError.
  std::vector<int64_t> set_trainable(const std::vector<std::string>& patterns, bool trainable);
  // Every parameter of this module and its children.
  void set_trainable(bool trainable);

  // Parameters and buffers together.
  std::vector<NamedTensor> state_dict() const;
  // Copies values into the existing tensors (dtype cast, device move). Strict: every
  // missing, unexpected or shape-mismatched name is reported in one error. With `which` other
  // than all, `state` holds exactly those parameters (a LoRA checkpoint's adapters) and no buffer.
  void load_state_dict(const std::vector<NamedTensor>& state, Params which = Params::all);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves/casts every parameter and buffer (parameters stay leaves; the trainable ones require
  // grad). Call before building an optimizer: it replaces the tensors. to(dtype, which) casts
  // only the parameters `which` selects (buffers stay), e.g. a frozen base to bf16 while its
  // adapters stay f32. Quantized parameters move with to(Device) and keep their format.
  void to(Device device);
  void to(DType dtype);
  void to(DType dtype, Params which);

  // A multi-line summary: one line per module with its parameter count.
  std::string summary() const;

 protected:
  Tensor& register_parameter(std::string name, Tensor value);
  Tensor& register_buffer(std::string name, Tensor value);
  // Stores this module's frozen parameter `name` in NF4 on `device` (its transpose where
  // `transpose`: a weight kept [in, out]), dequantizing to `compute_dtype`, and drops its tensor.
  // The returned weight keeps its address for the module's life (to(Device) moves it in place).
  // ValueError for an unknown, trainable or already quantized parameter.
  const Nf4Weight& quantize_parameter(const std::string& name, Device device, DType compute_dtype,
                                      bool transpose = false);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    children_.emplace_back(std::move(name), module);
    return module;
  }

 private:
  struct Parameter {
    std::string name;
    Tensor tensor;
    bool trainable = true;
    std::shared_ptr<Nf4Weight> nf4;  // set once quantized; `tensor` is then undefined
  };
  void collect_parameters(const std::string& prefix, Params which, std::vector<NamedTensor>& out) const;
  void collect_buffers(const std::string& prefix, std::vector<NamedTensor>& out) const;
  void collect_info(const std::string& prefix, std::vector<ParameterInfo>& out) const;
  // f(name, parameter) over this module's and its children's parameters, with dotted names.
  template <class F>
  void for_each_parameter(const std::string& prefix, F&& f);
  template <class F>
  void for_each_tensor(F&& f, Params which = Params::all, bool buffers = true);

  // deques: register_* hands out references that must survive later registrations.
  std::deque<Parameter> params_;
  std::deque<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  bool autocast_enabled_ = true;
};

using ModulePtr = std::shared_ptr<Module>;

// Dotted names with their numeric parts as N, each kind once, comma-separated: a deep model's
// parameters or layers listed in one line of an error ("model.layers.N.self_attn.q_proj.weight").
std::string name_kinds(const std::vector<std::string>& names);

}  // namespace genesis::nn
