#pragma once
// Philox-based random fills. Element i draws from counter offset + i / 4, lane i % 4
// (normals: pairs of lanes through Box-Muller), so results are independent of threading.
#include <cstdint>

#include "kernels/common/random_kind.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cpu {

// uniform: U[a, b); normal: N(a, b^2); randint: integers in [a, b); bernoulli: 1 with probability a.
void random_fill(RandomKind kind, DType dtype, int64_t n, void* out, uint64_t seed, uint64_t offset, double a,
                 double b);

}  // namespace genesis::kernels::cpu
