// Register-row kernels of the softmax family and the norms: a group of kGroup threads (a warp,
// or the whole block) holds one row of nvec 16-byte packs in registers, pack j in thread
// j % kGroup, slot j / kGroup. Inputs are read once and the output written once; the row
// statistics are shuffle trees in f32, so every run gives the same bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <type_traits>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/nn_rows.cuh"
#include "kernels/cuda/packs.cuh"

namespace genesis::kernels::cuda {

namespace {

using rows::kThreads;

// Slots fill in order, so the first slot past the row ends it.
#define GENESIS_FOR_EACH_SLOT(k, j) \
  _Pragma("unroll") for (int k = 0; k < kSlots; ++k) if (const int j = lane + k * kGroup; j < nvec)

// N elements of T at p in one access of up to 16 bytes, or in 16-byte ones (the f32 weights of
// a pack of 16-bit x); p is aligned to the smaller of 16 bytes and the N elements' size.
template <int N, class T>
__device__ __forceinline__ Pack<T, N> load_elements(const T* p) {
  constexpr int kStep = N < kPack<T> ? N : kPack<T>;
  if constexpr (kStep == N) {
    return load_pack<N>(p);
  } else {
    Pack<T, N> pack;
#pragma unroll
    for (int s = 0; s < N; s += kStep) {
      const Pack<T, kStep> part = load_pack<kStep>(p + s);
#pragma unroll
      for (int i = 0; i < kStep; ++i) pack.v[s + i] = part.v[i];
    }
    return pack;
  }
}
template <int N, class T>
__device__ __forceinline__ void store_elements(T* p, const Pack<T, N>& pack) {
  constexpr int kStep = N < kPack<T> ? N : kPack<T>;
  if constexpr (kStep == N) {
    store_pack<N>(p, pack);
  } else {
#pragma unroll
    for (int s = 0; s < N; s += kStep) {
      Pack<T, kStep> part;
#pragma unroll
      for (int i = 0; i < kStep; ++i) part.v[i] = pack.v[s + i];
      store_pack<kStep>(p + s, part);
    }
  }
}

// Pack j of a row holds its elements j * N ... j * N + N - 1.
template <int kGroup, int kSlots, int N, class T>
__device__ __forceinline__ void load_row(const T* row, int nvec, int lane, Pack<T, N> (&data)[kSlots]) {
  GENESIS_FOR_EACH_SLOT(k, j) data[k] = load_elements<N>(row + j * N);
}

// What a softmax-family row kernel writes: the probabilities, their logarithms, or only the
// row's log-sum-exp.
enum class RowOutput { probs, log_probs, log_sum_exp };

template <RowOutput kOutput, int kGroup, int kSlots, class T>
__global__ void __launch_bounds__(kThreads) softmax_kernel(int64_t rows, int nvec, const T* x, T* y) {
  constexpr int N = kPack<T>;
  __shared__ float shared[kThreads / kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const int64_t cols = static_cast<int64_t>(nvec) * N;
  GENESIS_FOR_EACH_GROUP_ROW(r, rows, kGroup, kThreads) {
    Pack16<T> data[kSlots];
    load_row<kGroup>(x + r * cols, nvec, lane, data);
    float m = -std::numeric_limits<float>::infinity();
    GENESIS_FOR_EACH_SLOT(k, j) {
      for (int i = 0; i < N; ++i) m = NanMax{}(m, to_acc<float>(data[k].v[i]));
    }
    m = group_reduce<kGroup>(m, shared, NanMax{});
    float total = 0;
    GENESIS_FOR_EACH_SLOT(k, j) {
      for (int i = 0; i < N; ++i) total += exp_for<T>(to_acc<float>(data[k].v[i]) - m);
    }
    total = group_reduce<kGroup>(total, shared, Sum{});
    const float log_total = std::log(total), inv = 1.0f / total;
    if constexpr (kOutput == RowOutput::log_sum_exp) {
      // An infinite (or NaN) max is the answer itself: a row of -inf, or one holding +inf.
      if (lane == 0) y[r] = from_acc<T>(std::isfinite(m) ? m + log_total : m);
    } else {
      Pack16<T>* out = reinterpret_cast<Pack16<T>*>(y + r * cols);
      GENESIS_FOR_EACH_SLOT(k, j) {
        Pack16<T> result;
        for (int i = 0; i < N; ++i) {
          const float shifted = to_acc<float>(data[k].v[i]) - m;
          result.v[i] = from_acc<T>(kOutput == RowOutput::log_probs ? shifted - log_total : exp_for<T>(shifted) * inv);
        }
        store_pack(out + j, result);
      }
    }
  }
}

template <int kGroup, int kSlots, class T>
__global__ void __launch_bounds__(kThreads)
    softmax_backward_kernel(bool log, int64_t rows, int nvec, const T* y, const T* gy, T* gx) {
  constexpr int N = kPack<T>;
  __shared__ float shared[kThreads / kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const int64_t cols = static_cast<int64_t>(nvec) * N;
  GENESIS_FOR_EACH_GROUP_ROW(r, rows, kGroup, kThreads) {
    Pack16<T> ys[kSlots], gs[kSlots];
    load_row<kGroup>(y + r * cols, nvec, lane, ys);
    load_row<kGroup>(gy + r * cols, nvec, lane, gs);
    float dot = 0;
    GENESIS_FOR_EACH_SLOT(k, j) {
      for (int i = 0; i < N; ++i) {
        const float g = to_acc<float>(gs[k].v[i]);
        dot += log ? g : g * to_acc<float>(ys[k].v[i]);
      }
    }
    dot = group_reduce<kGroup>(dot, shared, Sum{});
    Pack16<T>* out = reinterpret_cast<Pack16<T>*>(gx + r * cols);
    GENESIS_FOR_EACH_SLOT(k, j) {
      Pack16<T> result;
      for (int i = 0; i < N; ++i) {
        const float g = to_acc<float>(gs[k].v[i]), v = to_acc<float>(ys[k].v[i]);
        result.v[i] = from_acc<T>(log ? g - exp_for<T>(v) * dot : v * (g - dot));
      }
      store_pack(out + j, result);
    }
  }
}

// Mean (when centered) and the sum of squared deviations both from the registers. A pack is 16
// bytes of x (X); the weights (W) and y (Y) of its columns are read and written as they are.
template <int kGroup, int kSlots, class X, class W, class Y>
__global__ void __launch_bounds__(kThreads) norm_kernel(bool centered, int64_t rows, int nvec, const X* x, const W* w,
                                                        const W* b, float eps, Y* y, float* mean, float* rstd) {
  constexpr int N = kPack<X>;
  __shared__ float shared[kThreads / kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const int64_t cols = static_cast<int64_t>(nvec) * N;
  const float n = static_cast<float>(cols);
  GENESIS_FOR_EACH_GROUP_ROW(r, rows, kGroup, kThreads) {
    Pack16<X> data[kSlots];
    load_row<kGroup>(x + r * cols, nvec, lane, data);
    float mu = 0;
    if (centered) {
      GENESIS_FOR_EACH_SLOT(k, j) {
        for (int i = 0; i < N; ++i) mu += to_acc<float>(data[k].v[i]);
      }
      mu = group_reduce<kGroup>(mu, shared, Sum{}) / n;
    }
    float squares = 0;
    GENESIS_FOR_EACH_SLOT(k, j) {
      for (int i = 0; i < N; ++i) {
        const float d = to_acc<float>(data[k].v[i]) - mu;
        squares += d * d;
      }
    }
    squares = group_reduce<kGroup>(squares, shared, Sum{});
    const float rs = 1.0f / std::sqrt(squares / n + eps);
    Y* out = y + r * cols;
    GENESIS_FOR_EACH_SLOT(k, j) {
      Pack<W, N> wk, bk;
      Pack<Y, N> result;
      if (w) wk = load_elements<N>(w + j * N);
      if (b) bk = load_elements<N>(b + j * N);
      for (int i = 0; i < N; ++i) {
        float v = (to_acc<float>(data[k].v[i]) - mu) * rs;
        if (w) v *= to_acc<float>(wk.v[i]);
        if (b) v += to_acc<float>(bk.v[i]);
        result.v[i] = from_acc<Y>(v);
      }
      store_elements<N>(out + j * N, result);
    }
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// Column sums of a warp-per-row backward kept in shared memory rather than registers: one
// buffer of 2 x cols floats per warp, laid out so that lane l's float4 of slot k sits next to
// lane l + 1's (conflict-free 16-byte accesses). Registers would hold 2 x cols / 32 floats per
// thread, which spills the 16-bit rows; a block needs 8 warps x 2 x cols x 4 bytes of shared
// memory, so two blocks per multiprocessor fit up to this many columns.
constexpr int64_t kSharedColumnSumsLimit = 1536;
// Blocks per multiprocessor of the backward with shared column sums, where their shared memory
// fits (up to 928 columns on the H100): three measured faster than two or four (768 columns,
// see docs/benchmarks.md).
constexpr int kSharedSumsBlocks = 3;

// grad_x row by row; each thread also sums g * xhat and g of its own columns over the block's
// rows (in registers, or for kSharedSums in its warp's shared buffer), then the block's column
// partials go to row blockIdx.x of partial_w / partial_b (the warps of a warp-per-row block add
// theirs in warp order). At two blocks per multiprocessor, where the registers allow, the next
// row's x and grad_y are loaded before the current row is reduced. A pack is 16 bytes of x (X);
// grad_y (Y, the forward's output type), grad_x (X) and the weights (W) of its columns as they are.
template <int kGroup, int kSlots, bool kSharedSums, int kMinBlocks, class X, class W, class Y>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    norm_backward_kernel(bool centered, int64_t rows, int nvec, const X* x, const W* w, const float* mean,
                         const float* rstd, const Y* gy, X* gx, float* partial_w, float* partial_b) {
  constexpr int N = kPack<X>, kQuads = N / 4;
  constexpr int kRegisterSums = kSharedSums ? 1 : kSlots;
  // Registers for two rows of x and grad_y packs and their f32 values in use: only the rows
  // whose column sums are in shared memory, at two blocks per multiprocessor, leave room for that.
  constexpr bool kPrefetch = kMinBlocks == 2 && kSharedSums && kSlots * 4 * N <= 96;
  static_assert(N % 4 == 0, "packs of whole float4 column sums");
  __shared__ float shared[kThreads / kWarp];
  extern __shared__ float4 column_sums[];
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const int64_t cols = static_cast<int64_t>(nvec) * N;
  const float n = static_cast<float>(cols);
  const bool sums = partial_w || partial_b;
  // This warp's buffer: the g * xhat sums, then the g sums, each as kQuads x nvec float4.
  float4* warp_sums = column_sums + (threadIdx.x / kWarp) * 2 * kQuads * nvec;
  float acc_w[kRegisterSums][N] = {}, acc_b[kRegisterSums][N] = {};
  if constexpr (kSharedSums) {
    GENESIS_FOR_EACH_SLOT(k, j) {
      for (int q = 0; q < 2 * kQuads; ++q) warp_sums[q * nvec + j] = make_float4(0, 0, 0, 0);
    }
  }
  const int64_t first = static_cast<int64_t>(blockIdx.x) * (kThreads / kGroup) + threadIdx.x / kGroup;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * (kThreads / kGroup);
  Pack16<X> next_xs[kSlots];
  Pack<Y, N> next_gs[kSlots];
  float next_mu = 0, next_rs = 0;
  auto load = [&](int64_t r, Pack16<X>(&xd)[kSlots], Pack<Y, N>(&gd)[kSlots], float& mu, float& rs) {
    load_row<kGroup>(x + r * cols, nvec, lane, xd);
    load_row<kGroup>(gy + r * cols, nvec, lane, gd);
    mu = mean[r];
    rs = rstd[r];
  };
  if (kPrefetch && first < rows) load(first, next_xs, next_gs, next_mu, next_rs);
  for (int64_t r = first; r < rows; r += stride) {
    Pack16<X> xs[kSlots];
    Pack<Y, N> gs[kSlots];
    float mu, rs;
    if constexpr (kPrefetch) {
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        xs[k] = next_xs[k];
        gs[k] = next_gs[k];
      }
      mu = next_mu;
      rs = next_rs;
      if (r + stride < rows) load(r + stride, next_xs, next_gs, next_mu, next_rs);
    } else {
      load(r, xs, gs, mu, rs);
    }
    float sum_dxhat = 0, sum_dxhat_xhat = 0;
    GENESIS_FOR_EACH_SLOT(k, j) {
      Pack<W, N> wk;
      if (w) wk = load_elements<N>(w + j * N);
      float gxhat[N], g[N];
      for (int i = 0; i < N; ++i) {
        const float xhat = (to_acc<float>(xs[k].v[i]) - mu) * rs;
        g[i] = to_acc<float>(gs[k].v[i]);
        const float dxhat = w ? g[i] * to_acc<float>(wk.v[i]) : g[i];
        sum_dxhat += dxhat;
        sum_dxhat_xhat += dxhat * xhat;
        gxhat[i] = g[i] * xhat;
      }
      if constexpr (kSharedSums) {
        if (sums) {
          for (int q = 0; q < kQuads; ++q) {
            float4& sw = warp_sums[q * nvec + j];
            float4& sb = warp_sums[(kQuads + q) * nvec + j];
            sw = make_float4(sw.x + gxhat[4 * q], sw.y + gxhat[4 * q + 1], sw.z + gxhat[4 * q + 2],
                             sw.w + gxhat[4 * q + 3]);
            sb = make_float4(sb.x + g[4 * q], sb.y + g[4 * q + 1], sb.z + g[4 * q + 2], sb.w + g[4 * q + 3]);
          }
        }
      } else {
        for (int i = 0; i < N; ++i) {
          acc_w[k][i] += gxhat[i];
          acc_b[k][i] += g[i];
        }
      }
    }
    sum_dxhat = group_reduce<kGroup>(sum_dxhat, shared, Sum{});
    sum_dxhat_xhat = group_reduce<kGroup>(sum_dxhat_xhat, shared, Sum{});
    const float mean_dxhat = centered ? sum_dxhat / n : 0.0f, mean_dxhat_xhat = sum_dxhat_xhat / n;
    Pack16<X>* out = reinterpret_cast<Pack16<X>*>(gx + r * cols);
    GENESIS_FOR_EACH_SLOT(k, j) {
      Pack<W, N> wk;
      Pack16<X> result;
      if (w) wk = load_elements<N>(w + j * N);
      for (int i = 0; i < N; ++i) {
        const float xhat = (to_acc<float>(xs[k].v[i]) - mu) * rs, g = to_acc<float>(gs[k].v[i]);
        const float dxhat = w ? g * to_acc<float>(wk.v[i]) : g;
        result.v[i] = from_acc<X>(rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
      }
      store_pack(out + j, result);
    }
  }
  if (!sums) return;
  float* row_w = partial_w ? partial_w + blockIdx.x * cols : nullptr;
  float* row_b = partial_b ? partial_b + blockIdx.x * cols : nullptr;
  float* flat_sums = reinterpret_cast<float*>(column_sums);
  if constexpr (kSharedSums) {
    __syncthreads();
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
      const int64_t i = c % N, at = ((i / 4) * nvec + c / N) * 4 + i % 4;
      float total_w = 0, total_b = 0;
      for (int warp = 0; warp < kThreads / kWarp; ++warp) {
        total_w += flat_sums[warp * 2 * cols + at];
        total_b += flat_sums[warp * 2 * cols + cols + at];
      }
      if (row_w) row_w[c] = total_w;
      if (row_b) row_b[c] = total_b;
    }
  } else if constexpr (kGroup == kWarp) {
    const int warp = static_cast<int>(threadIdx.x) / kWarp;
    for (int turn = 0; turn < kThreads / kWarp; ++turn) {
      if (warp == turn) {
        GENESIS_FOR_EACH_SLOT(k, j) {
          for (int i = 0; i < N; ++i) {
            const int64_t c = static_cast<int64_t>(j) * N + i;
            flat_sums[c] = turn == 0 ? acc_w[k][i] : flat_sums[c] + acc_w[k][i];
            flat_sums[cols + c] = turn == 0 ? acc_b[k][i] : flat_sums[cols + c] + acc_b[k][i];
          }
        }
      }
      __syncthreads();
    }
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
      if (row_w) row_w[c] = flat_sums[c];
      if (row_b) row_b[c] = flat_sums[cols + c];
    }
  } else {
    GENESIS_FOR_EACH_SLOT(k, j) {
      for (int i = 0; i < N; ++i) {
        const int64_t c = static_cast<int64_t>(j) * N + i;
        if (row_w) row_w[c] = acc_w[k][i];
        if (row_b) row_b[c] = acc_b[k][i];
      }
    }
  }
}

#undef GENESIS_FOR_EACH_SLOT

// The register rows, smallest first: threads per row and packs per thread.
struct RegisterRow {
  int group, slots;
};
constexpr RegisterRow kRegisterRows[] = {
    {kWarp, 2},    {kWarp, 3},    {kWarp, 4},    {kWarp, 6}, {kWarp, 8},  // a warp per row
    {kThreads, 2}, {kThreads, 4}, {kThreads, 8},                          // a block per row
};

// Calls launch(group, slots), as integral constants, with the smallest register row (from
// kRegisterRows[kRow] on) that holds nvec packs; false when none does.
template <size_t kRow = 0, class Launch>
bool with_register_row(int64_t nvec, Launch&& launch) {
  if constexpr (kRow == std::size(kRegisterRows)) {
    return false;
  } else {
    constexpr RegisterRow row = kRegisterRows[kRow];
    if (nvec <= int64_t{row.group} * row.slots) {
      launch(std::integral_constant<int, row.group>{}, std::integral_constant<int, row.slots>{});
      GENESIS_CUDA_LAUNCH_CHECK();
      return true;
    }
    return with_register_row<kRow + 1>(nvec, launch);
  }
}

// Rows of whole 16-byte packs at 16-byte aligned addresses (null pointers are absent operands).
template <class T>
bool packable(int64_t cols, std::initializer_list<const void*> pointers) {
  if (cols <= 0 || cols % kPack<T> != 0) return false;
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

#define GENESIS_CUDA_DISPATCH_F32_HALF(DTYPE, ...)       \
  switch (DTYPE) {                                       \
    GENESIS_DTYPE_CASE(f32, float, __VA_ARGS__)          \
    GENESIS_DTYPE_CASE(f16, __half, __VA_ARGS__)         \
    GENESIS_DTYPE_CASE(bf16, __nv_bfloat16, __VA_ARGS__) \
    default:                                             \
      break;                                             \
  }

// Blocks for one row per group of `group` threads: blocks past the resident ones start as
// others finish, which evens out the tail better than a grid-stride loop.
unsigned row_grid(int64_t rows, int group) {
  const int64_t groups_per_block = kThreads / group;
  const int64_t blocks = (rows + groups_per_block - 1) / groups_per_block;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 20));
}

// Launches softmax_kernel; the row outputs (y for log_sum_exp) need not be aligned.
template <RowOutput kOutput>
bool softmax_rows(DType dtype, int64_t rows, int64_t dim, const void* x, void* y, cudaStream_t stream) {
  bool launched = false;
  GENESIS_CUDA_DISPATCH_F32_HALF(dtype, {
    using T = scalar_t;
    if (rows <= 0 || !packable<T>(dim, {x, kOutput == RowOutput::log_sum_exp ? nullptr : y})) break;
    const int64_t nvec = dim / kPack<T>;
    launched = with_register_row(nvec, [&](auto group, auto slots) {
      constexpr int kGroup = decltype(group)::value, kSlots = decltype(slots)::value;
      softmax_kernel<kOutput, kGroup, kSlots, T><<<row_grid(rows, kGroup), kThreads, 0, stream>>>(
          rows, static_cast<int>(nvec), static_cast<const T*>(x), static_cast<T*>(y));
    });
  });
  return launched;
}

}  // namespace

bool softmax_in_registers(DType dtype, bool log, int64_t rows, int64_t dim, const void* x, void* y,
                          cudaStream_t stream) {
  return log ? softmax_rows<RowOutput::log_probs>(dtype, rows, dim, x, y, stream)
             : softmax_rows<RowOutput::probs>(dtype, rows, dim, x, y, stream);
}

bool logsumexp_in_registers(DType dtype, int64_t rows, int64_t cols, const void* x, void* out, cudaStream_t stream) {
  return softmax_rows<RowOutput::log_sum_exp>(dtype, rows, cols, x, out, stream);
}

bool softmax_backward_in_registers(DType dtype, bool log, int64_t rows, int64_t dim, const void* y, const void* grad_y,
                                   void* grad_x, cudaStream_t stream) {
  bool launched = false;
  GENESIS_CUDA_DISPATCH_F32_HALF(dtype, {
    using T = scalar_t;
    if (rows <= 0 || !packable<T>(dim, {y, grad_y, grad_x})) break;
    const int64_t nvec = dim / kPack<T>;
    launched = with_register_row(nvec, [&](auto group, auto slots) {
      constexpr int kGroup = decltype(group)::value, kSlots = decltype(slots)::value;
      softmax_backward_kernel<kGroup, kSlots, T>
          <<<row_grid(rows, kGroup), kThreads, 0, stream>>>(log, rows, static_cast<int>(nvec), static_cast<const T*>(y),
                                                            static_cast<const T*>(grad_y), static_cast<T*>(grad_x));
    });
  });
  return launched;
}

bool norm_rows_in_registers(NormDTypes dtypes, bool centered, int64_t rows, int64_t cols, const void* x,
                            const void* weight, const void* bias, double eps, void* y, void* mean, void* rstd,
                            cudaStream_t stream) {
  bool launched = false;
  with_norm_types<__half, __nv_bfloat16>(dtypes, "norm", [&]<class X, class W, class Y>() {
    if constexpr (!std::is_same_v<X, double>) {
      if (rows <= 0 || !packable<X>(cols, {x, weight, bias, y})) return;
      const int64_t nvec = cols / kPack<X>;
      launched = with_register_row(nvec, [&](auto group, auto slots) {
        constexpr int kGroup = decltype(group)::value, kSlots = decltype(slots)::value;
        norm_kernel<kGroup, kSlots, X, W, Y><<<row_grid(rows, kGroup), kThreads, 0, stream>>>(
            centered, rows, static_cast<int>(nvec), static_cast<const X*>(x), static_cast<const W*>(weight),
            static_cast<const W*>(bias), static_cast<float>(eps), static_cast<Y*>(y), static_cast<float*>(mean),
            static_cast<float*>(rstd));
      });
    }
  });
  return launched;
}

int norm_backward_blocks_per_sm(DType x_dtype, int64_t cols) {
  bool shared_sums = false;
  GENESIS_CUDA_DISPATCH_F32_HALF(x_dtype, {
    const int64_t nvec = (cols + kPack<scalar_t> - 1) / kPack<scalar_t>;
    shared_sums = nvec <= 8 * kWarp && cols <= kSharedColumnSumsLimit;
  });
  if (!shared_sums) return 2;
  // The column sums plus the 1 KiB the runtime reserves per block.
  const int64_t per_block = kThreads / kWarp * 2 * cols * static_cast<int64_t>(sizeof(float)) + 1024;
  return static_cast<int>(std::clamp<int64_t>(shared_memory_per_multiprocessor() / per_block, 1, kSharedSumsBlocks));
}

bool norm_backward_in_registers(NormDTypes dtypes, bool centered, int64_t rows, int64_t cols, int64_t chunks,
                                const void* x, const void* weight, const void* mean, const void* rstd,
                                const void* grad_y, void* grad_x, float* partial_w, float* partial_b,
                                cudaStream_t stream) {
  bool launched = false;
  with_norm_types<__half, __nv_bfloat16>(dtypes, "norm backward", [&]<class X, class W, class Y>() {
    if constexpr (!std::is_same_v<X, double>) {
      if (rows <= 0 || chunks <= 0 || !packable<X>(cols, {x, weight, grad_y, grad_x})) return;
      const int64_t nvec = cols / kPack<X>;
      launched = with_register_row(nvec, [&](auto group, auto slots) {
        constexpr int kGroup = decltype(group)::value, kSlots = decltype(slots)::value;
        auto run = [&](auto kernel, size_t column_bytes) {
          if (column_bytes > 48 * 1024) {
            GENESIS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    static_cast<int>(column_bytes)));
          }
          kernel<<<static_cast<unsigned>(chunks), kThreads, column_bytes, stream>>>(
              centered, rows, static_cast<int>(nvec), static_cast<const X*>(x), static_cast<const W*>(weight),
              static_cast<const float*>(mean), static_cast<const float*>(rstd), static_cast<const Y*>(grad_y),
              static_cast<X*>(grad_x), partial_w, partial_b);
        };
        const size_t column_bytes = 2 * static_cast<size_t>(cols) * sizeof(float);
        if constexpr (kGroup == kWarp) {
          if (cols <= kSharedColumnSumsLimit) {
            const size_t bytes = kThreads / kWarp * column_bytes;
            if (norm_backward_blocks_per_sm(dtypes.x, cols) == kSharedSumsBlocks)
              run(norm_backward_kernel<kGroup, kSlots, true, kSharedSumsBlocks, X, W, Y>, bytes);
            else
              run(norm_backward_kernel<kGroup, kSlots, true, 2, X, W, Y>, bytes);
          } else {
            run(norm_backward_kernel<kGroup, kSlots, false, 2, X, W, Y>, column_bytes);
          }
        } else {
          run(norm_backward_kernel<kGroup, kSlots, false, 2, X, W, Y>, 0);
        }
      });
    }
  });
  return launched;
}

}  // namespace genesis::kernels::cuda
