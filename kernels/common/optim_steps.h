#pragma once
// The fused optimizer updates' arguments, shared by the CPU and CUDA kernels
// (kernels/cpu/optim.h, kernels/cuda/optim.h).
#include <cmath>
#include <cstdint>

#include "kernels/common/math.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels {

// Adam's bias correction 1 - beta^t after t updates.
GENESIS_HD double bias_correction(double beta, int64_t t) {
  using std::pow;
  return 1.0 - pow(beta, static_cast<double>(t));
}

// A step that the device decides on (fp16 loss scaling, libgenesis/amp): while *skip_if is
// nonzero the update is a no-op, parameter and state untouched. `step`, when given, is the
// parameter's count of applied updates, in the parameter's memory: the update takes its step
// number t = *step + 1 from it (adam's bias corrections, sgd's first step) instead of from
// AdamStep / SgdStep, and *step advances only when the update is applied.
struct StepGate {
  const float* skip_if = nullptr;
  int64_t* step = nullptr;
};

struct AdamStep {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled = true;  // AdamW: p -= lr * wd * p; Adam: g += wd * p
  bool amsgrad = false;
  double bias_correction1 = 1.0, bias_correction2 = 1.0;  // 1 - beta^t
};

struct LionStep {
  double lr = 1e-4, beta1 = 0.9, beta2 = 0.99, weight_decay = 0.0;
};

struct SgdStep {
  double lr = 1e-2, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = true;  // momentum buffer starts as the gradient
};

}  // namespace genesis::kernels
