#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/common/norm_kind.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/row_reduce.h"

namespace genesis::kernels::cpu {

namespace {

template <class T>
constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

// Sums and products accumulate in double for floating inputs (f32, f16 and bf16 sums add float
// lanes per block first: row_total) and in i64 otherwise.
template <class T>
using SumAcc = std::conditional_t<kIsFloat<T>, double, int64_t>;
template <class T>
using SumOut = std::conditional_t<kIsFloat<T>, T, int64_t>;

template <class T>
SumAcc<T> widen(T v) {
  return static_cast<SumAcc<T>>(static_cast<acc_t<T>>(v));
}

template <class T>
T narrow_to(double v) {
  return static_cast<T>(static_cast<acc_t<T>>(v));
}

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// The larger of a and b where a NaN wins; on ties the first argument is kept.
inline double nan_max(double a, double b) { return std::isnan(a) || b <= a ? a : b; }
inline double nan_min(double a, double b) { return std::isnan(a) || b >= a ? a : b; }

// Column chunk width for long rows. It is fixed (not derived from the thread count) so a row
// is always reduced in the same order, whatever the number of threads.
inline constexpr int64_t kColumnChunk = 16384;

// Reduces every row of a contiguous [rows, cols] buffer: partial(r, begin, end) reduces
// columns [begin, end) of row r, the partials of a row are folded left to right with
// combine, and finish(r, total) stores the result. A row of several chunks has its chunks
// computed in parallel, so a single huge row still uses every thread.
template <class Partial, class PartialFn, class CombineFn, class FinishFn>
void reduce_rows(int64_t rows, int64_t cols, PartialFn&& partial, CombineFn&& combine, FinishFn&& finish) {
  const int64_t chunks = std::max<int64_t>(1, (cols + kColumnChunk - 1) / kColumnChunk);
  if (chunks == 1) {
    parallel_for(rows, std::max<int64_t>(cols, 1), [&](int64_t begin, int64_t end) {
      with_cpu_isa([&] {
        for (int64_t r = begin; r < end; ++r) finish(r, partial(r, int64_t{0}, cols));
      });
    });
    return;
  }
  std::vector<Partial> partials(static_cast<size_t>(rows * chunks));
  parallel_for(rows * chunks, kColumnChunk, [&](int64_t begin, int64_t end) {
    with_cpu_isa([&] {
      for (int64_t i = begin; i < end; ++i) {
        int64_t r = i / chunks, first = (i % chunks) * kColumnChunk;
        partials[static_cast<size_t>(i)] = partial(r, first, std::min(cols, first + kColumnChunk));
      }
    });
  });
  parallel_for(rows, chunks, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const Partial* row = partials.data() + r * chunks;
      Partial total = row[0];
      for (int64_t c = 1; c < chunks; ++c) total = combine(total, row[c]);
      finish(r, total);
    }
  });
}

inline double plus(double a, double b) { return a + b; }

// Sums of map(x) over [begin, end) in double (row_reduce.h's fixed-order lanes).
template <class T, class MapFn>
double lane_sum(const T* row, int64_t begin, int64_t end, MapFn&& map) {
  return cpu::lane_sum<double>(end - begin, [&](int64_t i) { return map(widen(row[begin + i])); });
}

// The sum of row[begin, end) in double: row_reduce.h's float lanes for data exact in float,
// double lanes for double. A float sum that overflowed (terms near FLT_MAX) or met an inf or a
// NaN is redone in double lanes, so finite data never sums to inf or NaN.
template <class T>
double row_total(const T* row, int64_t begin, int64_t end) {
  if constexpr (std::is_same_v<acc_t<T>, float>) {
    const double total = float_sum(end - begin, [row, begin](int64_t i) { return static_cast<float>(row[begin + i]); });
    if (std::isfinite(total)) return total;
  }
  return lane_sum(row, begin, end, [](double v) { return v; });
}

