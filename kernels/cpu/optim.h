#pragma once
// Fused optimizer updates: one pass over each parameter, its gradient and its state
// (the llm.c habit), on contiguous buffers of n elements.
#include <cmath>
#include <cstdint>

#include "kernels/common/math.h"
#include "kernels/common/optim_steps.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cpu {

// p, g, m, v (and v_max when amsgrad) all of `dtype` (f32 or f64).
void adam_step(DType dtype, int64_t n, void* p, const void* g, void* m, void* v, void* v_max, const AdamStep& s,
               const StepGate& gate = {});
void lion_step(DType dtype, int64_t n, void* p, const void* g, void* m, const LionStep& s, const StepGate& gate = {});
// momentum_buffer may be null when momentum == 0.
void sgd_step(DType dtype, int64_t n, void* p, const void* g, void* momentum_buffer, const SgdStep& s,
              const StepGate& gate = {});

}  // namespace genesis::kernels::cpu
