// CUDA kernels of the softmax family, layer/RMS norm and embedding. Rows up to kWarpRowLimit
// long are handled by one warp each, longer rows by one block each; sums and maxima are
// shuffle trees (then a fixed-order pass over the per-warp results), so every run gives the
// same bits. The weight/bias gradients of the norms and the embedding gradient sum in a fixed
// order too: no atomics anywhere.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/nn.h"

namespace genesis::kernels::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr int64_t kWarpRowLimit = 1024;
// Row chunks of the norms' weight/bias gradient partials.
constexpr int64_t kNormChunks = 256;

struct Sum {
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return a + b;
  }
};
struct Max {
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return b > a ? b : a;
  }
};

// Butterfly: every lane ends with the same value (each step combines a pair symmetrically).
template <class A, class Op>
__device__ __forceinline__ A warp_reduce(A v, Op op) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Reduction over the kGroup threads sharing a row (a warp, or the whole block); every thread
// gets the result. `shared` holds one value per warp of the block.
template <int kGroup, class A, class Op>
__device__ __forceinline__ A group_reduce(A v, A* shared, Op op) {
  v = warp_reduce(v, op);
  if constexpr (kGroup == kWarp) {
    return v;
  } else {
    const int warp = static_cast<int>(threadIdx.x) / kWarp;
    if (threadIdx.x % kWarp == 0) shared[warp] = v;
    __syncthreads();
    A total = shared[0];
    for (int w = 1; w < kGroup / kWarp; ++w) total = op(total, shared[w]);
    __syncthreads();  // `shared` is rewritten by the next reduction
    return total;
  }
}

// Rows handled by the thread's group: a grid-stride loop over rows in steps of the groups in flight.
#define GENESIS_FOR_EACH_GROUP_ROW(r, rows)                                                                   \
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (kThreads / kGroup) + threadIdx.x / kGroup; r < (rows); \
       r += static_cast<int64_t>(gridDim.x) * (kThreads / kGroup))

