#include "kernels/cpu/nn.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/row_reduce.h"
#include "kernels/cpu/vec_math.h"

namespace genesis::kernels::cpu {

namespace {

// When the softmax axis is not the last, a block of kSoftmaxBlock neighbouring `inner`
// positions walks the axis together, so each step reads contiguous elements.
constexpr int64_t kSoftmaxBlock = 16;

// Row chunks whose weight/bias partial sums are reduced in a fixed order.
constexpr int64_t kNormChunks = 64;

// One contiguous row per task (softmax over the last axis), in two passes over the row after its
// max: e^(x - max) is written once with its sum taken in the same loop, then scaled in place.
// The exponentials go straight to y when it holds the accumulator type (f32, f64), else to a
// row of floats; log_softmax needs only their sum. (Copying the row first and summing in a
// pass of its own made softmax 1.25x slower on a Xeon.)
template <class T>
void softmax_last_axis(bool log, int64_t rows, int64_t dim, const T* x, T* y) {
  using A = acc_t<T>;
  constexpr bool kExpsInY = std::is_same_v<T, A>;
  parallel_for(rows, dim * 4, [&](int64_t begin, int64_t end) {
    std::vector<A> row(kExpsInY || log ? 0 : static_cast<size_t>(dim));
    with_cpu_isa([&] {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = x + r * dim;
        T* yr = y + r * dim;
        const A m = lane_max<A>(dim, [xr](int64_t d) { return static_cast<A>(xr[d]); });
        if (log) {
          const A total =
              lane_sum<A>(dim, [&](int64_t d) { return vec::exp_nonpositive_acc(static_cast<A>(xr[d]) - m); });
          const A log_total = std::log(total);
          for (int64_t d = 0; d < dim; ++d) yr[d] = static_cast<T>((static_cast<A>(xr[d]) - m) - log_total);
          continue;
        }
        A* e = nullptr;
        if constexpr (kExpsInY) {
          e = yr;
        } else {
          e = row.data();
        }
        const A total =
            lane_sum<A>(dim, [&](int64_t d) { return e[d] = vec::exp_nonpositive_acc(static_cast<A>(xr[d]) - m); });
        const A inv = A(1) / total;
        for (int64_t d = 0; d < dim; ++d) yr[d] = static_cast<T>(e[d] * inv);
      }
    });
  });
}

template <class T>
void softmax_typed(bool log, int64_t outer, int64_t dim, int64_t inner, const T* x, T* y) {
  using A = acc_t<T>;
  if (inner == 1) return softmax_last_axis(log, outer, dim, x, y);
  const int64_t blocks = (inner + kSoftmaxBlock - 1) / kSoftmaxBlock;
  parallel_for(outer * blocks, dim * kSoftmaxBlock * 4, [&](int64_t begin, int64_t end) {
    // x - max per element (then its exp for softmax), so each element costs one exp.
    std::vector<A> shifted(static_cast<size_t>(dim * kSoftmaxBlock));
    A block_max[kSoftmaxBlock], total[kSoftmaxBlock];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / blocks, i0 = (task % blocks) * kSoftmaxBlock;
      const int64_t width = std::min(kSoftmaxBlock, inner - i0);
      const T* xs = x + o * dim * inner + i0;
      T* ys = y + o * dim * inner + i0;
      A* buf = shifted.data();
      std::fill_n(block_max, width, -std::numeric_limits<A>::infinity());
      std::fill_n(total, width, A(0));
      for (int64_t d = 0; d < dim; ++d)
        for (int64_t j = 0; j < width; ++j) block_max[j] = std::max(block_max[j], static_cast<A>(xs[d * inner + j]));
      for (int64_t d = 0; d < dim; ++d) {
        for (int64_t j = 0; j < width; ++j) {
          const A v = static_cast<A>(xs[d * inner + j]) - block_max[j];
          const A e = vec::exp_nonpositive_acc(v);
          buf[d * width + j] = log ? v : e;
          total[j] += e;
        }
      }
      for (int64_t j = 0; j < width; ++j) total[j] = log ? std::log(total[j]) : A(1) / total[j];
      for (int64_t d = 0; d < dim; ++d) {
        for (int64_t j = 0; j < width; ++j) {
          const A v = buf[d * width + j];
          ys[d * inner + j] = static_cast<T>(log ? v - total[j] : v * total[j]);
        }
      }
    }
  });
}

