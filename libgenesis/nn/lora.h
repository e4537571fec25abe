#pragma once
// LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models"): a frozen linear
// y = x W^T + b gains a trainable low-rank update, y += scale * (dropout(x) A^T) B^T, with
// A [r, in] and B [out, r]. QLoRA (Dettmers et al. 2023) stores the frozen W in NF4 besides. The adapter's tensors are named as PEFT saves them, beside the base
// weight they adapt: "<module>.lora_A.weight", "<module>.lora_B.weight".
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "libgenesis/core/generator.h"
#include "libgenesis/nn/module.h"
#include "libgenesis/ops/quant.h"

namespace genesis::nn {

struct LoraOptions {
  int64_t r = 8;
  double alpha = 8.0;    // PEFT's lora_alpha
  double dropout = 0.0;  // on the adapter's input only
  // Module-name patterns (a pattern matches a module whose dotted name ends with it at a component
  // boundary, as PEFT's target_modules do); {"all-linear"}: every linear layer but the output head.
  std::vector<std::string> targets{};
  bool use_rslora = false;  // scale alpha / sqrt(r) instead of alpha / r (Kalajdzievski 2023)
  // "default": A Kaiming-uniform (a = sqrt(5), PyTorch's nn.Linear default), B zero (PEFT's
  // init_lora_weights = true); "gaussian": A normal(0, 1/r), B zero.
  std::string init = "default";

  double scale() const { return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r); }
  bool operator==(const LoraOptions&) const = default;
};

// One factor of an adapter (lora_A [r, in] or lora_B [out, r]): a weight, applied as x W^T.
class LoraFactor final : public Module {
 public:
  explicit LoraFactor(Tensor weight, std::string role);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  Tensor& weight() { return *weight_; }

 private:
  Tensor* weight_;
  std::string role_;
};

// The adapter of one layer: its two factors (the layer's children lora_A and lora_B), the scale
// and the dropout on its input.
struct LoraAdapter {
  std::shared_ptr<LoraFactor> a, b;
  double scale = 1.0;
  double dropout = 0.0;

  // y + scale * (dropout(x) A^T) B^T for the layer's input x and base output y; dropout only
  // while `training`. The scale multiplies the rank-r product, never the full output.
  Tensor add_to(const Tensor& y, const Tensor& x, bool training) const;
};

// A layer computing y = x W^T + b that LoRA can adapt and QLoRA can store in NF4: nn::Linear (W
// kept [out, in]) and GPT-2's Conv1D (W kept [in, out], Hugging Face's layout, applied through its
// transposed view). An adapter's factors keep their [r, in] and [out, r] shapes either way, as
// PEFT's fan_in_fan_out does.
class LoraTarget : public Module {
 public:
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  // The base product plus the adapter's update once one is attached.
  Tensor forward(const Tensor& x) override;
  // (*this)(swiglu(gate, up)), the down projection of a SwiGLU MLP: one op (ops/linalg.h's
  // swiglu_linear, which keeps no SwiGLU output for the backward) where forward would take the
  // plain product or lora_linear; composed otherwise (NF4 base, adapter dropout, f32 module).
  Tensor forward_swiglu(const Tensor& gate, const Tensor& up);
  // Registers the adapter's factors as this layer's children lora_A and lora_B.
  void attach_lora(LoraAdapter adapter);
  const std::optional<LoraAdapter>& lora() const { return lora_; }
  // Stores the frozen weight in NF4 on `device`, dequantized to `compute_dtype` in each product
  // (Module::quantize_parameter); the bias stays a tensor. ValueError while the weight trains.
  void quantize_nf4(Device device, DType compute_dtype);
  const Nf4Weight* nf4() const { return nf4_; }

 protected:
  // `weight` [out, in], or [in, out] where `transposed`; `bias` [out] or undefined (no bias).
  LoraTarget(Tensor weight, Tensor bias, bool transposed);
  // x W^T + b through the stored weight (the NF4 one once quantized), without the adapter.
  Tensor base_forward(const Tensor& x) const;
  // The weight in its stored layout; undefined once quantized.
  const Tensor& stored_weight() const { return *weight_; }
  const Tensor* bias() const { return bias_; }

  std::optional<LoraAdapter> lora_;

 private:
  int64_t in_, out_;
  bool transposed_;
  Tensor* weight_;
  Tensor* bias_ = nullptr;
  const Nf4Weight* nf4_ = nullptr;
};

// Whether LoRA target `pattern` names the module `name`: equal to it, or a dotted suffix of it
// ("q_proj" names "model.layers.0.self_attn.q_proj"; "self_attn.q_proj" too).
bool lora_pattern_matches(const std::string& name, const std::string& pattern);

// The layers of `model` LoRA can adapt, with their dotted names, in registration order.
std::vector<std::pair<std::string, LoraTarget*>> lora_targets(const Module& model);

// The layers options.targets selects ("all-linear": every target). ValueError when a pattern
// selects nothing, naming it and the layers there are.
std::vector<std::pair<std::string, LoraTarget*>> select_lora_targets(const Module& model, const LoraOptions& options);

// A new adapter for a layer of in -> out features, initialized as options.init says (A from
// `gen`, or the default generator), f32 on `device`.
LoraAdapter make_lora_adapter(int64_t in, int64_t out, const LoraOptions& options, Device device,
                              Generator* gen = nullptr);

// Freezes every parameter of `model` and gives each selected layer a new, trainable adapter.
// Returns the adapted layers' names. ValueError for a pattern that selects nothing, an r < 1 or
// an r above a target's smaller dimension, naming it.
std::vector<std::string> add_lora(Module& model, const LoraOptions& options, Generator* gen = nullptr);

}  // namespace genesis::nn