// finish(r, sum of row r) for every row of a contiguous floating [rows, cols] buffer.
template <class T, class FinishFn>
void sum_each_row(int64_t rows, int64_t cols, const T* x, FinishFn&& finish) {
  reduce_rows<double>(
      rows, cols, [&](int64_t r, int64_t begin, int64_t end) { return row_total(x + r * cols, begin, end); }, plus,
      finish);
}

// Row-wise fold of f(x) in double over a floating buffer, combined with combine.
template <class T, class MapFn, class CombineFn, class FinishFn>
void fold_rows(int64_t rows, int64_t cols, const T* x, double init, MapFn&& map, CombineFn&& combine,
               FinishFn&& finish) {
  reduce_rows<double>(
      rows, cols,
      [&](int64_t r, int64_t begin, int64_t end) {
        const T* row = x + r * cols;
        if constexpr (std::is_same_v<std::decay_t<CombineFn>, decltype(&plus)>) {
          if (combine == &plus) return init + lane_sum(row, begin, end, map);
        }
        double acc = init;
        for (int64_t c = begin; c < end; ++c) acc = combine(acc, map(widen(row[c])));
        return acc;
      },
      combine, finish);
}

template <class T>
struct ArgExtreme {
  acc_t<T> value;
  int64_t index;
};

template <class C>
bool is_nan_value(C v) {
  if constexpr (std::is_floating_point_v<C>) return std::isnan(v);
  else return false;
}

// True when candidate should replace best: a NaN beats everything, and ties keep best.
template <Extreme kWhich, class C>
bool beats(C candidate, C best) {
  if (is_nan_value(best)) return false;
  if (is_nan_value(candidate)) return true;
  return kWhich == Extreme::max ? candidate > best : candidate < best;
}

template <Extreme kWhich, class T>
void extreme_typed(int64_t rows, int64_t cols, const T* x, T* values, int64_t* indices) {
  using Arg = ArgExtreme<T>;
  reduce_rows<Arg>(
      rows, cols,
      [&](int64_t r, int64_t begin, int64_t end) {
        const T* row = x + r * cols;
        Arg best{static_cast<acc_t<T>>(row[begin]), begin};
        for (int64_t c = begin + 1; c < end; ++c) {
          auto v = static_cast<acc_t<T>>(row[c]);
          if (beats<kWhich>(v, best.value)) best = {v, c};
        }
        return best;
      },
      [](const Arg& left, const Arg& right) { return beats<kWhich>(right.value, left.value) ? right : left; },
      [&](int64_t r, const Arg& best) {
        values[r] = x[r * cols + best.index];
        indices[r] = best.index;
      });
}

// Wrapping i64 product (signed overflow would be undefined behaviour).
inline int64_t wrapping_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

template <class T>
void prod_typed(int64_t rows, int64_t cols, const T* x, SumOut<T>* y) {
  using Acc = SumAcc<T>;
  auto multiply = [](Acc a, Acc b) -> Acc {
    if constexpr (kIsFloat<T>) return a * b;
    else return wrapping_mul(a, b);
  };
  reduce_rows<Acc>(
      rows, cols,
      [&](int64_t r, int64_t begin, int64_t end) {
        const T* row = x + r * cols;
        Acc acc = 1;
        for (int64_t c = begin; c < end; ++c) acc = multiply(acc, widen(row[c]));
        return acc;
      },
      multiply, [&](int64_t r, Acc total) { y[r] = static_cast<SumOut<T>>(static_cast<acc_t<T>>(total)); });
}

