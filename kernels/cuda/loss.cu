// CUDA class-index losses. The cross-entropy forward reduces each row in one pass with an
// online logsumexp (running max and sum of exps rescaled when the max grows): one warp per
// row for up to kWarpRowLimit classes, one block per row beyond. Contiguous rows ([N, C]) are
// read in 16-byte packs, several in flight per thread; [N, C, d...] rows are read with the
// stride d. The backward passes write each gradient row once (contiguous rows in 16-byte
// packs; ignored rows are zero-filled without reading the logits), or elementwise for
// [N, C, d...]. No atomics: every result is computed in a fixed order. A target outside
// [0, classes) is reported by the forward kernels and its row handled as an ignored one.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/loss.h"
#include "kernels/cuda/packs.cuh"

namespace genesis::kernels::cuda {

namespace {

constexpr int64_t kWarpRowLimit = 1024;
constexpr int kRowBlock = 256;
// 16-byte packs each thread loads before using any of them.
constexpr int kUnroll = 4;

// Bound of the running max: exp_sub(v, max) then never sees inf - inf, so rows holding +inf
// or -inf give an infinite logsumexp instead of NaN, while NaN logits still make it NaN. The
// float bound keeps (v - max) * log2(e) finite for any finite v within the bound.
template <class A>
inline constexpr A kMaxBound = std::is_same_v<A, double> ? A(1e300) : A(1e38);

// exp(v - max): for float, 2^((v - max) log2(e)) with the hardware exp2 (relative error about
// 2^-22; results below 2^-126 flush to 0, far under the accumulated sum). The difference is
// taken first so that v == max gives exactly 1 at any magnitude. f64 uses exp.
__device__ __forceinline__ float exp_sub(float v, float max) {
  constexpr float kLog2e = 1.4426950408889634f;
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"((v - max) * kLog2e));
  return y;
}
__device__ __forceinline__ double exp_sub(double v, double max) {
  return exp(v - max);
}

template <class A>
struct RowStats {
  ExpSum<A> exps;  // max within [-kMaxBound, kMaxBound]
  A sum;           // of the logits, for label smoothing
};

template <class A>
__device__ __forceinline__ RowStats<A> empty_stats() {
  return {{-kMaxBound<A>, A(0)}, A(0)};
}

// Adds N values with one rescale of the running sum. A NaN value makes the sum NaN.
template <int N, class A>
__device__ __forceinline__ void stats_add(RowStats<A>& s, const A (&v)[N]) {
  A chunk_max = v[0];
#pragma unroll
  for (int j = 1; j < N; ++j) chunk_max = fmax(chunk_max, v[j]);
  const A max = fmin(fmax(s.exps.max, chunk_max), kMaxBound<A>);
  A sum_exp = s.exps.sum * exp_sub(s.exps.max, max);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    sum_exp += exp_sub(v[j], max);
    s.sum += v[j];
  }
  s.exps = {max, sum_exp};
}

template <class A>
__device__ __forceinline__ void stats_add_one(RowStats<A>& s, A v) {
  const A one[1] = {v};
  stats_add(s, one);
}

// Merges two running triples; an empty one (max -kMaxBound, sum 0) changes nothing.
struct MergeStats {
  template <class A>
  __device__ __forceinline__ RowStats<A> operator()(const RowStats<A>& a, const RowStats<A>& b) const {
    const auto rescale = [](A sum, A from, A to) { return sum * exp_sub(from, to); };
    return {merge_at(a.exps, b.exps, fmax(a.exps.max, b.exps.max), rescale), a.sum + b.sum};
  }
};

// Row statistics of a group of kGroup threads (a warp, or the whole block), valid in the
// group's first thread.
template <int kGroup, class A>
__device__ __forceinline__ RowStats<A> group_merge(RowStats<A> s) {
  if constexpr (kGroup == kWarp) {
    return warp_reduce(s, MergeStats{});
  } else {
    __shared__ RowStats<A> warp_stats[kGroup / kWarp];
    s = group_reduce_first(s, kGroup, empty_stats<A>(), warp_stats, MergeStats{});
    __syncthreads();  // warp_stats is rewritten for the next row
    return s;
  }
}

// Whether a row with target t takes part in the loss: not ignored and a valid class.
__device__ __forceinline__ bool counted(int64_t t, int64_t ignore_index, int64_t classes) {
  return t != ignore_index && t >= 0 && t < classes;
}

// Reports target t of a row the loss does not count unless it is simply ignored.
__device__ __forceinline__ void report_bad_target(int64_t t, int64_t ignore_index, int64_t classes,
                                                  ::genesis::cuda::KernelFault* fault, int fault_op) {
  if (t != ignore_index) report_index_fault(fault, fault_op, t, classes);
}

// The gradient's scale: 1 / count for a mean (the division in f64 and then rounded, like the
// CPU's scale), 1 for the other reductions (valid_count null).
template <class A>
__device__ __forceinline__ A mean_scale(const int64_t* valid_count) {
  return valid_count ? static_cast<A>(1.0 / static_cast<double>(*valid_count)) : A(1);
}

__device__ __forceinline__ int64_t row_base(const ClassRows& s, int64_t r) {
  return (r / s.inner) * s.classes * s.inner + r % s.inner;
}

// Elements of a contiguous row before its first 16-byte boundary (the rest is whole packs and
// a tail shorter than a pack).
template <class T>
__device__ __forceinline__ int64_t unaligned_head(const T* row, int64_t classes) {
  const auto misaligned = static_cast<int64_t>((reinterpret_cast<uintptr_t>(row) / sizeof(T)) % kPack<T>);
  const int64_t to_boundary = misaligned == 0 ? 0 : kPack<T> - misaligned;
  return to_boundary < classes ? to_boundary : classes;
}

// The walk of a row's kGroup threads over its `classes` contiguous elements of T, cut at 16-byte
// boundaries (`head` elements before the first, unaligned_head): element(c) for the head and for
// the tail after the last whole pack (both shorter than a pack, so at most one element per thread
// each), and packs(i, unroll) for the body of 16-byte packs from element `head`: thread j takes
// packs j, j + kGroup, ..., unroll (kUnroll, or 1 at the end) of them at a time.
template <int kGroup, class T, class Element, class Packs>
__device__ __forceinline__ void walk_row(int64_t head, int64_t classes, int lane, Element element, Packs packs) {
  if (lane < head) element(lane);
  const int64_t count = (classes - head) / kPack<T>;
  int64_t i = lane;
  for (; i + (kUnroll - 1) * kGroup < count; i += kUnroll * kGroup) packs(i, std::integral_constant<int, kUnroll>{});
  for (; i < count; i += kGroup) packs(i, std::integral_constant<int, 1>{});
  const int64_t tail = head + count * kPack<T> + lane;
  if (tail < classes) element(tail);
}

// Statistics of a contiguous row, its packs loaded kUnroll at a time before any is used.
template <int kGroup, class T, class A>
__device__ __forceinline__ RowStats<A> contiguous_row_stats(const T* __restrict__ xr, int64_t classes, int lane) {
  constexpr int V = kPack<T>;
  RowStats<A> st = empty_stats<A>();
  const int64_t head = unaligned_head(xr, classes);
  const auto* body = reinterpret_cast<const Pack16<T>*>(xr + head);
  walk_row<kGroup, T>(
      head, classes, lane, [&](int64_t c) { stats_add_one(st, to_acc<A>(xr[c])); },
      [&](int64_t i, auto unroll) {
        constexpr int U = decltype(unroll)::value;
        Pack16<T> p[U];
#pragma unroll
        for (int u = 0; u < U; ++u) p[u] = body[i + u * kGroup];
        A v[U * V];
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
          for (int j = 0; j < V; ++j) v[u * V + j] = to_acc<A>(p[u].v[j]);
        }
        stats_add(st, v);
      });
  return st;
}

