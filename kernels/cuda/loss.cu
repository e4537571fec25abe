// CUDA class-index losses. The cross-entropy forward reduces each row in one pass with an
// online logsumexp (running max and sum of exps rescaled when the max grows): one warp per
// row for up to kWarpRowLimit classes, one block per row beyond. The backward passes are
// elementwise over the gradient, so their reads and writes are coalesced. No atomics: every
// result is computed in a fixed order.
#include <cmath>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/loss.h"

namespace genesis::kernels::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int64_t kWarpRowLimit = 1024;
constexpr int kRowBlock = 512;

template <class A>
__device__ __forceinline__ A negative_infinity() {
  return -static_cast<A>(INFINITY);
}

// Running (max, sum of exp(x - max)) of one more value. A NaN value makes the sum NaN; -inf
// adds nothing.
template <class A>
__device__ __forceinline__ void lse_add(A& max, A& sum, A v) {
  using std::exp;
  if (v > max) {
    sum = sum * exp(max - v) + A(1);
    max = v;
  } else if (v != negative_infinity<A>()) {
    sum += exp(v - max);
  }
}

// Merges another running pair into (max, sum); an empty pair (sum 0) changes nothing, a NaN
// sum propagates.
template <class A>
__device__ __forceinline__ void lse_merge(A& max, A& sum, A other_max, A other_sum) {
  using std::exp;
  if (other_max > max) {
    sum = sum * exp(max - other_max) + other_sum;
    max = other_max;
  } else if (other_sum != A(0)) {
    sum += other_sum * exp(other_max - max);
  }
}

template <class A>
struct RowStats {
  A max;
  A sum_exp;
  A sum;  // of the logits, for label smoothing
};

template <class A>
__device__ __forceinline__ RowStats<A> warp_merge(RowStats<A> s) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    const A other_max = __shfl_down_sync(0xffffffffu, s.max, offset);
    const A other_sum_exp = __shfl_down_sync(0xffffffffu, s.sum_exp, offset);
    s.sum += __shfl_down_sync(0xffffffffu, s.sum, offset);
    lse_merge(s.max, s.sum_exp, other_max, other_sum_exp);
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
      s = lane < kWarps ? RowStats<A>{maxes[lane], sum_exps[lane], sums[lane]}
                        : RowStats<A>{negative_infinity<A>(), A(0), A(0)};
      s = warp_merge(s);
    }
    __syncthreads();  // the shared arrays are rewritten for the next row
  }
  return s;
}

__device__ __forceinline__ int64_t row_base(const ClassRows& s, int64_t r) {
  return (r / s.inner) * s.classes * s.inner + r % s.inner;
}

// kGroup threads per row; thread j of a group reads classes j, j + kGroup, ... (contiguous
// across the group when inner == 1). Every thread of a group takes the same branches.
template <int kGroup, class T, class I, class A>
__global__ void __launch_bounds__(kRowBlock)
    cross_entropy_kernel(ClassRows s, const T* x, const I* target, int64_t ignore_index, A smoothing, A* loss,
                         A* lse_out) {
  using std::log;
  const int64_t rows = s.outer * s.inner;
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const int64_t groups_per_block = blockDim.x / kGroup;
  const int64_t total_groups = static_cast<int64_t>(gridDim.x) * groups_per_block;
  for (int64_t r = blockIdx.x * groups_per_block + threadIdx.x / kGroup; r < rows; r += total_groups) {
    const auto t = static_cast<int64_t>(target[r]);
    if (t == ignore_index) {
      if (lane == 0) {
        loss[r] = A(0);
        lse_out[r] = A(0);
      }
      continue;
    }
    const T* xr = x + row_base(s, r);
    RowStats<A> st{negative_infinity<A>(), A(0), A(0)};
    for (int64_t c = lane; c < s.classes; c += kGroup) {
      const A v = to_acc<A>(xr[c * s.inner]);
      lse_add(st.max, st.sum_exp, v);
      st.sum += v;
    }
    st = group_merge<kGroup>(st);
    if (lane == 0) {
      const A lse = st.max + log(st.sum_exp);
      const A nll = lse - to_acc<A>(xr[t * s.inner]);
      loss[r] =
          smoothing == A(0) ? nll : (A(1) - smoothing) * nll + smoothing * (lse - st.sum / static_cast<A>(s.classes));
      lse_out[r] = lse;
    }
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
                                              int64_t grad_stride, A scale, T* gx) {
  using std::exp;
  const int64_t n = s.outer * s.classes * s.inner;
  const A uniform = smoothing / static_cast<A>(s.classes);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride) {
    const RowClass rc = row_class_of(s, k);
    const auto t = static_cast<int64_t>(target[rc.row]);
    if (t == ignore_index) {
      gx[k] = from_acc<T>(A(0));
      continue;
    }
    const A g = to_acc<A>(grad_loss[rc.row * grad_stride]) * scale;
    A d = exp(to_acc<A>(x[k]) - lse[rc.row]) - uniform;
    if (rc.cls == t) d -= A(1) - smoothing;
    gx[k] = from_acc<T>(d * g);
  }
}

