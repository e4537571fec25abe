#pragma once
// LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models"): a frozen linear
// y = x W^T + b gains a trainable low-rank update, y += scale * (dropout(x) A^T) B^T, with
// A [r, in] and B [out, r]. The adapter's tensors are named as PEFT saves them, beside the base
// weight they adapt: "<module>.lora_A.weight", "<module>.lora_B.weight".
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace genesis::nn {

struct LoraOptions {
  int64_t r = 8;
  double alpha = 8.0;    // PEFT's lora_alpha
  double dropout = 0.0;  // on the adapter's input only
  // Module-name patterns (a pattern matches a module whose dotted name ends with it at a component
  // boundary, as PEFT's target_modules do); {"all-linear"}: every linear layer but the output head.
  std::vector<std::string> targets;
  bool use_rslora = false;  // scale alpha / sqrt(r) instead of alpha / r (Kalajdzievski 2023)
  // "default": A Kaiming-uniform (a = sqrt(5), PyTorch's nn.Linear default), B zero (PEFT's
  // init_lora_weights = true); "gaussian": A normal(0, 1/r), B zero.
  std::string init = "default";

  double scale() const { return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r); }
  bool operator==(const LoraOptions&) const = default;
};

}  // namespace genesis::nn