// kGroup threads per row. Contiguous rows (inner == 1) go through contiguous_row_stats;
// otherwise thread j of a group reads classes j, j + kGroup, ... with stride inner. Every
// thread of a group takes the same branches.
template <int kGroup, bool kContiguous, class T, class I, class A>
__global__ void __launch_bounds__(kRowBlock)
    cross_entropy_kernel(ClassRows s, const T* __restrict__ x, const I* __restrict__ target, int64_t ignore_index,
                         A smoothing, A* __restrict__ loss, A* __restrict__ lse_out,
                         ::genesis::cuda::KernelFault* fault, int fault_op) {
  using std::log;
  const int64_t rows = s.outer * s.inner;
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  GENESIS_FOR_EACH_GROUP_ROW(r, rows, kGroup, blockDim.x) {
    const auto t = static_cast<int64_t>(target[r]);
    if (!counted(t, ignore_index, s.classes)) {
      if (lane == 0) {
        report_bad_target(t, ignore_index, s.classes, fault, fault_op);
        loss[r] = A(0);
        lse_out[r] = A(0);
      }
      continue;
    }
    const T* xr = x + row_base(s, r);
    // Issued before the row's loads so its latency overlaps them.
    const A target_logit = lane == 0 ? to_acc<A>(xr[t * s.inner]) : A(0);
    RowStats<A> st;
    if constexpr (kContiguous) {
      st = contiguous_row_stats<kGroup, T, A>(xr, s.classes, lane);
    } else {
      st = empty_stats<A>();
      for (int64_t c = lane; c < s.classes; c += kGroup) stats_add_one(st, to_acc<A>(xr[c * s.inner]));
    }
    st = group_merge<kGroup>(st);
    if (lane == 0) {
      const A lse = st.exps.max + log(st.exps.sum);
      const A nll = lse - target_logit;
      loss[r] =
          smoothing == A(0) ? nll : (A(1) - smoothing) * nll + smoothing * (lse - st.sum / static_cast<A>(s.classes));
      lse_out[r] = lse;
    }
  }
}

