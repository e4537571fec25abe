// CUDA kernels of the softmax family, layer/RMS norm and embedding. Rows of 16-byte packs that
// fit in registers go to nn_rows.cu; the scalar path here takes the rest (f64, odd widths,
// misaligned views, very long rows): rows up to kWarpRowLimit long are handled by one warp each,
// longer rows by one block each. Sums and maxima are shuffle trees (then a fixed-order pass over
// the per-warp results), so every run gives the same bits. The weight/bias gradients of the
// norms and the embedding gradient sum in a fixed order too: no float atomics.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/nn.h"
#include "kernels/cuda/nn_rows.cuh"
#include "kernels/cuda/packs.cuh"
#include "kernels/cuda/sort_by_key.cuh"
#include "libgenesis/core/error.h"

namespace genesis::kernels::cuda {

namespace {

using rows::kThreads;

// Rows up to this long take one warp each on the scalar path, longer rows one block each.
constexpr int64_t kWarpRowLimit = 1024;

// One group per row; lane l reads columns l, l + kGroup, ... (coalesced) in three passes:
// maximum, sum of exponentials, output.
template <int kGroup, class T>
__global__ void __launch_bounds__(kThreads) softmax_rows(bool log, int64_t rows, int64_t dim, const T* x, T* y) {
  using A = float_acc_t<T>;
  __shared__ A shared[kThreads / kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  GENESIS_FOR_EACH_GROUP_ROW(r, rows, kGroup, kThreads) {
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
  GENESIS_FOR_EACH_GROUP_ROW(r, rows, kGroup, kThreads) {
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

// One group per row: mean (when centered), sum of squared deviations, output. x of X, weight
// and bias of W, y of Y, all math in A, the accumulator type of X.
template <int kGroup, class X, class W, class Y, class A = float_acc_t<X>>
__global__ void __launch_bounds__(kThreads)
    norm_rows_kernel(bool centered, int64_t rows, int64_t cols, const X* x, const W* w, const W* b, double eps, Y* y,
                     A* mean, A* rstd) {
  __shared__ A shared[kThreads / kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const A n = static_cast<A>(cols);
  GENESIS_FOR_EACH_GROUP_ROW(r, rows, kGroup, kThreads) {
    const X* xr = x + r * cols;
    Y* yr = y + r * cols;
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
      yr[c] = from_acc<Y>(v);
    }
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// grad_x: one group per row, two row sums, then the output pass. grad_y is of the forward's
// output type Y.
template <int kGroup, class X, class W, class Y, class A = float_acc_t<X>>
__global__ void __launch_bounds__(kThreads) norm_grad_x(bool centered, int64_t rows, int64_t cols, const X* x,
                                                        const W* w, const A* mean, const A* rstd, const Y* gy, X* gx) {
  __shared__ A shared[kThreads / kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const A n = static_cast<A>(cols);
  GENESIS_FOR_EACH_GROUP_ROW(r, rows, kGroup, kThreads) {
    const X* xr = x + r * cols;
    const Y* gr = gy + r * cols;
    X* out = gx + r * cols;
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
      out[c] = from_acc<X>(rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
    }
  }
}

// Thread (column c, chunk blockIdx.y) sums g * xhat and g down its chunk's rows; neighbouring
// threads read neighbouring columns of a row.
template <class X, class Y>
__global__ void __launch_bounds__(kThreads)
    norm_column_partials(int64_t rows, int64_t cols, int64_t chunks, const X* x, const float_acc_t<X>* mean,
                         const float_acc_t<X>* rstd, const Y* gy, float_acc_t<X>* partial_w,
                         float_acc_t<X>* partial_b) {
  using A = float_acc_t<X>;
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

constexpr int kPartialColumns = 8;
constexpr int kSlices = kThreads / kPartialColumns;

// Block (8 columns) x (kSlices slices): slice s adds chunks s, s + kSlices, ... of its column,
// then the slice sums are added in slice order. Narrow blocks make many of them, each thread
// with few loads in its chain. blockIdx.y picks the weight (0) or bias (1). The partials are in
// the accumulator type A, the gradients in the weights' type W.
template <class A, class W>
__global__ void __launch_bounds__(kThreads) sum_column_partials(int64_t chunks, int64_t cols, const A* partial_w,
                                                                const A* partial_b, W* grad_weight, W* grad_bias) {
  __shared__ A slice_sums[kSlices][kPartialColumns];
  const A* partial = blockIdx.y == 0 ? partial_w : partial_b;
  W* out = blockIdx.y == 0 ? grad_weight : grad_bias;
  if (!out) return;
  const int column = static_cast<int>(threadIdx.x) % kPartialColumns;
  const int slice = static_cast<int>(threadIdx.x) / kPartialColumns;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kPartialColumns + column;
  A acc = 0;
  if (c < cols) {
    for (int64_t k = slice; k < chunks; k += kSlices) acc += partial[k * cols + c];
  }
  slice_sums[slice][column] = acc;
  __syncthreads();
  if (slice == 0 && c < cols) {
    A total = slice_sums[0][column];
    for (int s = 1; s < kSlices; ++s) total += slice_sums[s][column];
    out[c] = from_acc<W>(total);
  }
}

// Warp i copies row index[i] of weight to row i of out (then row i + warps in flight, ...): lane
// l moves units l, l + 32, ..., four loads in flight before their stores. An index outside
// [0, num) skips its row and is reported to `fault`.
template <class U, class I>
__global__ void __launch_bounds__(kThreads)
    embedding_gather(int64_t n, int64_t num, int64_t units, const I* __restrict__ index, const U* __restrict__ weight,
                     U* __restrict__ out, ::genesis::cuda::KernelFault* fault, int fault_op) {
  constexpr int kUnroll = 4;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  GENESIS_FOR_EACH_GROUP_ROW(i, n, kWarp, kThreads) {
    const int64_t row = static_cast<int64_t>(index[i]);
    if (row < 0 || row >= num) {
      if (lane == 0) report_index_fault(fault, fault_op, row, num);
      continue;
    }
    const U* src = weight + row * units;
    U* dst = out + i * units;
    for (int64_t j = lane; j < units; j += kUnroll * kWarp) {
      U v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (j + u * kWarp < units) v[u] = src[j + u * kWarp];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (j + u * kWarp < units) dst[j + u * kWarp] = v[u];
      }
    }
  }
}

// Warp v builds row v of grad_weight: lane l sums, for each of its packs l, l + 32, ..., the
// grad_out rows that picked v in position order (rows nobody picked become zeros).
template <class T, int N>
__global__ void __launch_bounds__(kThreads)
    embedding_scatter(int64_t num, int64_t packs, const int64_t* start, const int64_t* order, const T* grad_out,
                      int64_t padding_idx, T* grad_weight) {
  using A = float_acc_t<T>;
  using P = Pack<T, N>;
  const P* rows_in = reinterpret_cast<const P*>(grad_out);
  P* rows_out = reinterpret_cast<P*>(grad_weight);
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  GENESIS_FOR_EACH_GROUP_ROW(v, num, kWarp, kThreads) {
    const int64_t begin = start[v], end = v == padding_idx ? begin : start[v + 1];
    for (int64_t j = lane; j < packs; j += kWarp) {
      A acc[N] = {};
      for (int64_t k = begin; k < end; ++k) {
        const P p = load_pack(rows_in + order[k] * packs + j);
#pragma unroll
        for (int i = 0; i < N; ++i) acc[i] += to_acc<A>(p.v[i]);
      }
      P result;
#pragma unroll
      for (int i = 0; i < N; ++i) result.v[i] = from_acc<T>(acc[i]);
      store_pack(rows_out + v * packs + j, result);
    }
  }
}

// Position i of the indices: its value (the sort key) and i (the payload).
template <class I>
__global__ void embedding_sort_inputs(int64_t n, int64_t num, const I* index, unsigned long long* keys,
                                      int64_t* positions) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // A bad id (reported by the forward) sorts after every row as `num`, which no row reads.
    const auto id = static_cast<int64_t>(index[i]);
    keys[i] = static_cast<unsigned long long>(id >= 0 && id < num ? id : num);
    positions[i] = i;
  }
}

// start[v] for v <= num: the first sorted slot whose key is at least v (a binary search).
__global__ void embedding_row_starts(int64_t n, int64_t num, const unsigned long long* sorted_keys, int64_t* start) {
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v <= num;
       v += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (sorted_keys[mid] < static_cast<unsigned long long>(v)) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    start[v] = lo;
  }
}

// Whole 16-byte packs of `bytes` at 16-byte aligned addresses.
bool packs_of_16(int64_t bytes, std::initializer_list<const void*> pointers) {
  if (bytes % 16 != 0) return false;
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
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
  if (softmax_in_registers(dtype, log, rows, dim, x, y, stream)) return;
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "softmax", {
    launch_rows(softmax_rows<kWarp, scalar_t>, softmax_rows<kThreads, scalar_t>, rows, dim, stream, log, rows, dim,
                static_cast<const scalar_t*>(x), static_cast<scalar_t*>(y));
  });
}

void softmax_backward(DType dtype, bool log, int64_t rows, int64_t dim, const void* y, const void* grad_y, void* grad_x,
                      cudaStream_t stream) {
  if (softmax_backward_in_registers(dtype, log, rows, dim, y, grad_y, grad_x, stream)) return;
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "softmax backward", {
    launch_rows(softmax_backward_rows<kWarp, scalar_t>, softmax_backward_rows<kThreads, scalar_t>, rows, dim, stream,
                log, rows, dim, static_cast<const scalar_t*>(y), static_cast<const scalar_t*>(grad_y),
                static_cast<scalar_t*>(grad_x));
  });
}

void norm_rows(NormDTypes dtypes, bool centered, int64_t rows, int64_t cols, const void* x, const void* weight,
               const void* bias, double eps, void* y, void* mean, void* rstd, cudaStream_t stream) {
  if (norm_rows_in_registers(dtypes, centered, rows, cols, x, weight, bias, eps, y, mean, rstd, stream)) return;
  with_norm_types<__half, __nv_bfloat16>(dtypes, "norm", [&]<class X, class W, class Y>() {
    using A = float_acc_t<X>;
    launch_rows(norm_rows_kernel<kWarp, X, W, Y>, norm_rows_kernel<kThreads, X, W, Y>, rows, cols, stream, centered,
                rows, cols, static_cast<const X*>(x), static_cast<const W*>(weight), static_cast<const W*>(bias), eps,
                static_cast<Y*>(y), static_cast<A*>(mean), static_cast<A*>(rstd));
  });
}

// Two blocks per multiprocessor: the register-row backward keeps 2 x 8 warps of rows resident.
int64_t norm_backward_chunks(DType x_dtype, int64_t rows, int64_t cols) {
  return std::min<int64_t>(rows,
                           norm_backward_blocks_per_sm(x_dtype, cols) * static_cast<int64_t>(multiprocessor_count()));
}

void norm_rows_backward(NormDTypes dtypes, bool centered, int64_t rows, int64_t cols, const void* x, const void* weight,
                        const void* mean, const void* rstd, const void* grad_y, void* grad_x, void* grad_weight,
                        void* grad_bias, void* partials, cudaStream_t stream) {
  const bool want_partials = (grad_weight || grad_bias) && cols > 0;
  const int64_t chunks = norm_backward_chunks(dtypes.x, rows, cols);
  // The register path takes x of f32, f16 and bf16 only, whose partials are f32.
  float* partials_f32 = want_partials ? static_cast<float*>(partials) : nullptr;
  const bool fused = norm_backward_in_registers(
      dtypes, centered, rows, cols, chunks, x, weight, mean, rstd, grad_y, grad_x, grad_weight ? partials_f32 : nullptr,
      grad_bias && partials_f32 ? partials_f32 + chunks * cols : nullptr, stream);
  with_norm_types<__half, __nv_bfloat16>(dtypes, "norm backward", [&]<class X, class W, class Y>() {
    using A = float_acc_t<X>;
    A* partial_w = want_partials ? static_cast<A*>(partials) : nullptr;
    A* partial_b = want_partials ? partial_w + chunks * cols : nullptr;
    const X* xt = static_cast<const X*>(x);
    const A* mu = static_cast<const A*>(mean);
    const A* rs = static_cast<const A*>(rstd);
    const Y* gy = static_cast<const Y*>(grad_y);
    if (!fused) {
      launch_rows(norm_grad_x<kWarp, X, W, Y>, norm_grad_x<kThreads, X, W, Y>, rows, cols, stream, centered, rows, cols,
                  xt, static_cast<const W*>(weight), mu, rs, gy, static_cast<X*>(grad_x));
      if (want_partials && chunks > 0) {
        const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(chunks));
        norm_column_partials<X, Y><<<grid, kThreads, 0, stream>>>(
            rows, cols, chunks, xt, mu, rs, gy, grad_weight ? partial_w : nullptr, grad_bias ? partial_b : nullptr);
        GENESIS_CUDA_LAUNCH_CHECK();
      }
    }
    if (want_partials) {
      const dim3 grid(static_cast<unsigned>((cols + kPartialColumns - 1) / kPartialColumns), 2);
      sum_column_partials<A, W><<<grid, kThreads, 0, stream>>>(
          chunks, cols, partial_w, partial_b, static_cast<W*>(grad_weight), static_cast<W*>(grad_bias));
      GENESIS_CUDA_LAUNCH_CHECK();
    }
  });
}

void embedding(DType dtype, DType index_dtype, int64_t n, const void* index, int64_t num, int64_t dim,
               const void* weight, void* out, ::genesis::cuda::KernelFault* fault, int fault_op, cudaStream_t stream) {
  if (n <= 0) return;
  const unsigned grid = grid_size(n * kWarp, kThreads);
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "embedding", {
    using T = scalar_t;
    const int64_t bytes = dim * static_cast<int64_t>(sizeof(T));
    GENESIS_DISPATCH_INDEX(index_dtype, "embedding", {
      const scalar_t* ids = static_cast<const scalar_t*>(index);
      if (packs_of_16(bytes, {weight, out})) {
        embedding_gather<uint4, scalar_t><<<grid, kThreads, 0, stream>>>(
            n, num, bytes / 16, ids, static_cast<const uint4*>(weight), static_cast<uint4*>(out), fault, fault_op);
      } else {
        embedding_gather<T, scalar_t><<<grid, kThreads, 0, stream>>>(n, num, dim, ids, static_cast<const T*>(weight),
                                                                     static_cast<T*>(out), fault, fault_op);
      }
      GENESIS_CUDA_LAUNCH_CHECK();
    });
  });
}

size_t embedding_backward_workspace_bytes(int64_t n, int64_t num) {
  return 4 * workspace_aligned(static_cast<size_t>(n) * sizeof(int64_t)) +
         workspace_aligned(static_cast<size_t>(num + 1) * sizeof(int64_t)) + sort_by_key_temp_bytes(n, num + 1);
}

void embedding_backward(DType dtype, DType index_dtype, int64_t n, const void* index, int64_t num, int64_t dim,
                        const void* grad_out, int64_t padding_idx, void* grad_weight, void* workspace,
                        size_t workspace_bytes, cudaStream_t stream) {
  if (num * dim <= 0) return;
  GENESIS_CHECK(workspace_bytes >= embedding_backward_workspace_bytes(n, num), ValueError,
                "embedding backward: workspace of ", workspace_bytes, " bytes is too small");
  // Stable sort of (index, position): each row's positions become one ascending run.
  char* base = static_cast<char*>(workspace);
  const size_t region = workspace_aligned(static_cast<size_t>(n) * sizeof(int64_t));
  auto* keys = reinterpret_cast<unsigned long long*>(base);
  auto* sorted_keys = reinterpret_cast<unsigned long long*>(base + region);
  auto* positions = reinterpret_cast<int64_t*>(base + 2 * region);
  auto* order = reinterpret_cast<int64_t*>(base + 3 * region);
  auto* start = reinterpret_cast<int64_t*>(base + 4 * region);
  void* sort_temp = base + 4 * region + workspace_aligned(static_cast<size_t>(num + 1) * sizeof(int64_t));
  if (n > 0) {
    GENESIS_DISPATCH_INDEX(index_dtype, "embedding backward", {
      embedding_sort_inputs<scalar_t>
          <<<grid_size(n), kBlockSize, 0, stream>>>(n, num, static_cast<const scalar_t*>(index), keys, positions);
      GENESIS_CUDA_LAUNCH_CHECK();
    });
    sort_by_key(sort_temp, n, num + 1, keys, sorted_keys, positions, order, stream);
  }
  embedding_row_starts<<<grid_size(num + 1), kBlockSize, 0, stream>>>(n, num, sorted_keys, start);
  GENESIS_CUDA_LAUNCH_CHECK();
  const unsigned grid = grid_size(num * kWarp, kThreads);
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "embedding backward", {
    using T = scalar_t;
    constexpr int N = kPack<T>;
    const T* go = static_cast<const T*>(grad_out);
    T* gw = static_cast<T*>(grad_weight);
    if (packs_of_16(dim * static_cast<int64_t>(sizeof(T)), {grad_out, grad_weight})) {
      embedding_scatter<T, N><<<grid, kThreads, 0, stream>>>(num, dim / N, start, order, go, padding_idx, gw);
    } else {
      embedding_scatter<T, 1><<<grid, kThreads, 0, stream>>>(num, dim, start, order, go, padding_idx, gw);
    }
    GENESIS_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace genesis::kernels::cuda