// One thread per row.
template <class T, class I, class A>
__global__ void nll_loss_kernel(ClassRows s, const T* lp, const I* target, int64_t ignore_index, A* loss) {
  const int64_t rows = s.outer * s.inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    const auto t = static_cast<int64_t>(target[r]);
    loss[r] = t == ignore_index ? A(0) : -to_acc<A>(lp[row_base(s, r) + t * s.inner]);
  }
}

// One thread per gradient element.
template <class T, class I, class A>
__global__ void nll_loss_backward_kernel(ClassRows s, const I* target, int64_t ignore_index, const T* grad_loss,
                                         int64_t grad_stride, A scale, T* gx) {
  const int64_t n = s.outer * s.classes * s.inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride) {
    const RowClass rc = row_class_of(s, k);
    const auto t = static_cast<int64_t>(target[rc.row]);
    const bool hit = t != ignore_index && rc.cls == t;
    gx[k] = from_acc<T>(hit ? -to_acc<A>(grad_loss[rc.row * grad_stride]) * scale : A(0));
  }
}

}  // namespace

void cross_entropy(DType dtype, DType target_dtype, ClassRows shape, const void* logits, const void* target,
                   int64_t ignore_index, double label_smoothing, void* loss, void* lse, cudaStream_t stream) {
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
      if (shape.classes <= kWarpRowLimit) {
        cross_entropy_kernel<kWarp, T, I, A>
            <<<grid_size(rows * kWarp), kBlockSize, 0, stream>>>(shape, x, t, ignore_index, eps, out, lse_out);
      } else {
        cross_entropy_kernel<kRowBlock, T, I, A><<<grid_size(rows * kRowBlock, kRowBlock), kRowBlock, 0, stream>>>(
            shape, x, t, ignore_index, eps, out, lse_out);
      }
      GENESIS_CUDA_LAUNCH_CHECK();
    });
  });
}

void cross_entropy_backward(DType dtype, DType target_dtype, ClassRows shape, const void* logits, const void* target,
                            const void* lse, int64_t ignore_index, double label_smoothing, const void* grad_loss,
                            int64_t grad_stride, double scale, void* grad_logits, cudaStream_t stream) {
  const int64_t n = shape.outer * shape.classes * shape.inner;
  if (n <= 0) return;
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "cross_entropy backward", {
    using T = scalar_t;
    using A = float_acc_t<T>;
    GENESIS_DISPATCH_INDEX(target_dtype, "cross_entropy backward", {
      cross_entropy_backward_kernel<T, scalar_t, A><<<grid_size(n), kBlockSize, 0, stream>>>(
          shape, static_cast<const T*>(logits), static_cast<const scalar_t*>(target), static_cast<const A*>(lse),
          ignore_index, static_cast<A>(label_smoothing), static_cast<const T*>(grad_loss), grad_stride,
          static_cast<A>(scale), static_cast<T*>(grad_logits));
      GENESIS_CUDA_LAUNCH_CHECK();
    });
  });
}

void nll_loss(DType dtype, DType target_dtype, ClassRows shape, const void* log_probs, const void* target,
              int64_t ignore_index, void* loss, cudaStream_t stream) {
  const int64_t rows = shape.outer * shape.inner;
  if (rows <= 0) return;
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "nll_loss", {
    using T = scalar_t;
    using A = float_acc_t<T>;
    GENESIS_DISPATCH_INDEX(target_dtype, "nll_loss", {
      nll_loss_kernel<T, scalar_t, A><<<grid_size(rows), kBlockSize, 0, stream>>>(
          shape, static_cast<const T*>(log_probs), static_cast<const scalar_t*>(target), ignore_index,
          static_cast<A*>(loss));
      GENESIS_CUDA_LAUNCH_CHECK();
    });
  });
}

void nll_loss_backward(DType dtype, DType target_dtype, ClassRows shape, const void* target, int64_t ignore_index,
                       const void* grad_loss, int64_t grad_stride, double scale, void* grad_log_probs,
                       cudaStream_t stream) {
  const int64_t n = shape.outer * shape.classes * shape.inner;
  if (n <= 0) return;
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "nll_loss backward", {
    using T = scalar_t;
    using A = float_acc_t<T>;
    GENESIS_DISPATCH_INDEX(target_dtype, "nll_loss backward", {
      nll_loss_backward_kernel<T, scalar_t, A><<<grid_size(n), kBlockSize, 0, stream>>>(
          shape, static_cast<const scalar_t*>(target), ignore_index, static_cast<const T*>(grad_loss), grad_stride,
          static_cast<A>(scale), static_cast<T*>(grad_log_probs));
      GENESIS_CUDA_LAUNCH_CHECK();
    });
  });
}

}  // namespace genesis::kernels::cuda