// out[c] = f(c, x[c]) over one contiguous row (x[c] read only when kReadX; f gets 0 otherwise).
// x and out have the same 16-byte alignment: the body goes in 16-byte packs, kUnroll loads in
// flight per thread before the stores.
template <int kGroup, bool kReadX, class T, class F>
__device__ __forceinline__ void map_row(const T* __restrict__ xr, T* __restrict__ out, int64_t classes, int lane, F f) {
  constexpr int V = kPack<T>;
  using A = float_acc_t<T>;
  const int64_t head = unaligned_head(out, classes);
  [[maybe_unused]] const auto* in_body = kReadX ? reinterpret_cast<const Pack16<T>*>(xr + head) : nullptr;
  auto* out_body = reinterpret_cast<Pack16<T>*>(out + head);
  walk_row<kGroup, T>(
      head, classes, lane, [&](int64_t c) { out[c] = from_acc<T>(f(c, kReadX ? to_acc<A>(xr[c]) : A(0))); },
      [&](int64_t i, auto unroll) {
        constexpr int U = decltype(unroll)::value;
        Pack16<T> p[U] = {};
        if constexpr (kReadX) {
#pragma unroll
          for (int u = 0; u < U; ++u) p[u] = in_body[i + u * kGroup];
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          Pack16<T> o;
          const int64_t first = head + (i + u * kGroup) * V;
#pragma unroll
          for (int j = 0; j < V; ++j) o.v[j] = from_acc<T>(f(first + j, kReadX ? to_acc<A>(p[u].v[j]) : A(0)));
          out_body[i + u * kGroup] = o;
        }
      });
}

// kGroup threads per contiguous row of the gradient; ignored rows are written as zeros.
template <int kGroup, class T, class I, class A>
__global__ void __launch_bounds__(kRowBlock)
    cross_entropy_backward_rows_kernel(int64_t rows, int64_t classes, const T* __restrict__ x,
                                       const I* __restrict__ target, const A* __restrict__ lse, int64_t ignore_index,
                                       A smoothing, const T* __restrict__ grad_loss, int64_t grad_stride,
                                       const int64_t* __restrict__ valid_count, T* __restrict__ gx) {
  const A uniform = smoothing / static_cast<A>(classes);
  const A scale = mean_scale<A>(valid_count);
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  GENESIS_FOR_EACH_GROUP_ROW(r, rows, kGroup, blockDim.x) {
    const auto t = static_cast<int64_t>(target[r]);
    const T* xr = x + r * classes;
    T* gr = gx + r * classes;
    if (!counted(t, ignore_index, classes)) {
      map_row<kGroup, false>(xr, gr, classes, lane, [](int64_t, A) { return A(0); });
      continue;
    }
    const A g = to_acc<A>(grad_loss[r * grad_stride]) * scale;
    const A row_lse = lse[r];
    const A hit = A(1) - smoothing;
    map_row<kGroup, true>(xr, gr, classes, lane, [=](int64_t c, A v) {
      A d = exp_sub(v, row_lse) - uniform;
      if (c == t) d -= hit;
      return d * g;
    });
  }
}

