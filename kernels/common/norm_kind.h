#pragma once
// The vector norm of order p as the row-reduction kernels compute it (kernels/cpu/reduce.cpp,
// kernels/cuda/reduce_stats.cu): the orders with their own fold, and the general power mean.
#include <limits>

namespace genesis::kernels {

enum class NormKind { max_abs, min_abs, count_nonzero, l1, l2, general };

inline NormKind norm_kind(double p) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (p == kInf) return NormKind::max_abs;
  if (p == -kInf) return NormKind::min_abs;
  if (p == 0.0) return NormKind::count_nonzero;
  if (p == 1.0) return NormKind::l1;
  if (p == 2.0) return NormKind::l2;
  return NormKind::general;
}

}  // namespace genesis::kernels
