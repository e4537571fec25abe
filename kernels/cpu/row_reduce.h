#pragma once
// Max and sum over a contiguous run with four interleaved accumulators: a single running
// accumulator serializes on the max/add latency, four keep the pipeline busy. The order
// is fixed, so results are deterministic.
#include <algorithm>
#include <cstdint>
#include <limits>

namespace genesis::kernels::cpu {

template <class A>
A row_max(const A* v, int64_t n) {
  A lane[4];
  std::fill_n(lane, 4, -std::numeric_limits<A>::infinity());
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) lane[k] = std::max(lane[k], v[i + k]);
  for (; i < n; ++i) lane[0] = std::max(lane[0], v[i]);
  return std::max(std::max(lane[0], lane[1]), std::max(lane[2], lane[3]));
}

template <class A>
A row_sum(const A* v, int64_t n) {
  A lane[4] = {A(0), A(0), A(0), A(0)};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) lane[k] += v[i + k];
  for (; i < n; ++i) lane[0] += v[i];
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

}  // namespace genesis::kernels::cpu