// Element k of the [outer, classes, inner] gradient: its row and class.
struct RowClass {
  int64_t row;
  int64_t cls;
};
__device__ __forceinline__ RowClass row_class_of(const ClassRows& s, int64_t k) {
  const int64_t per_outer = s.classes * s.inner;
  const int64_t within = k % per_outer;
  return {(k / per_outer) * s.inner + within % s.inner, within / s.inner};
}

// One thread per gradient element (grid-stride, coalesced over the logits and their gradient).
template <class T, class I, class A>
__global__ void cross_entropy_backward_kernel(ClassRows s, const T* x, const I* target, const A* lse,
                                              int64_t ignore_index, A smoothing, const T* grad_loss,
                                              int64_t grad_stride, const int64_t* valid_count, T* gx) {
  const int64_t n = s.outer * s.classes * s.inner;
  const A uniform = smoothing / static_cast<A>(s.classes);
  const A scale = mean_scale<A>(valid_count);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride) {
    const RowClass rc = row_class_of(s, k);
    const auto t = static_cast<int64_t>(target[rc.row]);
    if (!counted(t, ignore_index, s.classes)) {
      gx[k] = from_acc<T>(A(0));
      continue;
    }
    const A g = to_acc<A>(grad_loss[rc.row * grad_stride]) * scale;
    A d = exp_sub(to_acc<A>(x[k]), lse[rc.row]) - uniform;
    if (rc.cls == t) d -= A(1) - smoothing;
    gx[k] = from_acc<T>(d * g);
  }
}

// One thread per row.
template <class T, class I, class A>
__global__ void nll_loss_kernel(ClassRows s, const T* lp, const I* target, int64_t ignore_index, A* loss,
                                ::genesis::cuda::KernelFault* fault, int fault_op) {
  const int64_t rows = s.outer * s.inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    const auto t = static_cast<int64_t>(target[r]);
    if (counted(t, ignore_index, s.classes)) {
      loss[r] = -to_acc<A>(lp[row_base(s, r) + t * s.inner]);
    } else {
      report_bad_target(t, ignore_index, s.classes, fault, fault_op);
      loss[r] = A(0);
    }
  }
}

// kGroup threads per contiguous gradient row: zeros except -grad at the target.
template <int kGroup, class T, class I, class A>
__global__ void __launch_bounds__(kRowBlock)
    nll_loss_backward_rows_kernel(int64_t rows, int64_t classes, const I* __restrict__ target, int64_t ignore_index,
                                  const T* __restrict__ grad_loss, int64_t grad_stride,
                                  const int64_t* __restrict__ valid_count, T* __restrict__ gx) {
  const A scale = mean_scale<A>(valid_count);
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  GENESIS_FOR_EACH_GROUP_ROW(r, rows, kGroup, blockDim.x) {
    const auto t = static_cast<int64_t>(target[r]);
    const A g = counted(t, ignore_index, classes) ? -to_acc<A>(grad_loss[r * grad_stride]) * scale : A(0);
    map_row<kGroup, false>(static_cast<const T*>(nullptr), gx + r * classes, classes, lane,
                           [=](int64_t c, A) { return c == t ? g : A(0); });
  }
}

