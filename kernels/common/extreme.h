#pragma once
// Which extreme a max/min row reduction takes (kernels/cpu/reduce.h, kernels/cuda/reduce.h).
#include <cstdint>

namespace genesis::kernels {

enum class Extreme { max, min };

}  // namespace genesis::kernels