template <class T>
void softmax_backward_last_axis(bool log, int64_t rows, int64_t dim, const T* y, const T* gy, T* gx) {
  using A = acc_t<T>;
  parallel_for(rows, dim * 3, [&](int64_t begin, int64_t end) {
    with_cpu_isa([&] {
      for (int64_t r = begin; r < end; ++r) {
        const T* yr = y + r * dim;
        const T* gr = gy + r * dim;
        T* out = gx + r * dim;
        const A dot = lane_sum<A>(dim, [&](int64_t d) {
          return log ? static_cast<A>(gr[d]) : static_cast<A>(gr[d]) * static_cast<A>(yr[d]);
        });
        for (int64_t d = 0; d < dim; ++d) {
          const A g = static_cast<A>(gr[d]), v = static_cast<A>(yr[d]);
          out[d] = static_cast<T>(log ? g - vec::exp_nonpositive_acc(v) * dot : v * (g - dot));
        }
      }
    });
  });
}

template <class T>
void softmax_backward_typed(bool log, int64_t outer, int64_t dim, int64_t inner, const T* y, const T* gy, T* gx) {
  using A = acc_t<T>;
  if (inner == 1) return softmax_backward_last_axis(log, outer, dim, y, gy, gx);
  const int64_t blocks = (inner + kSoftmaxBlock - 1) / kSoftmaxBlock;
  parallel_for(outer * blocks, dim * kSoftmaxBlock * 3, [&](int64_t begin, int64_t end) {
    A dot[kSoftmaxBlock];
    for (int64_t task = begin; task < end; ++task) {
      const int64_t o = task / blocks, i0 = (task % blocks) * kSoftmaxBlock;
      const int64_t width = std::min(kSoftmaxBlock, inner - i0);
      const int64_t base = o * dim * inner + i0;
      std::fill_n(dot, width, A(0));
      for (int64_t d = 0; d < dim; ++d) {
        for (int64_t j = 0; j < width; ++j) {
          const int64_t k = base + d * inner + j;
          dot[j] += log ? static_cast<A>(gy[k]) : static_cast<A>(gy[k]) * static_cast<A>(y[k]);
        }
      }
      for (int64_t d = 0; d < dim; ++d) {
        for (int64_t j = 0; j < width; ++j) {
          const int64_t k = base + d * inner + j;
          const A g = static_cast<A>(gy[k]), out = static_cast<A>(y[k]);
          gx[k] = static_cast<T>(log ? g - vec::exp_nonpositive_acc(out) * dot[j] : out * (g - dot[j]));
        }
      }
    }
  });
}

// x of X, weight and bias of W, y of Y (norm_dtypes_supported): every value widens to the
// accumulator type A of X on load and y rounds once.
template <class X, class W, class Y>
void norm_rows_typed(bool centered, int64_t rows, int64_t cols, const X* x, const W* w, const W* b, double eps, Y* y,
                     acc_t<X>* mean, acc_t<X>* rstd) {
  using A = acc_t<X>;
  const A n = static_cast<A>(cols);
  parallel_for(rows, cols * 4, [&](int64_t begin, int64_t end) {
    with_cpu_isa([&] {
      for (int64_t r = begin; r < end; ++r) {
        const X* xr = x + r * cols;
        Y* yr = y + r * cols;
        const A mu = centered ? lane_sum<A>(cols, [&](int64_t c) { return static_cast<A>(xr[c]); }) / n : A(0);
        const A squares = lane_sum<A>(cols, [&](int64_t c) {
          const A d = static_cast<A>(xr[c]) - mu;
          return d * d;
        });
        const A rs = A(1) / std::sqrt(squares / n + static_cast<A>(eps));
        for (int64_t c = 0; c < cols; ++c) {
          A v = (static_cast<A>(xr[c]) - mu) * rs;
          if (w) v *= static_cast<A>(w[c]);
          if (b) v += static_cast<A>(b[c]);
          yr[c] = static_cast<Y>(v);
        }
        mean[r] = mu;
        rstd[r] = rs;
      }
    });
  });
}