// One thread per gradient element.
template <class T, class I, class A>
__global__ void nll_loss_backward_kernel(ClassRows s, const I* target, int64_t ignore_index, const T* grad_loss,
                                         int64_t grad_stride, const int64_t* valid_count, T* gx) {
  const int64_t n = s.outer * s.classes * s.inner;
  const A scale = mean_scale<A>(valid_count);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride) {
    const RowClass rc = row_class_of(s, k);
    const auto t = static_cast<int64_t>(target[rc.row]);
    const bool hit = counted(t, ignore_index, s.classes) && rc.cls == t;
    gx[k] = from_acc<T>(hit ? -to_acc<A>(grad_loss[rc.row * grad_stride]) * scale : A(0));
  }
}

constexpr int kCountBlock = 1024;

// One block: thread j counts targets j, j + kCountBlock, ... (coalesced reads), then the warps
// and the block sum their counts through shuffles and shared memory.
template <class I>
__global__ void __launch_bounds__(kCountBlock)
    count_valid_targets_kernel(int64_t n, const I* __restrict__ target, int64_t classes, int64_t ignore_index,
                               int64_t* __restrict__ count) {
  __shared__ int64_t counts[kCountBlock / kWarp];
  int64_t mine = 0;
  for (int64_t i = threadIdx.x; i < n; i += kCountBlock)
    mine += counted(static_cast<int64_t>(target[i]), ignore_index, classes) ? 1 : 0;
  mine = group_reduce_first(mine, kCountBlock, int64_t{0}, counts, Sum{});
  if (threadIdx.x == 0) *count = mine;
}

// Blocks for kGroup threads per row: one block per row (or per kRowBlock / 32 rows) so the
// hardware balances rows across multiprocessors; the kernels loop when rows exceed the grid.
template <int kGroup>
unsigned row_grid(int64_t rows) {
  constexpr int64_t rows_per_block = kRowBlock / kGroup;
  return static_cast<unsigned>(std::min<int64_t>((rows + rows_per_block - 1) / rows_per_block, int64_t{1} << 30));
}

// Calls launch(group, grid) for `rows` rows of `classes` classes: a warp per row up to
// kWarpRowLimit classes (group: std::integral_constant<int, kWarp>), a block per row beyond.
template <class Launch>
void with_row_group(int64_t rows, int64_t classes, Launch&& launch) {
  if (classes <= kWarpRowLimit) {
    launch(std::integral_constant<int, kWarp>{}, row_grid<kWarp>(rows));
  } else {
    launch(std::integral_constant<int, kRowBlock>{}, row_grid<kRowBlock>(rows));
  }
}

// Calls f.template operator()<T, I, A>() for the logits' (or log-probabilities') type T, the
// targets' index type I and the accumulator type A.
template <class F>
void with_loss_types(DType dtype, DType target_dtype, const char* what, F&& f) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, what, {
    using T = scalar_t;
    GENESIS_DISPATCH_INDEX(target_dtype, what, { f.template operator()<T, scalar_t, float_acc_t<T>>(); });
  });
}

// Whether two buffers of T have the same offset from a 16-byte boundary (so that a row of one
// and the same row of the other split into the same head, packs and tail).
bool same_alignment(const void* a, const void* b) {
  return reinterpret_cast<uintptr_t>(a) % 16 == reinterpret_cast<uintptr_t>(b) % 16;
}

