#pragma once
// The distributions of the Philox random fills (kernels/cpu/random.h, kernels/cuda/elementwise.h).
#include <cstdint>

#include "libgenesis/core/dtype.h"

namespace genesis::kernels {
enum class RandomKind : uint8_t { uniform, normal, randint, bernoulli };
}  // namespace genesis::kernels