// grad_y of the forward's Y, grad_x of X, grad_weight / grad_bias of W.
template <class X, class W, class Y>
void norm_rows_backward_typed(bool centered, int64_t rows, int64_t cols, const X* x, const W* w, const acc_t<X>* mean,
                              const acc_t<X>* rstd, const Y* gy, X* gx, W* gw, W* gb) {
  using A = acc_t<X>;
  const A n = static_cast<A>(cols);
  const int64_t chunks = std::min(rows, kNormChunks);
  std::vector<A> partial_w(gw ? static_cast<size_t>(chunks * cols) : 0, A(0));
  std::vector<A> partial_b(gb ? static_cast<size_t>(chunks * cols) : 0, A(0));
  parallel_for(chunks, (rows / std::max<int64_t>(chunks, 1) + 1) * cols * 8, [&](int64_t begin, int64_t end) {
    with_cpu_isa([&] {
      for (int64_t k = begin; k < end; ++k) {
        A* pw = gw ? partial_w.data() + k * cols : nullptr;
        A* pb = gb ? partial_b.data() + k * cols : nullptr;
        for (int64_t r = k * rows / chunks; r < (k + 1) * rows / chunks; ++r) {
          const X* xr = x + r * cols;
          const Y* gr = gy + r * cols;
          X* out = gx + r * cols;
          const A mu = mean[r], rs = rstd[r];
          A sum_dxhat = 0, sum_dxhat_xhat = 0;
          lane_sum2<A>(cols, sum_dxhat, sum_dxhat_xhat, [&](int64_t c, A& s0, A& s1) {
            const A xhat = (static_cast<A>(xr[c]) - mu) * rs;
            const A g = static_cast<A>(gr[c]);
            const A dxhat = w ? g * static_cast<A>(w[c]) : g;
            s0 += dxhat;
            s1 += dxhat * xhat;
          });
          if (pw) {
            for (int64_t c = 0; c < cols; ++c) pw[c] += static_cast<A>(gr[c]) * ((static_cast<A>(xr[c]) - mu) * rs);
          }
          if (pb) {
            for (int64_t c = 0; c < cols; ++c) pb[c] += static_cast<A>(gr[c]);
          }
          const A mean_dxhat = centered ? sum_dxhat / n : A(0);
          const A mean_dxhat_xhat = sum_dxhat_xhat / n;
          for (int64_t c = 0; c < cols; ++c) {
            const A xhat = (static_cast<A>(xr[c]) - mu) * rs;
            const A g = static_cast<A>(gr[c]);
            const A dxhat = w ? g * static_cast<A>(w[c]) : g;
            out[c] = static_cast<X>(rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
          }
        }
      }
    });
  });
  auto reduce_partials = [&](const std::vector<A>& partial, W* dst) {
    parallel_for(cols, chunks, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        A acc = 0;
        for (int64_t k = 0; k < chunks; ++k) acc += partial[static_cast<size_t>(k * cols + c)];
        dst[c] = static_cast<W>(acc);
      }
    });
  };
  if (gw) reduce_partials(partial_w, gw);
  if (gb) reduce_partials(partial_b, gb);
}

template <class I>
IndexStats index_stats_typed(int64_t n, const I* index, std::optional<int64_t> skip) {
  IndexStats s{std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(), 0};
  for (int64_t i = 0; i < n; ++i) {
    const auto v = static_cast<int64_t>(index[i]);
    if (skip && v == *skip) continue;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
    ++s.count;
  }
  if (s.count == 0) s.min = s.max = 0;
  return s;
}

// Scatter-add without atomics: a stable counting sort groups the positions by the row
// they picked, then each weight row sums its own group.
template <class T, class I>
void embedding_backward_typed(int64_t n, const I* index, int64_t num, int64_t dim, const T* grad_out,
                              int64_t padding_idx, T* grad_weight) {
  using A = acc_t<T>;
  std::vector<int64_t> start(static_cast<size_t>(num + 1), 0);
  for (int64_t i = 0; i < n; ++i) ++start[static_cast<size_t>(index[i]) + 1];
  for (int64_t v = 0; v < num; ++v) start[static_cast<size_t>(v + 1)] += start[static_cast<size_t>(v)];
  std::vector<int64_t> next(start.begin(), start.end() - 1);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(next[static_cast<size_t>(index[i])]++)] = i;
  parallel_for(num, (n / std::max<int64_t>(num, 1) + 1) * dim, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(static_cast<size_t>(dim));
    for (int64_t v = begin; v < end; ++v) {
      std::fill(acc.begin(), acc.end(), A(0));
      if (v != padding_idx) {
        for (int64_t k = start[static_cast<size_t>(v)]; k < start[static_cast<size_t>(v + 1)]; ++k) {
          const T* g = grad_out + order[static_cast<size_t>(k)] * dim;
          for (int64_t c = 0; c < dim; ++c) acc[static_cast<size_t>(c)] += static_cast<A>(g[c]);
        }
      }
      T* dst = grad_weight + v * dim;
      for (int64_t c = 0; c < dim; ++c) dst[c] = static_cast<T>(acc[static_cast<size_t>(c)]);
    }
  });
}

}  // namespace