// The fused head's row pass (one block per row of padded logits, rows 16-byte aligned): the
// row's cross-entropy into loss[r] and, with write_grad, the row overwritten in place by its
// gradient softmax - (1 - s) onehot(t) - s / C, zero in the padding columns. Every thread
// reads the row's statistics and the target logit before the barrier that precedes the writes.
template <class T, class I>
__global__ void __launch_bounds__(kRowBlock)
    cross_entropy_with_grad_kernel(int64_t classes, int64_t ld, T* __restrict__ x, const I* __restrict__ target,
                                   int64_t ignore_index, float smoothing, bool write_grad, float* __restrict__ loss,
                                   ::genesis::cuda::KernelFault* fault, int fault_op) {
  constexpr int V = kPack<T>;
  const int64_t r = blockIdx.x;
  const int lane = static_cast<int>(threadIdx.x);
  T* xr = x + r * ld;
  auto* body = reinterpret_cast<Pack16<T>*>(xr);
  const int64_t packs = ld / V;
  const auto t = static_cast<int64_t>(target[r]);
  if (!counted(t, ignore_index, classes)) {
    if (lane == 0) {
      report_bad_target(t, ignore_index, classes, fault, fault_op);
      loss[r] = 0.0f;
    }
    if (write_grad)
      for (int64_t i = lane; i < packs; i += kRowBlock) body[i] = Pack16<T>{};
    return;
  }
  __shared__ float row_lse;
  const float target_logit = lane == 0 ? to_acc<float>(xr[t]) : 0.0f;
  RowStats<float> st = group_merge<kRowBlock>(contiguous_row_stats<kRowBlock, T, float>(xr, classes, lane));
  if (lane == 0) {
    const float lse = st.exps.max + logf(st.exps.sum);
    const float nll = lse - target_logit;
    loss[r] =
        smoothing == 0.0f ? nll : (1.0f - smoothing) * nll + smoothing * (lse - st.sum / static_cast<float>(classes));
    row_lse = lse;
  }
  __syncthreads();
  if (!write_grad) return;
  const float lse = row_lse, uniform = smoothing / static_cast<float>(classes), hit = 1.0f - smoothing;
#pragma unroll 4
  for (int64_t i = lane; i < packs; i += kRowBlock) {
    const Pack16<T> p = body[i];
    Pack16<T> o;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int64_t c = i * V + j;
      float d = 0.0f;
      if (c < classes) d = exp_sub(to_acc<float>(p.v[j]), lse) - uniform - (c == t ? hit : 0.0f);
      o.v[j] = from_acc<T>(d);
    }
    body[i] = o;
  }
}

}  // namespace

void cross_entropy(DType dtype, DType target_dtype, ClassRows shape, const void* logits, const void* target,
                   int64_t ignore_index, double label_smoothing, void* loss, void* lse,
                   ::genesis::cuda::KernelFault* fault, int fault_op, cudaStream_t stream) {
  const int64_t rows = shape.outer * shape.inner;
  if (rows <= 0) return;
  with_loss_types(dtype, target_dtype, "cross_entropy", [&]<class T, class I, class A>() {
    const auto* x = static_cast<const T*>(logits);
    const auto* t = static_cast<const I*>(target);
    auto* out = static_cast<A*>(loss);
    auto* lse_out = static_cast<A*>(lse);
    const auto eps = static_cast<A>(label_smoothing);
    with_row_group(rows, shape.classes, [&](auto group, unsigned grid) {
      constexpr int kGroup = decltype(group)::value;
      const auto kernel =
          shape.inner == 1 ? cross_entropy_kernel<kGroup, true, T, I, A> : cross_entropy_kernel<kGroup, false, T, I, A>;
      kernel<<<grid, kRowBlock, 0, stream>>>(shape, x, t, ignore_index, eps, out, lse_out, fault, fault_op);
    });
    GENESIS_CUDA_LAUNCH_CHECK();
  });
}

void cross_entropy_with_grad(DType dtype, DType target_dtype, int64_t rows, int64_t classes, int64_t ld, void* logits,
                             const void* target, int64_t ignore_index, double label_smoothing, bool write_grad,
                             float* loss, ::genesis::cuda::KernelFault* fault, int fault_op, cudaStream_t stream) {
  if (rows <= 0) return;
  auto launch = [&]<class T>(T* typed_logits) {
    GENESIS_DISPATCH_INDEX(target_dtype, "cross_entropy_with_grad", {
      using I = scalar_t;
      cross_entropy_with_grad_kernel<T, I><<<static_cast<unsigned>(rows), kRowBlock, 0, stream>>>(
          classes, ld, typed_logits, static_cast<const I*>(target), ignore_index, static_cast<float>(label_smoothing),
          write_grad, loss, fault, fault_op);
      GENESIS_CUDA_LAUNCH_CHECK();
    });
  };
  switch (dtype) {  // the fused head's dtypes (f64 takes the composed path)
    case DType::f32:
      return launch(static_cast<float*>(logits));
    case DType::f16:
      return launch(static_cast<__half*>(logits));
    case DType::bf16:
      return launch(static_cast<__nv_bfloat16*>(logits));
    default:
      throw_unsupported_dtype("cross_entropy_with_grad", dtype);
  }
}

