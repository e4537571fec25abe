#pragma once
// Fused optimizer updates: one pass over each parameter, its gradient and its state
// (the llm.c habit), on contiguous buffers of n elements.
#include <cstdint>

#include "libgenesis/core/dtype.h"

namespace genesis::kernels {

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
void adam_step(DType dtype, int64_t n, void* p, const void* g, void* m, void* v, void* v_max, const AdamStep& s);
void lion_step(DType dtype, int64_t n, void* p, const void* g, void* m, const LionStep& s);
// momentum_buffer may be null when momentum == 0.
void sgd_step(DType dtype, int64_t n, void* p, const void* g, void* momentum_buffer, const SgdStep& s);

}  // namespace genesis::kernels::cpu
