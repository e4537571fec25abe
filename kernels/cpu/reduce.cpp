#include "kernels/cpu/reduce.h"

#include "kernels/cpu/loops.h"

namespace genesis::kernels::cpu {

void sum_rows(DType dtype, int64_t rows, int64_t cols, const void* in, void* out) {
  GENESIS_DISPATCH_ALL(dtype, "sum", {
    const scalar_t* x = static_cast<const scalar_t*>(in);
    using Acc = std::conditional_t<std::is_integral_v<scalar_t>, int64_t, double>;
    using Out = std::conditional_t<std::is_integral_v<scalar_t>, int64_t, scalar_t>;
    Out* y = static_cast<Out*>(out);
    parallel_for(rows, cols, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const scalar_t* row = x + r * cols;
        Acc acc = 0;
        for (int64_t c = 0; c < cols; ++c) acc += static_cast<Acc>(static_cast<acc_t<scalar_t>>(row[c]));
        y[r] = static_cast<Out>(static_cast<acc_t<scalar_t>>(acc));
      }
    });
  });
}

}  // namespace genesis::kernels::cpu