void cross_entropy_backward(DType dtype, DType target_dtype, ClassRows shape, const void* logits, const void* target,
                            const void* lse, int64_t ignore_index, double label_smoothing, const void* grad_loss,
                            int64_t grad_stride, const int64_t* valid_count, void* grad_logits, cudaStream_t stream) {
  const int64_t n = shape.outer * shape.classes * shape.inner;
  if (n <= 0) return;
  with_loss_types(dtype, target_dtype, "cross_entropy backward", [&]<class T, class I, class A>() {
    const auto* x = static_cast<const T*>(logits);
    const auto* t = static_cast<const I*>(target);
    const auto* row_lse = static_cast<const A*>(lse);
    const auto* g = static_cast<const T*>(grad_loss);
    auto* gx = static_cast<T*>(grad_logits);
    const auto eps = static_cast<A>(label_smoothing);
    if (shape.inner == 1 && same_alignment(logits, grad_logits)) {
      with_row_group(shape.outer, shape.classes, [&](auto group, unsigned grid) {
        cross_entropy_backward_rows_kernel<decltype(group)::value, T, I, A><<<grid, kRowBlock, 0, stream>>>(
            shape.outer, shape.classes, x, t, row_lse, ignore_index, eps, g, grad_stride, valid_count, gx);
      });
    } else {
      cross_entropy_backward_kernel<T, I, A><<<grid_size(n), kBlockSize, 0, stream>>>(
          shape, x, t, row_lse, ignore_index, eps, g, grad_stride, valid_count, gx);
    }
    GENESIS_CUDA_LAUNCH_CHECK();
  });
}

void count_valid_targets(DType target_dtype, int64_t n, const void* target, int64_t classes, int64_t ignore_index,
                         int64_t* count, cudaStream_t stream) {
  GENESIS_DISPATCH_INDEX(target_dtype, "class-index loss target count", {
    count_valid_targets_kernel<scalar_t>
        <<<1, kCountBlock, 0, stream>>>(n, static_cast<const scalar_t*>(target), classes, ignore_index, count);
    GENESIS_CUDA_LAUNCH_CHECK();
  });
}

void nll_loss(DType dtype, DType target_dtype, ClassRows shape, const void* log_probs, const void* target,
              int64_t ignore_index, void* loss, ::genesis::cuda::KernelFault* fault, int fault_op,
              cudaStream_t stream) {
  const int64_t rows = shape.outer * shape.inner;
  if (rows <= 0) return;
  with_loss_types(dtype, target_dtype, "nll_loss", [&]<class T, class I, class A>() {
    nll_loss_kernel<T, I, A><<<grid_size(rows), kBlockSize, 0, stream>>>(
        shape, static_cast<const T*>(log_probs), static_cast<const I*>(target), ignore_index, static_cast<A*>(loss),
        fault, fault_op);
    GENESIS_CUDA_LAUNCH_CHECK();
  });
}

void nll_loss_backward(DType dtype, DType target_dtype, ClassRows shape, const void* target, int64_t ignore_index,
                       const void* grad_loss, int64_t grad_stride, const int64_t* valid_count, void* grad_log_probs,
                       cudaStream_t stream) {
  const int64_t n = shape.outer * shape.classes * shape.inner;
  if (n <= 0) return;
  with_loss_types(dtype, target_dtype, "nll_loss backward", [&]<class T, class I, class A>() {
    const auto* t = static_cast<const I*>(target);
    const auto* g = static_cast<const T*>(grad_loss);
    auto* gx = static_cast<T*>(grad_log_probs);
    if (shape.inner == 1) {
      with_row_group(shape.outer, shape.classes, [&](auto group, unsigned grid) {
        nll_loss_backward_rows_kernel<decltype(group)::value, T, I, A><<<grid, kRowBlock, 0, stream>>>(
            shape.outer, shape.classes, t, ignore_index, g, grad_stride, valid_count, gx);
      });
    } else {
      nll_loss_backward_kernel<T, I, A>
          <<<grid_size(n), kBlockSize, 0, stream>>>(shape, t, ignore_index, g, grad_stride, valid_count, gx);
    }
    GENESIS_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace genesis::kernels::cuda