// One group per row; lane l reads columns l, l + kGroup, ... (coalesced) in three passes:
// maximum, sum of exponentials, output.
template <int kGroup, class T>
__global__ void __launch_bounds__(kThreads) softmax_rows(bool log, int64_t rows, int64_t dim, const T* x, T* y) {
  using A = float_acc_t<T>;
  __shared__ A shared[kThreads / kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  GENESIS_FOR_EACH_GROUP_ROW(r, rows) {
    const T* xr = x + r * dim;
    T* yr = y + r * dim;
    A m = -std::numeric_limits<A>::infinity();
    for (int64_t c = lane; c < dim; c += kGroup) m = Max{}(m, to_acc<A>(xr[c]));
    m = group_reduce<kGroup>(m, shared, Max{});
    A total = 0;
    for (int64_t c = lane; c < dim; c += kGroup) total += std::exp(to_acc<A>(xr[c]) - m);
    total = group_reduce<kGroup>(total, shared, Sum{});
    if (log) {
      const A log_total = std::log(total);
      for (int64_t c = lane; c < dim; c += kGroup) yr[c] = from_acc<T>((to_acc<A>(xr[c]) - m) - log_total);
    } else {
      const A inv = A(1) / total;
      for (int64_t c = lane; c < dim; c += kGroup) yr[c] = from_acc<T>(std::exp(to_acc<A>(xr[c]) - m) * inv);
    }
  }
}

template <int kGroup, class T>
__global__ void __launch_bounds__(kThreads)
    softmax_backward_rows(bool log, int64_t rows, int64_t dim, const T* y, const T* gy, T* gx) {
  using A = float_acc_t<T>;
  __shared__ A shared[kThreads / kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  GENESIS_FOR_EACH_GROUP_ROW(r, rows) {
    const T* yr = y + r * dim;
    const T* gr = gy + r * dim;
    T* out = gx + r * dim;
    A dot = 0;
    for (int64_t c = lane; c < dim; c += kGroup) {
      dot += log ? to_acc<A>(gr[c]) : to_acc<A>(gr[c]) * to_acc<A>(yr[c]);
    }
    dot = group_reduce<kGroup>(dot, shared, Sum{});
    for (int64_t c = lane; c < dim; c += kGroup) {
      const A g = to_acc<A>(gr[c]), v = to_acc<A>(yr[c]);
      out[c] = from_acc<T>(log ? g - std::exp(v) * dot : v * (g - dot));
    }
  }
}

// One group per row: mean (when centered), sum of squared deviations, output.
template <int kGroup, class T>
__global__ void __launch_bounds__(kThreads)
    norm_rows_kernel(bool centered, int64_t rows, int64_t cols, const T* x, const T* w, const T* b, double eps, T* y,
                     float_acc_t<T>* mean, float_acc_t<T>* rstd) {
  using A = float_acc_t<T>;
  __shared__ A shared[kThreads / kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const A n = static_cast<A>(cols);
  GENESIS_FOR_EACH_GROUP_ROW(r, rows) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    A mu = 0;
    if (centered) {
      for (int64_t c = lane; c < cols; c += kGroup) mu += to_acc<A>(xr[c]);
      mu = group_reduce<kGroup>(mu, shared, Sum{}) / n;
    }
    A squares = 0;
    for (int64_t c = lane; c < cols; c += kGroup) {
      const A d = to_acc<A>(xr[c]) - mu;
      squares += d * d;
    }
    squares = group_reduce<kGroup>(squares, shared, Sum{});
    const A rs = A(1) / std::sqrt(squares / n + static_cast<A>(eps));
    for (int64_t c = lane; c < cols; c += kGroup) {
      A v = (to_acc<A>(xr[c]) - mu) * rs;
      if (w) v *= to_acc<A>(w[c]);
      if (b) v += to_acc<A>(b[c]);
      yr[c] = from_acc<T>(v);
    }
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// grad_x: one group per row, two row sums, then the output pass.
template <int kGroup, class T>
__global__ void __launch_bounds__(kThreads)
    norm_grad_x(bool centered, int64_t rows, int64_t cols, const T* x, const T* w, const float_acc_t<T>* mean,
                const float_acc_t<T>* rstd, const T* gy, T* gx) {
  using A = float_acc_t<T>;
  __shared__ A shared[kThreads / kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const A n = static_cast<A>(cols);
  GENESIS_FOR_EACH_GROUP_ROW(r, rows) {
    const T* xr = x + r * cols;
    const T* gr = gy + r * cols;
    T* out = gx + r * cols;
    const A mu = mean[r], rs = rstd[r];
    A sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t c = lane; c < cols; c += kGroup) {
      const A xhat = (to_acc<A>(xr[c]) - mu) * rs;
      const A g = to_acc<A>(gr[c]);
      const A dxhat = w ? g * to_acc<A>(w[c]) : g;
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
    }
    sum_dxhat = group_reduce<kGroup>(sum_dxhat, shared, Sum{});
    sum_dxhat_xhat = group_reduce<kGroup>(sum_dxhat_xhat, shared, Sum{});
    const A mean_dxhat = centered ? sum_dxhat / n : A(0);
    const A mean_dxhat_xhat = sum_dxhat_xhat / n;
    for (int64_t c = lane; c < cols; c += kGroup) {
      const A xhat = (to_acc<A>(xr[c]) - mu) * rs;
      const A g = to_acc<A>(gr[c]);
      const A dxhat = w ? g * to_acc<A>(w[c]) : g;
      out[c] = from_acc<T>(rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
    }
  }
}

// Thread (column c, chunk blockIdx.y) sums g * xhat and g down its chunk's rows; neighbouring
// threads read neighbouring columns of a row.
template <class T>
__global__ void __launch_bounds__(kThreads)
    norm_column_partials(int64_t rows, int64_t cols, int64_t chunks, const T* x, const float_acc_t<T>* mean,
                         const float_acc_t<T>* rstd, const T* gy, float_acc_t<T>* partial_w,
                         float_acc_t<T>* partial_b) {
  using A = float_acc_t<T>;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  const int64_t k = blockIdx.y;
  A acc_w = 0, acc_b = 0;
  for (int64_t r = k * rows / chunks; r < (k + 1) * rows / chunks; ++r) {
    const A g = to_acc<A>(gy[r * cols + c]);
    acc_w += g * ((to_acc<A>(x[r * cols + c]) - mean[r]) * rstd[r]);
    acc_b += g;
  }
  if (partial_w) partial_w[k * cols + c] = acc_w;
  if (partial_b) partial_b[k * cols + c] = acc_b;
}

// Column c adds its chunk partials in chunk order (zero when there are no rows).
template <class T>
__global__ void sum_column_partials(int64_t chunks, int64_t cols, const float_acc_t<T>* partial, T* out) {
  using A = float_acc_t<T>;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    A acc = 0;
    for (int64_t k = 0; k < chunks; ++k) acc += partial[k * cols + c];
    out[c] = from_acc<T>(acc);
  }
}

// Element e of out [n, dim] copies weight[index[e / dim], e % dim]: coalesced along each row.
template <class T, class I>
__global__ void embedding_gather(int64_t n, int64_t dim, const I* index, const T* weight, T* out) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n * dim;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / dim;
    out[e] = weight[static_cast<int64_t>(index[i]) * dim + (e - i * dim)];
  }
}

// Element (v, c) of grad_weight sums column c of the grad_out rows that picked v, in position order.
template <class T>
__global__ void embedding_scatter(int64_t num, int64_t dim, const int64_t* start, const int64_t* order,
                                  const T* grad_out, int64_t padding_idx, T* grad_weight) {
  using A = float_acc_t<T>;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < num * dim;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = e / dim, c = e - v * dim;
    A acc = 0;
    if (v != padding_idx) {
      for (int64_t k = start[v]; k < start[v + 1]; ++k) acc += to_acc<A>(grad_out[order[k] * dim + c]);
    }
    grad_weight[e] = from_acc<T>(acc);
  }
}

// Launches `kernel<kWarp>` (short rows) or `kernel<kThreads>` (long rows) over `rows` rows.
template <class WarpKernel, class BlockKernel, class... Args>
void launch_rows(WarpKernel warp_kernel, BlockKernel block_kernel, int64_t rows, int64_t cols, cudaStream_t stream,
                 Args... args) {
  if (rows <= 0) return;
  if (cols <= kWarpRowLimit) {
    warp_kernel<<<grid_size(rows * kWarp, kThreads), kThreads, 0, stream>>>(args...);
  } else {
    block_kernel<<<grid_size(rows * kThreads, kThreads), kThreads, 0, stream>>>(args...);
  }
  GENESIS_CUDA_LAUNCH_CHECK();
}

}  // namespace

