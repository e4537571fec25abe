#pragma once
// Strided iteration for CPU kernels: walk N operands that share one logical shape,
// each with its own element strides (0 = broadcast), in row-major order, calling an
// inner function over runs of the last dimension. Adjacent dimensions that are laid out
// contiguously for every operand are merged first, so contiguous tensors become a single
// run. Work above kParallelGrain elements is split across OpenMP threads.
#include <array>
#include <cstdint>
#include <algorithm>

#include <omp.h>

#include "kernels/common/collapsed_dims.h"
#include "kernels/common/elementwise_ops.h"

namespace genesis::kernels::cpu {

// About 50 us of one core's work in a memory-bound loop (1 MiB of f32). Waking the pool's
// sleeping threads (GOMP_SPINCOUNT is kept low for shared hosts: core/threads.h) costs 10-30 us,
// which made a relu gradient of 32768 elements 5x slower split in two than on one thread.
inline constexpr int64_t kParallelGrain = 262144;

// Splits [0, n) across threads when n * cost_per_item is large enough to pay for it.
template <class F>
void parallel_for(int64_t n, int64_t cost_per_item, F&& f) {
  if (n <= 0) return;
  if (n * cost_per_item < kParallelGrain || n == 1 || omp_get_max_threads() == 1 || omp_in_parallel()) {
    f(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t chunk = (n + nt - 1) / nt;
    int64_t b = std::min<int64_t>(n, t * chunk), e = std::min<int64_t>(n, b + chunk);
    if (b < e) f(b, e);
  }
}

// The collapsed dimensions (kernels/common/collapsed_dims.h) with strides in bytes, as the
// loops below walk them.
template <int N>
struct StridedGeometry : CollapsedDims<N> {
  StridedGeometry(int ndim, const int64_t* shape, const std::array<const int64_t*, N>& elem_strides,
                  const std::array<int64_t, N>& elem_sizes)
      : CollapsedDims<N>(ndim, shape, elem_strides) {
    for (int k = 0; k < N; ++k)
      for (int d = 0; d < this->ndim; ++d) this->strides[k][d] *= elem_sizes[k];
  }
};

// inner(std::array<char*, N> ptrs, std::array<int64_t, N> byte_strides, int64_t count)
template <int N, class Inner>
void strided_for_each(int ndim, const int64_t* shape, std::array<char*, N> base,
                      const std::array<const int64_t*, N>& elem_strides, const std::array<int64_t, N>& elem_sizes,
                      Inner&& inner) {
  for (int d = 0; d < ndim; ++d)
    if (shape[d] == 0) return;
  StridedGeometry<N> g(ndim, shape, elem_strides, elem_sizes);
  const int last = g.ndim - 1;
  const int64_t total = g.numel();
  std::array<int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = g.strides[k][last];

  auto run_range = [&](int64_t begin, int64_t end) {
    int64_t coord[kMaxDims];
    int64_t rem = begin;
    std::array<char*, N> ptrs = base;
    for (int d = last; d >= 0; --d) {
      coord[d] = rem % g.shape[d];
      rem /= g.shape[d];
      for (int k = 0; k < N; ++k) ptrs[k] += coord[d] * g.strides[k][d];
    }
    int64_t i = begin;
    while (i < end) {
      int64_t count = std::min(g.shape[last] - coord[last], end - i);
      inner(ptrs, inner_strides, count);
      i += count;
      if (i >= end) break;
      // The run reached the end of its row: rewind the last dimension, carry into the outer ones.
      for (int k = 0; k < N; ++k) ptrs[k] -= coord[last] * g.strides[k][last];
      coord[last] = 0;
      for (int d = last - 1; d >= 0; --d) {
        ++coord[d];
        for (int k = 0; k < N; ++k) ptrs[k] += g.strides[k][d];
        if (coord[d] < g.shape[d]) break;
        for (int k = 0; k < N; ++k) ptrs[k] -= g.shape[d] * g.strides[k][d];
        coord[d] = 0;
      }
    }
  };

  parallel_for(total, 1, run_range);  // kParallelGrain counts elements
}

}  // namespace genesis::kernels::cpu
