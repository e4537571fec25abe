#pragma once
// Reductions over a row in kLanes interleaved accumulators, folded pairwise at the end: a
// single running accumulator serializes on the add's latency and cannot become vector code
// (that would reorder the sum); sixteen independent lanes are one AVX-512 register, two AVX2
// or four SSE registers, in the same fixed order on every instruction set, so results are
// deterministic and equal whatever with_cpu_isa chose.
#include <algorithm>
#include <cstdint>
#include <limits>

namespace genesis::kernels::cpu {

inline constexpr int kLanes = 16;

// Folds lanes[0..kLanes) pairwise into lanes[0] with op.
template <class A, class Op>
A fold_lanes(A (&lanes)[kLanes], Op&& op) {
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int k = 0; k < width; ++k) lanes[k] = op(lanes[k], lanes[k + width]);
  return lanes[0];
}

// The sum of term(i) over i in [0, n), in A.
template <class A, class Term>
A lane_sum(int64_t n, Term&& term) {
  A lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] += term(i + k);
  for (int k = 0; i < n; ++i, ++k) lanes[k] += term(i);
  return fold_lanes(lanes, [](A a, A b) { return a + b; });
}

// The sum of n terms that are exact in float (float data, bf16 or f16 widened), in double:
// kFloatLanes float lanes add a block of kSumBlock terms (16 per lane), then the block's lanes
// are added into kLanes double lanes. That is one add per element where double lanes alone
// need a conversion too, and a row streamed from memory summed 1.5-2x faster on a Xeon.
// Fixed order on every instruction set, as lane_sum. Each lane rounds in float over its 16
// terms, about PyTorch's f32 accuracy; terms above FLT_MAX / 16 can overflow a lane (callers
// redo such rows in double: reduce.cpp's row_total).
inline constexpr int kFloatLanes = 64;
inline constexpr int64_t kSumBlock = 1024;
static_assert(kSumBlock % kFloatLanes == 0 && kFloatLanes % kLanes == 0);

template <class Term>
double float_sum(int64_t n, Term&& term) {
  double total[kLanes] = {};
  float lanes[kFloatLanes];
  auto add_lanes = [&] {
    for (int g = 0; g < kFloatLanes; g += kLanes)
      for (int k = 0; k < kLanes; ++k) total[k] += static_cast<double>(lanes[g + k]);
  };
  int64_t i = 0;
  for (; i + kSumBlock <= n; i += kSumBlock) {
    std::fill_n(lanes, kFloatLanes, 0.0f);
    for (int64_t j = i; j < i + kSumBlock; j += kFloatLanes)
      for (int k = 0; k < kFloatLanes; ++k) lanes[k] += term(j + k);
    add_lanes();
  }
  std::fill_n(lanes, kFloatLanes, 0.0f);
  for (; i + kFloatLanes <= n; i += kFloatLanes)
    for (int k = 0; k < kFloatLanes; ++k) lanes[k] += term(i + k);
  for (int k = 0; i < n; ++i, ++k) lanes[k] += term(i);
  add_lanes();
  return fold_lanes(total, [](double a, double b) { return a + b; });
}

// Two sums in one pass: terms(i, s0, s1) adds element i's terms to s0 and s1.
template <class A, class Terms>
void lane_sum2(int64_t n, A& sum0, A& sum1, Terms&& terms) {
  A lanes0[kLanes] = {}, lanes1[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) terms(i + k, lanes0[k], lanes1[k]);
  for (int k = 0; i < n; ++i, ++k) terms(i, lanes0[k], lanes1[k]);
  auto add = [](A a, A b) { return a + b; };
  sum0 = fold_lanes(lanes0, add);
  sum1 = fold_lanes(lanes1, add);
}

// The max of term(i) over i in [0, n), in A (NaN terms are skipped, as std::max does).
template <class A, class Term>
A lane_max(int64_t n, Term&& term) {
  A lanes[kLanes];
  std::fill_n(lanes, kLanes, -std::numeric_limits<A>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] = std::max(lanes[k], term(i + k));
  for (int k = 0; i < n; ++i, ++k) lanes[k] = std::max(lanes[k], term(i));
  return fold_lanes(lanes, [](A a, A b) { return std::max(a, b); });
}

template <class A>
A row_max(const A* v, int64_t n) {
  return lane_max<A>(n, [v](int64_t i) { return v[i]; });
}

template <class A>
A row_sum(const A* v, int64_t n) {
  return lane_sum<A>(n, [v](int64_t i) { return v[i]; });
}

}  // namespace genesis::kernels::cpu
