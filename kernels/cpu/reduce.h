#pragma once
// CPU reductions over the last dimension of a contiguous [rows, cols] buffer.
#include <cstdint>

#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cpu {

// out[r] = sum_c in[r, c]. Floating: accumulates in double; integers: in i64 (out is i64).
void sum_rows(DType dtype, int64_t rows, int64_t cols, const void* in, void* out);

}  // namespace genesis::kernels::cpu
