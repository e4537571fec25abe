#pragma once
// Fused optimizer updates: one pass over each parameter, its gradient and its state
// (the llm.c habit), on contiguous buffers of n elements.
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

namespace genesis::kernels::cpu {

// p, g, m, v (and v_max when amsgrad) all of `dtype` (f32 or f64).
void adam_step(DType dtype, int64_t n, void* p, const void* g, void* m, void* v, void* v_max, const AdamStep& s,
               const StepGate& gate = {});
void lion_step(DType dtype, int64_t n, void* p, const void* g, void* m, const LionStep& s, const StepGate& gate = {});
// momentum_buffer may be null when momentum == 0.
void sgd_step(DType dtype, int64_t n, void* p, const void* g, void* momentum_buffer, const SgdStep& s,
              const StepGate& gate = {});

}  // namespace genesis::kernels::cpu
