#pragma once
// The iteration space of the strided kernels: N operands that share one logical shape, each
// with its own element strides (0 = broadcast). Size-1 dimensions are dropped, and a dimension
// that continues the one before it contiguously for every operand is merged into it, so a
// contiguous tensor is one dimension. kernels/cpu/loops.h walks it (in byte strides); CUDA's
// strided Geometry (kernels/cuda/common.cuh) collapses its operands the same way.
#include <array>
#include <cstdint>

#include "kernels/common/elementwise_ops.h"

namespace genesis::kernels {

template <int N>
struct CollapsedDims {
  int ndim = 0;
  int64_t shape[kMaxDims];
  int64_t strides[N][kMaxDims];

  CollapsedDims(int in_ndim, const int64_t* in_shape, const std::array<const int64_t*, N>& in_strides) {
    for (int d = 0; d < in_ndim; ++d) {
      if (in_shape[d] == 1) continue;
      bool merge = ndim > 0;
      for (int k = 0; k < N && merge; ++k) merge = strides[k][ndim - 1] == in_strides[k][d] * in_shape[d];
      if (merge) {
        shape[ndim - 1] *= in_shape[d];
        for (int k = 0; k < N; ++k) strides[k][ndim - 1] = in_strides[k][d];
        continue;
      }
      shape[ndim] = in_shape[d];
      for (int k = 0; k < N; ++k) strides[k][ndim] = in_strides[k][d];
      ++ndim;
    }
    if (ndim == 0) {  // a single element
      shape[0] = 1;
      for (int k = 0; k < N; ++k) strides[k][0] = 0;
      ndim = 1;
    }
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }
};

}  // namespace genesis::kernels
