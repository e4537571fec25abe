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

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/loss.h"
#include "kernels/cuda/packs.cuh"

namespace genesis::kernels::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int64_t kWarpRowLimit = 1024;
constexpr int kRowBlock = 256;
// 16-byte packs each thread loads before using any of them.
constexpr int kUnroll = 4;

// A 16-byte pack of T (packs.cuh).
template <class T>
using Pack16 = Pack<T, kPack<T>>;

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
  A max;      // within [-kMaxBound, kMaxBound]
  A sum_exp;  // of exp(x - max)
  A sum;      // of the logits, for label smoothing
};

template <class A>
__device__ __forceinline__ RowStats<A> empty_stats() {
  return {-kMaxBound<A>, A(0), A(0)};
}

// Adds N values with one rescale of the running sum. A NaN value makes the sum NaN.
template <int N, class A>
__device__ __forceinline__ void stats_add(RowStats<A>& s, const A (&v)[N]) {
  A chunk_max = v[0];
#pragma unroll
  for (int j = 1; j < N; ++j) chunk_max = fmax(chunk_max, v[j]);
  const A max = fmin(fmax(s.max, chunk_max), kMaxBound<A>);
  A sum_exp = s.sum_exp * exp_sub(s.max, max);
#pragma unroll
  for (int j = 0; j < N; ++j) {
    sum_exp += exp_sub(v[j], max);
    s.sum += v[j];
  }
  s.max = max;
  s.sum_exp = sum_exp;
}

template <class A>
__device__ __forceinline__ void stats_add_one(RowStats<A>& s, A v) {
  const A one[1] = {v};
  stats_add(s, one);
}

// Merges another running triple; an empty one (max -kMaxBound, sum 0) changes nothing.
template <class A>
__device__ __forceinline__ void stats_merge(RowStats<A>& s, A other_max, A other_sum_exp, A other_sum) {
  const A max = fmax(s.max, other_max);
  s.sum_exp = s.sum_exp * exp_sub(s.max, max) + other_sum_exp * exp_sub(other_max, max);
  s.max = max;
  s.sum += other_sum;
}

template <class A>
__device__ __forceinline__ RowStats<A> warp_merge(RowStats<A> s) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    const A other_max = __shfl_down_sync(0xffffffffu, s.max, offset);
    const A other_sum_exp = __shfl_down_sync(0xffffffffu, s.sum_exp, offset);
    const A other_sum = __shfl_down_sync(0xffffffffu, s.sum, offset);
    stats_merge(s, other_max, other_sum_exp, other_sum);
  }
  return s;
}

// Row statistics of a group of kGroup threads, valid in the group's first thread. A block-wide
// group (kGroup > 32) merges its warps' results through shared memory in warp order.
template <int kGroup, class A>
__device__ __forceinline__ RowStats<A> group_merge(RowStats<A> s) {
  s = warp_merge(s);
  if constexpr (kGroup > kWarp) {
    constexpr int kWarps = kGroup / kWarp;
    __shared__ A maxes[kWarps], sum_exps[kWarps], sums[kWarps];
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    const int warp = static_cast<int>(threadIdx.x) / kWarp;
    if (lane == 0) {
      maxes[warp] = s.max;
      sum_exps[warp] = s.sum_exp;
      sums[warp] = s.sum;
    }
    __syncthreads();
    if (warp == 0) {
      s = lane < kWarps ? RowStats<A>{maxes[lane], sum_exps[lane], sums[lane]} : empty_stats<A>();
      s = warp_merge(s);
    }
    __syncthreads();  // the shared arrays are rewritten for the next row
  }
  return s;
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

// Statistics of a contiguous row: head and tail elementwise (both shorter than a pack, so at
// most one element per thread), the body in 16-byte packs with kUnroll packs per thread in
// flight; thread j takes packs j, j + kGroup, ...
template <int kGroup, class T, class A>
__device__ __forceinline__ RowStats<A> contiguous_row_stats(const T* __restrict__ xr, int64_t classes, int lane) {
  constexpr int V = kPack<T>;
  RowStats<A> st = empty_stats<A>();
  const int64_t head = unaligned_head(xr, classes);
  if (lane < head) stats_add_one(st, to_acc<A>(xr[lane]));
  const int64_t packs = (classes - head) / V;
  const auto* body = reinterpret_cast<const Pack16<T>*>(xr + head);
  int64_t i = lane;
  for (; i + (kUnroll - 1) * kGroup < packs; i += kUnroll * kGroup) {
    Pack16<T> p[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) p[u] = body[i + u * kGroup];
    A v[kUnroll * V];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int j = 0; j < V; ++j) v[u * V + j] = to_acc<A>(p[u].v[j]);
    }
    stats_add(st, v);
  }
  for (; i < packs; i += kGroup) {
    const Pack16<T> p = body[i];
    A v[V];
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = to_acc<A>(p.v[j]);
    stats_add(st, v);
  }
  const int64_t tail = head + packs * V + lane;
  if (tail < classes) stats_add_one(st, to_acc<A>(xr[tail]));
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
  const int64_t groups_per_block = blockDim.x / kGroup;
  const int64_t total_groups = static_cast<int64_t>(gridDim.x) * groups_per_block;
  for (int64_t r = blockIdx.x * groups_per_block + threadIdx.x / kGroup; r < rows; r += total_groups) {
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
      const A lse = st.max + log(st.sum_exp);
      const A nll = lse - target_logit;
      loss[r] =
          smoothing == A(0) ? nll : (A(1) - smoothing) * nll + smoothing * (lse - st.sum / static_cast<A>(s.classes));
      lse_out[r] = lse;
    }
  }
}