template <class T>
void norm_typed(int64_t rows, int64_t cols, double p, const T* x, T* y) {
  auto store = [&](int64_t r, double v) { y[r] = narrow_to<T>(v); };
  auto abs_of = [](double v) { return std::fabs(v); };
  switch (norm_kind(p)) {
    case NormKind::max_abs: return fold_rows(rows, cols, x, 0.0, abs_of, nan_max, store);
    case NormKind::min_abs: return fold_rows(rows, cols, x, kInf, abs_of, nan_min, store);
    case NormKind::count_nonzero:
      return fold_rows(rows, cols, x, 0.0, [](double v) { return v != 0.0 ? 1.0 : 0.0; }, plus, store);
    case NormKind::l1: return fold_rows(rows, cols, x, 0.0, abs_of, plus, store);
    case NormKind::l2:
      return fold_rows(rows, cols, x, 0.0, [](double v) { return v * v; }, plus,
                       [&](int64_t r, double s) { store(r, std::sqrt(s)); });
    case NormKind::general:
      return fold_rows(rows, cols, x, 0.0, [p](double v) { return std::pow(std::fabs(v), p); }, plus,
                       [&](int64_t r, double s) { store(r, std::pow(s, 1.0 / p)); });
  }
}

}  // namespace

void sum_rows(DType dtype, int64_t rows, int64_t cols, const void* in, void* out) {
  GENESIS_DISPATCH_ALL(dtype, "sum", {
    const auto* x = static_cast<const scalar_t*>(in);
    auto* y = static_cast<SumOut<scalar_t>*>(out);
    if constexpr (kIsFloat<scalar_t>) {
      sum_each_row(rows, cols, x, [&](int64_t r, double total) { y[r] = narrow_to<scalar_t>(total); });
    } else {
      reduce_rows<int64_t>(
          rows, cols,
          [&](int64_t r, int64_t begin, int64_t end) {
            const scalar_t* row = x + r * cols;
            int64_t acc = 0;
            for (int64_t c = begin; c < end; ++c) acc += widen(row[c]);
            return acc;
          },
          [](int64_t a, int64_t b) { return a + b; }, [&](int64_t r, int64_t total) { y[r] = total; });
    }
  });
}

void sum_channels(DType dtype, int64_t outer, int64_t channels, int64_t inner, const void* in, void* out) {
  GENESIS_DISPATCH_FLOAT(dtype, "sum_channels", {
    const auto* x = static_cast<const scalar_t*>(in);
    auto* y = static_cast<scalar_t*>(out);
    parallel_for(channels, std::max<int64_t>(outer * inner, 1), [&](int64_t begin, int64_t end) {
      with_cpu_isa([&] {
        for (int64_t c = begin; c < end; ++c) {
          double total = 0.0;
          for (int64_t o = 0; o < outer; ++o)
            total += row_total(x + (o * channels + c) * inner, 0, inner);
          y[c] = narrow_to<scalar_t>(total);
        }
      });
    });
  });
}

void mean_rows(DType dtype, int64_t rows, int64_t cols, const void* in, void* out) {
  GENESIS_DISPATCH_FLOAT(dtype, "mean", {
    auto* y = static_cast<scalar_t*>(out);
    sum_each_row(rows, cols, static_cast<const scalar_t*>(in),
                 [&](int64_t r, double total) { y[r] = narrow_to<scalar_t>(total / static_cast<double>(cols)); });
  });
}

void prod_rows(DType dtype, int64_t rows, int64_t cols, const void* in, void* out) {
  GENESIS_DISPATCH_ALL(dtype, "prod", {
    prod_typed(rows, cols, static_cast<const scalar_t*>(in), static_cast<SumOut<scalar_t>*>(out));
  });
}

void prod_rows_backward(DType dtype, int64_t rows, int64_t cols, const void* in, const void* grad_out, void* grad_in) {
  GENESIS_DISPATCH_FLOAT(dtype, "prod backward", {
    const auto* x = static_cast<const scalar_t*>(in);
    const auto* g = static_cast<const scalar_t*>(grad_out);
    auto* gx = static_cast<scalar_t*>(grad_in);
    // Per row: exclusive prefix products left to right, then a running suffix product right to left.
    parallel_for(rows, 2 * std::max<int64_t>(cols, 1), [&](int64_t begin, int64_t end) {
      std::vector<double> prefix(static_cast<size_t>(cols));
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* row = x + r * cols;
        double running = 1.0;
        for (int64_t c = 0; c < cols; ++c) {
          prefix[static_cast<size_t>(c)] = running;
          running *= widen(row[c]);
        }
        double suffix = widen(g[r]);
        for (int64_t c = cols - 1; c >= 0; --c) {
          gx[r * cols + c] = narrow_to<scalar_t>(prefix[static_cast<size_t>(c)] * suffix);
          suffix *= widen(row[c]);
        }
      }
    });
  });
}