void softmax(DType dtype, bool log, int64_t outer, int64_t dim, int64_t inner, const void* x, void* y) {
  GENESIS_DISPATCH_FLOAT(dtype, "softmax", {
    softmax_typed<scalar_t>(log, outer, dim, inner, static_cast<const scalar_t*>(x), static_cast<scalar_t*>(y));
  });
}

void softmax_backward(DType dtype, bool log, int64_t outer, int64_t dim, int64_t inner, const void* y,
                      const void* grad_y, void* grad_x) {
  GENESIS_DISPATCH_FLOAT(dtype, "softmax backward", {
    softmax_backward_typed<scalar_t>(log, outer, dim, inner, static_cast<const scalar_t*>(y),
                                     static_cast<const scalar_t*>(grad_y), static_cast<scalar_t*>(grad_x));
  });
}

void norm_rows(NormDTypes dtypes, bool centered, int64_t rows, int64_t cols, const void* x, const void* weight,
               const void* bias, double eps, void* y, void* mean, void* rstd) {
  with_norm_types<float16, bfloat16>(dtypes, "norm", [&]<class X, class W, class Y>() {
    norm_rows_typed<X, W, Y>(centered, rows, cols, static_cast<const X*>(x), static_cast<const W*>(weight),
                             static_cast<const W*>(bias), eps, static_cast<Y*>(y), static_cast<acc_t<X>*>(mean),
                             static_cast<acc_t<X>*>(rstd));
  });
}

void norm_rows_backward(NormDTypes dtypes, bool centered, int64_t rows, int64_t cols, const void* x, const void* weight,
                        const void* mean, const void* rstd, const void* grad_y, void* grad_x, void* grad_weight,
                        void* grad_bias) {
  with_norm_types<float16, bfloat16>(dtypes, "norm backward", [&]<class X, class W, class Y>() {
    norm_rows_backward_typed<X, W, Y>(centered, rows, cols, static_cast<const X*>(x), static_cast<const W*>(weight),
                                      static_cast<const acc_t<X>*>(mean), static_cast<const acc_t<X>*>(rstd),
                                      static_cast<const Y*>(grad_y), static_cast<X*>(grad_x),
                                      static_cast<W*>(grad_weight), static_cast<W*>(grad_bias));
  });
}

IndexStats index_stats(DType index_dtype, int64_t n, const void* index, std::optional<int64_t> skip) {
  IndexStats s;
  GENESIS_DISPATCH_INDEX(index_dtype, "index_stats",
                         { s = index_stats_typed(n, static_cast<const scalar_t*>(index), skip); });
  return s;
}

void embedding(DType dtype, DType index_dtype, int64_t n, const void* index, int64_t dim, const void* weight,
               void* out) {
  GENESIS_DISPATCH_FLOAT(dtype, "embedding", {
    using T = scalar_t;
    GENESIS_DISPATCH_INDEX(index_dtype, "embedding", {
      const scalar_t* idx = static_cast<const scalar_t*>(index);
      const T* w = static_cast<const T*>(weight);
      T* o = static_cast<T*>(out);
      parallel_for(n, dim, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) std::copy_n(w + static_cast<int64_t>(idx[i]) * dim, dim, o + i * dim);
      });
    });
  });
}

void embedding_backward(DType dtype, DType index_dtype, int64_t n, const void* index, int64_t num, int64_t dim,
                        const void* grad_out, int64_t padding_idx, void* grad_weight) {
  GENESIS_DISPATCH_FLOAT(dtype, "embedding backward", {
    using T = scalar_t;
    GENESIS_DISPATCH_INDEX(index_dtype, "embedding backward", {
      embedding_backward_typed<T>(n, static_cast<const scalar_t*>(index), num, dim, static_cast<const T*>(grad_out),
                                  padding_idx, static_cast<T*>(grad_weight));
    });
  });
}

void one_hot(DType index_dtype, int64_t n, const void* index, int64_t num_classes, int64_t* out) {
  GENESIS_DISPATCH_INDEX(index_dtype, "one_hot", {
    const scalar_t* idx = static_cast<const scalar_t*>(index);
    parallel_for(n, num_classes, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        int64_t* row = out + i * num_classes;
        std::fill_n(row, num_classes, int64_t{0});
        row[static_cast<int64_t>(idx[i])] = 1;
      }
    });
  });
}

}  // namespace genesis::kernels::cpu