// out[c] = f(c, x[c]) over one contiguous row (x[c] read only when kReadX; f gets 0 otherwise).
// x and out have the same 16-byte alignment: the body goes in 16-byte packs, kUnroll loads in
// flight per thread before the stores; head and tail elementwise.
template <int kGroup, bool kReadX, class T, class F>
__device__ __forceinline__ void map_row(const T* __restrict__ xr, T* __restrict__ out, int64_t classes, int lane, F f) {
  constexpr int V = kPack<T>;
  using A = float_acc_t<T>;
  auto element = [&](int64_t c) { out[c] = from_acc<T>(f(c, kReadX ? to_acc<A>(xr[c]) : A(0))); };
  const int64_t head = unaligned_head(out, classes);
  if (lane < head) element(lane);
  const int64_t packs = (classes - head) / V;
  const auto* in_body = kReadX ? reinterpret_cast<const Pack16<T>*>(xr + head) : nullptr;
  auto* out_body = reinterpret_cast<Pack16<T>*>(out + head);
  auto store = [&](int64_t pack, const Pack16<T>& p) {
    Pack16<T> o;
    const int64_t first = head + pack * V;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = from_acc<T>(f(first + j, kReadX ? to_acc<A>(p.v[j]) : A(0)));
    out_body[pack] = o;
  };
  int64_t i = lane;
  for (; i + (kUnroll - 1) * kGroup < packs; i += kUnroll * kGroup) {
    Pack16<T> p[kUnroll] = {};
    if constexpr (kReadX) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) p[u] = in_body[i + u * kGroup];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) store(i + u * kGroup, p[u]);
  }
  for (; i < packs; i += kGroup) {
    Pack16<T> p = {};
    if constexpr (kReadX) p = in_body[i];
    store(i, p);
  }
  const int64_t tail = head + packs * V + lane;
  if (tail < classes) element(tail);
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
  const int64_t groups_per_block = blockDim.x / kGroup;
  const int64_t total_groups = static_cast<int64_t>(gridDim.x) * groups_per_block;
  for (int64_t r = blockIdx.x * groups_per_block + threadIdx.x / kGroup; r < rows; r += total_groups) {
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
  const int64_t groups_per_block = blockDim.x / kGroup;
  const int64_t total_groups = static_cast<int64_t>(gridDim.x) * groups_per_block;
  for (int64_t r = blockIdx.x * groups_per_block + threadIdx.x / kGroup; r < rows; r += total_groups) {
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
  int64_t mine = 0;
  for (int64_t i = threadIdx.x; i < n; i += kCountBlock)
    mine += counted(static_cast<int64_t>(target[i]), ignore_index, classes) ? 1 : 0;
  auto warp_sum = [](int64_t v) {
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
  };
  mine = warp_sum(mine);
  constexpr int kWarps = kCountBlock / kWarp;
  __shared__ int64_t counts[kWarps];
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  if (lane == 0) counts[warp] = mine;
  __syncthreads();
  if (warp != 0) return;
  mine = warp_sum(counts[lane]);
  if (lane == 0) *count = mine;
}

// Blocks for kGroup threads per row: one block per row (or per kRowBlock / 32 rows) so the
// hardware balances rows across multiprocessors; the kernels loop when rows exceed the grid.
template <int kGroup>
unsigned row_grid(int64_t rows) {
  constexpr int64_t rows_per_block = kRowBlock / kGroup;
  return static_cast<unsigned>(std::min<int64_t>((rows + rows_per_block - 1) / rows_per_block, int64_t{1} << 30));
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
    const float lse = st.max + logf(st.sum_exp);
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
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "cross_entropy", {
    using T = scalar_t;
    using A = float_acc_t<T>;
    GENESIS_DISPATCH_INDEX(target_dtype, "cross_entropy", {
      using I = scalar_t;
      const auto* x = static_cast<const T*>(logits);
      const auto* t = static_cast<const I*>(target);
      auto* out = static_cast<A*>(loss);
      auto* lse_out = static_cast<A*>(lse);
      const auto eps = static_cast<A>(label_smoothing);
      const bool warp_rows = shape.classes <= kWarpRowLimit;
      if (shape.inner == 1 && warp_rows) {
        cross_entropy_kernel<kWarp, true, T, I, A><<<row_grid<kWarp>(rows), kRowBlock, 0, stream>>>(
            shape, x, t, ignore_index, eps, out, lse_out, fault, fault_op);
      } else if (shape.inner == 1) {
        cross_entropy_kernel<kRowBlock, true, T, I, A><<<row_grid<kRowBlock>(rows), kRowBlock, 0, stream>>>(
            shape, x, t, ignore_index, eps, out, lse_out, fault, fault_op);
      } else if (warp_rows) {
        cross_entropy_kernel<kWarp, false, T, I, A><<<row_grid<kWarp>(rows), kRowBlock, 0, stream>>>(
            shape, x, t, ignore_index, eps, out, lse_out, fault, fault_op);
      } else {
        cross_entropy_kernel<kRowBlock, false, T, I, A><<<row_grid<kRowBlock>(rows), kRowBlock, 0, stream>>>(
            shape, x, t, ignore_index, eps, out, lse_out, fault, fault_op);
      }
      GENESIS_CUDA_LAUNCH_CHECK();
    });
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
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "cross_entropy backward", {
    using T = scalar_t;
    using A = float_acc_t<T>;
    GENESIS_DISPATCH_INDEX(target_dtype, "cross_entropy backward", {
      using I = scalar_t;
      const auto* x = static_cast<const T*>(logits);
      const auto* t = static_cast<const I*>(target);
      const auto* row_lse = static_cast<const A*>(lse);
      const auto* g = static_cast<const T*>(grad_loss);
      auto* gx = static_cast<T*>(grad_logits);
      const auto eps = static_cast<A>(label_smoothing);
      if (shape.inner == 1 && same_alignment(logits, grad_logits)) {
        if (shape.classes <= kWarpRowLimit) {
          cross_entropy_backward_rows_kernel<kWarp, T, I, A><<<row_grid<kWarp>(shape.outer), kRowBlock, 0, stream>>>(
              shape.outer, shape.classes, x, t, row_lse, ignore_index, eps, g, grad_stride, valid_count, gx);
        } else {
          cross_entropy_backward_rows_kernel<kRowBlock, T, I, A>
              <<<row_grid<kRowBlock>(shape.outer), kRowBlock, 0, stream>>>(
                  shape.outer, shape.classes, x, t, row_lse, ignore_index, eps, g, grad_stride, valid_count, gx);
        }
      } else {
        cross_entropy_backward_kernel<T, I, A><<<grid_size(n), kBlockSize, 0, stream>>>(
            shape, x, t, row_lse, ignore_index, eps, g, grad_stride, valid_count, gx);
      }
      GENESIS_CUDA_LAUNCH_CHECK();
    });
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
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "nll_loss", {
    using T = scalar_t;
    using A = float_acc_t<T>;
    GENESIS_DISPATCH_INDEX(target_dtype, "nll_loss", {
      nll_loss_kernel<T, scalar_t, A><<<grid_size(rows), kBlockSize, 0, stream>>>(
          shape, static_cast<const T*>(log_probs), static_cast<const scalar_t*>(target), ignore_index,
          static_cast<A*>(loss), fault, fault_op);
      GENESIS_CUDA_LAUNCH_CHECK();
    });
  });
}

void nll_loss_backward(DType dtype, DType target_dtype, ClassRows shape, const void* target, int64_t ignore_index,
                       const void* grad_loss, int64_t grad_stride, const int64_t* valid_count, void* grad_log_probs,
                       cudaStream_t stream) {
  const int64_t n = shape.outer * shape.classes * shape.inner;
  if (n <= 0) return;
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "nll_loss backward", {
    using T = scalar_t;
    using A = float_acc_t<T>;
    GENESIS_DISPATCH_INDEX(target_dtype, "nll_loss backward", {
      using I = scalar_t;
      const auto* t = static_cast<const I*>(target);
      const auto* g = static_cast<const T*>(grad_loss);
      auto* gx = static_cast<T*>(grad_log_probs);
      if (shape.inner == 1 && shape.classes <= kWarpRowLimit) {
        nll_loss_backward_rows_kernel<kWarp, T, I, A><<<row_grid<kWarp>(shape.outer), kRowBlock, 0, stream>>>(
            shape.outer, shape.classes, t, ignore_index, g, grad_stride, valid_count, gx);
      } else if (shape.inner == 1) {
        nll_loss_backward_rows_kernel<kRowBlock, T, I, A><<<row_grid<kRowBlock>(shape.outer), kRowBlock, 0, stream>>>(
            shape.outer, shape.classes, t, ignore_index, g, grad_stride, valid_count, gx);
      } else {
        nll_loss_backward_kernel<T, I, A>
            <<<grid_size(n), kBlockSize, 0, stream>>>(shape, t, ignore_index, g, grad_stride, valid_count, gx);
      }
      GENESIS_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace genesis::kernels::cuda