void extreme_rows(Extreme which, DType dtype, int64_t rows, int64_t cols, const void* in, void* values,
                  int64_t* indices) {
  GENESIS_DISPATCH_ALL(dtype, "max/min", {
    const auto* x = static_cast<const scalar_t*>(in);
    auto* v = static_cast<scalar_t*>(values);
    if (which == Extreme::max) extreme_typed<Extreme::max>(rows, cols, x, v, indices);
    else extreme_typed<Extreme::min>(rows, cols, x, v, indices);
  });
}

void var_rows(DType dtype, int64_t rows, int64_t cols, int64_t correction, const void* in, void* out) {
  GENESIS_DISPATCH_FLOAT(dtype, "var", {
    const auto* x = static_cast<const scalar_t*>(in);
    auto* y = static_cast<scalar_t*>(out);
    std::vector<double> means(static_cast<size_t>(rows));
    sum_each_row(rows, cols, x,
                 [&](int64_t r, double s) { means[static_cast<size_t>(r)] = s / static_cast<double>(cols); });
    const auto dof = static_cast<double>(std::max<int64_t>(cols - correction, 0));
    reduce_rows<double>(
        rows, cols,
        [&](int64_t r, int64_t begin, int64_t end) {
          const scalar_t* row = x + r * cols;
          double mean = means[static_cast<size_t>(r)], acc = 0.0;
          for (int64_t c = begin; c < end; ++c) {
            double d = widen(row[c]) - mean;
            acc += d * d;
          }
          return acc;
        },
        plus, [&](int64_t r, double s) { y[r] = narrow_to<scalar_t>(s / dof); });
  });
}

void logsumexp_rows(DType dtype, int64_t rows, int64_t cols, const void* in, void* out) {
  GENESIS_DISPATCH_FLOAT(dtype, "logsumexp", {
    const auto* x = static_cast<const scalar_t*>(in);
    auto* y = static_cast<scalar_t*>(out);
    std::vector<double> maxima(static_cast<size_t>(rows));
    auto identity = [](double v) { return v; };
    fold_rows(rows, cols, x, -kInf, identity, nan_max,
              [&](int64_t r, double m) { maxima[static_cast<size_t>(r)] = m; });
    reduce_rows<double>(
        rows, cols,
        [&](int64_t r, int64_t begin, int64_t end) {
          const scalar_t* row = x + r * cols;
          double m = maxima[static_cast<size_t>(r)], acc = 0.0;
          if (!std::isfinite(m)) return acc;
          for (int64_t c = begin; c < end; ++c) acc += std::exp(widen(row[c]) - m);
          return acc;
        },
        plus,
        [&](int64_t r, double s) {
          double m = maxima[static_cast<size_t>(r)];
          y[r] = narrow_to<scalar_t>(std::isfinite(m) ? m + std::log(s) : m);
        });
  });
}

void norm_rows(DType dtype, int64_t rows, int64_t cols, double p, const void* in, void* out) {
  GENESIS_DISPATCH_FLOAT(dtype, "norm", {
    norm_typed(rows, cols, p, static_cast<const scalar_t*>(in), static_cast<scalar_t*>(out));
  });
}

double sum_of_squares(const SquaresInput* inputs, int64_t count) {
  double total = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const SquaresInput& in = inputs[i];
    if (in.n == 0) continue;
    GENESIS_DISPATCH_FLOAT(in.dtype, "sum_of_squares", {
      fold_rows(1, in.n, static_cast<const scalar_t*>(in.data), 0.0, [](double v) { return v * v; }, plus,
                [&](int64_t, double s) { total += s; });
    });
  }
  return total;
}

}  // namespace genesis::kernels::cpu