void softmax(DType dtype, bool log, int64_t rows, int64_t dim, const void* x, void* y, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "softmax", {
    launch_rows(softmax_rows<kWarp, scalar_t>, softmax_rows<kThreads, scalar_t>, rows, dim, stream, log, rows, dim,
                static_cast<const scalar_t*>(x), static_cast<scalar_t*>(y));
  });
}

void softmax_backward(DType dtype, bool log, int64_t rows, int64_t dim, const void* y, const void* grad_y, void* grad_x,
                      cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "softmax backward", {
    launch_rows(softmax_backward_rows<kWarp, scalar_t>, softmax_backward_rows<kThreads, scalar_t>, rows, dim, stream,
                log, rows, dim, static_cast<const scalar_t*>(y), static_cast<const scalar_t*>(grad_y),
                static_cast<scalar_t*>(grad_x));
  });
}

void norm_rows(DType dtype, bool centered, int64_t rows, int64_t cols, const void* x, const void* weight,
               const void* bias, double eps, void* y, void* mean, void* rstd, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "norm", {
    using T = scalar_t;
    using A = float_acc_t<T>;
    launch_rows(norm_rows_kernel<kWarp, T>, norm_rows_kernel<kThreads, T>, rows, cols, stream, centered, rows, cols,
                static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), eps,
                static_cast<T*>(y), static_cast<A*>(mean), static_cast<A*>(rstd));
  });
}

int64_t norm_backward_chunks(int64_t rows) {
  return std::min(rows, kNormChunks);
}

void norm_rows_backward(DType dtype, bool centered, int64_t rows, int64_t cols, const void* x, const void* weight,
                        const void* mean, const void* rstd, const void* grad_y, void* grad_x, void* grad_weight,
                        void* grad_bias, void* partials, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "norm backward", {
    using T = scalar_t;
    using A = float_acc_t<T>;
    const T* xt = static_cast<const T*>(x);
    const A* mu = static_cast<const A*>(mean);
    const A* rs = static_cast<const A*>(rstd);
    const T* gy = static_cast<const T*>(grad_y);
    launch_rows(norm_grad_x<kWarp, T>, norm_grad_x<kThreads, T>, rows, cols, stream, centered, rows, cols, xt,
                static_cast<const T*>(weight), mu, rs, gy, static_cast<T*>(grad_x));
    if ((grad_weight || grad_bias) && cols > 0) {
      const int64_t chunks = norm_backward_chunks(rows);
      A* partial_w = static_cast<A*>(partials);
      A* partial_b = partial_w + chunks * cols;
      if (chunks > 0) {
        const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(chunks));
        norm_column_partials<T><<<grid, kThreads, 0, stream>>>(
            rows, cols, chunks, xt, mu, rs, gy, grad_weight ? partial_w : nullptr, grad_bias ? partial_b : nullptr);
        GENESIS_CUDA_LAUNCH_CHECK();
      }
      if (grad_weight) {
        sum_column_partials<T>
            <<<grid_size(cols), kBlockSize, 0, stream>>>(chunks, cols, partial_w, static_cast<T*>(grad_weight));
        GENESIS_CUDA_LAUNCH_CHECK();
      }
      if (grad_bias) {
        sum_column_partials<T>
            <<<grid_size(cols), kBlockSize, 0, stream>>>(chunks, cols, partial_b, static_cast<T*>(grad_bias));
        GENESIS_CUDA_LAUNCH_CHECK();
      }
    }
  });
}

void embedding(DType dtype, DType index_dtype, int64_t n, const void* index, int64_t dim, const void* weight, void* out,
               cudaStream_t stream) {
  if (n * dim <= 0) return;
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "embedding", {
    using T = scalar_t;
    GENESIS_DISPATCH_INDEX(index_dtype, "embedding", {
      embedding_gather<T, scalar_t><<<grid_size(n * dim), kBlockSize, 0, stream>>>(
          n, dim, static_cast<const scalar_t*>(index), static_cast<const T*>(weight), static_cast<T*>(out));
      GENESIS_CUDA_LAUNCH_CHECK();
    });
  });
}

void embedding_backward(DType dtype, int64_t num, int64_t dim, const int64_t* start, const int64_t* order,
                        const void* grad_out, int64_t padding_idx, void* grad_weight, cudaStream_t stream) {
  if (num * dim <= 0) return;
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "embedding backward", {
    embedding_scatter<scalar_t><<<grid_size(num * dim), kBlockSize, 0, stream>>>(
        num, dim, start, order, static_cast<const scalar_t*>(grad_out), padding_idx,
        static_cast<scalar_t*>(grad_weight));
    GENESIS_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace genesis::kernels::cuda
