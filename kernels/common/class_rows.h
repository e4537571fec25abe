#pragma once
// The layout of a classification loss's logits (kernels/cpu/loss.h, kernels/cuda/loss.h).
#include <cstdint>

namespace genesis::kernels {

struct ClassRows {
  int64_t outer = 1;
  int64_t classes = 1;
  int64_t inner = 1;
};

}  // namespace genesis::kernels
