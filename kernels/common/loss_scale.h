#pragma once
// fp16 loss scaling's arguments and its scale update, shared by the CPU and CUDA kernels
// (kernels/cpu/amp.h, kernels/cuda/amp.h).
#include <cfloat>
#include <cstdint>
#include <span>

#include "kernels/common/math.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels {

// A gradient: n contiguous elements of a floating dtype (f32, f64, f16 or bf16).
struct GradBuffer {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t n = 0;
};

// The scaler's device state.
struct LossScaleState {
  float* scale = nullptr;
  int32_t* growth_tracker = nullptr;  // clean steps in a row since the last growth or backoff
  int64_t* skipped_steps = nullptr;   // steps whose gradients held inf/nan, ever
};

struct ScaleUpdate {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// PyTorch's _amp_update_scale_: a step with inf/nan backs the scale off and restarts the
// tracker; growth_interval clean steps in a row grow it (unless it would overflow f32). The
// products are taken in double and rounded to f32, as PyTorch does. `record`, when given,
// receives {found_inf, the scale used, the scale after}.
GENESIS_HD void update_loss_scale(const LossScaleState& s, const float* found_inf, const ScaleUpdate& u,
                                  float* record) {
  const bool skipped = *found_inf != 0.0f;
  const float used = *s.scale;
  if (skipped) {
    *s.scale = static_cast<float>(static_cast<double>(used) * u.backoff_factor);
    *s.growth_tracker = 0;
    ++*s.skipped_steps;
  } else if (*s.growth_tracker + 1 == u.growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(used) * u.growth_factor);
    if (grown <= FLT_MAX) *s.scale = grown;
    *s.growth_tracker = 0;
  } else {
    ++*s.growth_tracker;
  }
  if (record) {
    record[0] = skipped ? 1.0f : 0.0f;
    record[1] = used;
    record[2] = *s.scale;
  }
}

// 1 / scale as PyTorch computes it (the reciprocal in double, rounded to f32).
GENESIS_HD float inverse_scale(float scale) {
  return static_cast<float>(1.0 / static_cast<double>(scale));
}

}  // namespace genesis::kernels
