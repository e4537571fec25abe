#pragma once
// LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models"): a frozen linear
// y = x W^T + b gains a trainable low-rank update, y += scale * (dropout(x) A^T) B^T, with
// A [r, in] and B [out, r]. The adapter's tensors are named as PEFT saves them, beside the base
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

// A layer computing x W^T (+ b) that LoRA can adapt (nn::Linear, GPT-2's Conv1D).
class LoraTarget {
 public:
  virtual ~LoraTarget() = default;
  virtual int64_t in_features() const = 0;
  virtual int64_t out_features() const = 0;
  // Registers the adapter's factors as this module's children lora_A and lora_B.
  virtual void attach_lora(LoraAdapter adapter) = 0;
  const std::optional<LoraAdapter>& lora() const { return lora_; }

 protected:
  std::optional<LoraAdapter> lora_;
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
