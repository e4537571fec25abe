#pragma once
// Loss scaling for fp16 training (torch.amp.GradScaler's kernels): unscale the gradients while
// looking for inf/nan, then grow or back off the scale. Every input and output lives in the
// device's memory, so a training step never waits for the host.
#include <cfloat>
#include <cstdint>
#include <span>

#include "kernels/common/math.h"
#include "kernels/common/loss_scale.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cpu {

// Multiplies every element of every gradient by 1 / *scale (in f32; f64 gradients in f64) and
// sets *found_inf = 1 when any element is inf or nan (it is not cleared otherwise).
void unscale_grads(std::span<const GradBuffer> grads, const float* scale, float* found_inf);

}  // namespace genesis::kernels::cpu
