#pragma once
// The reduction engine shared by kernels/cuda/reduce*.cu. An input is a contiguous
// [outer, extent, inner] block reduced over `extent` into [outer, inner] outputs. An op is a
// small device struct:
//   Acc identity();  Acc step(Acc, In x, int64_t index_in_extent);  Acc combine(Acc earlier, Acc later);
//   void store(int64_t output, Acc);
// Rows (inner == 1) are reduced by groups of 32..512 threads with 16-byte loads when the rows
// are aligned; columns (inner > 1) by threads that each walk one column (or one 16-byte vector
// of columns), so a warp's loads are consecutive in memory; rows of at most 8 elements by one
// thread each, as columns of a [rows, cols, 1] block. When the outputs are too few to
// fill the GPU, the extent is cut into slices reduced by separate blocks into a scratch buffer
// and a second launch combines each output's slices in order. Every combination follows a
// fixed tree that depends only on the shape and the device, so results are bit-reproducible.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.h"
#include "libgenesis/core/error.h"

namespace genesis::kernels::cuda::reduce_engine {

constexpr int kWarp = 32;
constexpr int kMaxRowGroup = 512;
constexpr int kColumnBlock = 256;
// Rows up to this long are folded by one thread each (a warp per row would idle most lanes).
constexpr int64_t kThreadRowLimit = 8;
// Loads each thread keeps in flight before folding them in.
constexpr int kUnroll = 4;
// Partial results of split reductions live in a per-(device, stream) buffer of this size.
constexpr size_t kScratchBytes = size_t{4} << 20;

// The scratch buffer of the current device for `stream` (reduce.cu). Launches on one stream
// are ordered, so the two passes of one reduction and the next reduction never overlap.
void* scratch(cudaStream_t stream);

// Any trivially copyable struct through a warp shuffle, one 32-bit word at a time.
template <class S>
__device__ __forceinline__ S shuffle_down(const S& value, int offset) {
  static_assert(sizeof(S) % 4 == 0, "shuffled accumulators are made of 32-bit words");
  constexpr int kWords = static_cast<int>(sizeof(S) / 4);
  unsigned words[kWords];
  memcpy(words, &value, sizeof(S));
#pragma unroll
  for (int w = 0; w < kWords; ++w) words[w] = __shfl_down_sync(0xffffffffu, words[w], offset);
  S out;
  memcpy(&out, words, sizeof(S));
  return out;
}

// Lane 0 ends with the combination of the 32 lanes (lower lanes on the left).
template <class Op, class Acc>
__device__ __forceinline__ Acc warp_combine(const Op& op, Acc acc) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) acc = op.combine(acc, shuffle_down(acc, offset));
  return acc;
}

template <class T, bool kVector>
inline constexpr int kLanes = kVector ? static_cast<int>(16 / sizeof(T)) : 1;

// N elements loaded at once (one 16-byte load when N > 1).
template <class T, int N>
struct alignas(N == 1 ? alignof(T) : sizeof(T) * N) Pack {
  T v[N];
};

// An op whose results go to the scratch buffer (first pass of a split reduction).
template <class Op>
struct ToPartials : Op {
  using Acc = typename Op::Acc;
  Acc* partials;
  __device__ void store(int64_t i, Acc acc) const { partials[i] = acc; }
};

// An op that folds partial results (second pass of a split reduction).
template <class Op>
struct FromPartials : Op {
  using Acc = typename Op::Acc;
  __device__ Acc step(Acc acc, Acc partial, int64_t) const { return this->combine(acc, partial); }
};

struct RowTasks {
  int64_t tasks;      // rows * slices
  int64_t slices;     // slices per row
  int64_t slice_len;  // columns per slice (a multiple of the vector width)
  int64_t cols;
  int group;  // threads per task: 32..512, a power of two
};

// A group of `group` threads per (row, slice): thread t folds columns t*L.., stepping by
// group*L (L = vector width), issuing up to kUnroll loads before folding them; then warp
// shuffles and, for groups wider than a warp, a shared-memory step.
template <class Op, class In, bool kVector>
__global__ void __launch_bounds__(kMaxRowGroup) reduce_rows_kernel(RowTasks t, const In* in, Op op) {
  using Acc = typename Op::Acc;
  constexpr int L = kLanes<In, kVector>;
  const int group = t.group;
  const int member = static_cast<int>(threadIdx.x) % group;
  const int64_t task = static_cast<int64_t>(blockIdx.x) * (blockDim.x / group) + threadIdx.x / group;
  Acc acc = op.identity();
  if (task < t.tasks) {
    const int64_t begin = (task % t.slices) * t.slice_len;
    const int64_t end = begin + t.slice_len < t.cols ? begin + t.slice_len : t.cols;
    const In* row = in + (task / t.slices) * t.cols;
    const int64_t stride = static_cast<int64_t>(group) * L;
    for (int64_t c = begin + static_cast<int64_t>(member) * L; c < end; c += kUnroll * stride) {
      Pack<In, L> packs[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (c + u * stride < end) packs[u] = *reinterpret_cast<const Pack<In, L>*>(row + c + u * stride);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int k = 0; k < L; ++k)
          if (c + u * stride < end) acc = op.step(acc, packs[u].v[k], c + u * stride + k);
    }
  }
  acc = warp_combine(op, acc);
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  if (group == kWarp) {
    if (lane == 0 && task < t.tasks) op.store(task, acc);
    return;
  }
  __shared__ Acc warp_results[kMaxRowGroup / kWarp];
  if (lane == 0) warp_results[threadIdx.x / kWarp] = acc;
  __syncthreads();
  if (member < kWarp) {
    const int warps = group / kWarp;
    const int first = static_cast<int>(threadIdx.x) / kWarp;
    acc = member < warps ? warp_results[first + member] : op.identity();
    acc = warp_combine(op, acc);
    if (member == 0 && task < t.tasks) op.store(task, acc);
  }
}

struct ColumnTasks {
  int64_t extent;
  int64_t inner;
  int64_t columns;    // outer * inner
  int64_t split_len;  // extent rows per block along blockIdx.y
};

// Thread (x, y) of a block folds the column (or L adjacent columns) blockIdx.x * blockDim.x + x
// over the rows y, y + blockDim.y, ... of its split [blockIdx.y * split_len, ...); consecutive x
// read consecutive addresses. The blockDim.y partials of a column are combined in shared memory
// in order of y; output index split * columns + column.
template <class Op, class In, bool kVector>
__global__ void __launch_bounds__(kColumnBlock) reduce_columns_kernel(ColumnTasks t, const In* in, Op op) {
  using Acc = typename Op::Acc;
  constexpr int L = kLanes<In, kVector>;
  const int64_t column = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * L;
  const bool valid = column < t.columns;
  Acc acc[L];
#pragma unroll
  for (int k = 0; k < L; ++k) acc[k] = op.identity();
  if (valid) {
    const In* base = in + (column / t.inner) * t.extent * t.inner + column % t.inner;
    const int64_t split_end = (static_cast<int64_t>(blockIdx.y) + 1) * t.split_len;
    const int64_t end = split_end < t.extent ? split_end : t.extent;
    const int64_t step = blockDim.y;
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * t.split_len + threadIdx.y; r < end; r += kUnroll * step) {
      Pack<In, L> packs[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (r + u * step < end) packs[u] = *reinterpret_cast<const Pack<In, L>*>(base + (r + u * step) * t.inner);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int k = 0; k < L; ++k)
          if (r + u * step < end) acc[k] = op.step(acc[k], packs[u].v[k], r + u * step);
    }
  }
  __shared__ Acc tile[kColumnBlock];
  const unsigned slot = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
  for (int k = 0; k < L; ++k) {
    if (blockDim.y > 1) {
      tile[slot] = acc[k];
      __syncthreads();
      if (threadIdx.y == 0)
        for (unsigned y = 1; y < blockDim.y; ++y) acc[k] = op.combine(acc[k], tile[y * blockDim.x + threadIdx.x]);
      __syncthreads();
    }
    if (threadIdx.y == 0 && valid) op.store(static_cast<int64_t>(blockIdx.y) * t.columns + column + k, acc[k]);
  }
}

// Second pass of a split column reduction. Blocks of 32 columns x kSplitLanes: lane y folds
// partials[s * columns + c] for s = y, y + kSplitLanes, ... (a short chain of loads each), then
// the lanes' results are combined in order of y.
constexpr int kSplitLanes = 8;
template <class Op, class Acc>
__global__ void __launch_bounds__(kWarp* kSplitLanes)
    combine_splits_kernel(int64_t columns, int64_t splits, const Acc* partials, Op op) {
  __shared__ Acc lanes[kSplitLanes][kWarp];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWarp + threadIdx.x;
  Acc acc = op.identity();
  if (c < columns) {
    for (int64_t s = threadIdx.y; s < splits; s += kSplitLanes) acc = op.combine(acc, partials[s * columns + c]);
  }
  lanes[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < columns) {
    for (int y = 1; y < kSplitLanes; ++y) acc = op.combine(acc, lanes[y][threadIdx.x]);
    op.store(c, acc);
  }
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks of `threads` threads of `kernel` resident on the whole GPU at once, from the occupancy
// calculator (registers differ by op and dtype), looked up once per kernel and device.
template <class Kernel>
int64_t resident_blocks(Kernel kernel, int threads) {
  thread_local int cached_device = -1;
  thread_local int64_t cached = 0;
  int device = 0;
  GENESIS_CUDA_CHECK(cudaGetDevice(&device));
  if (device != cached_device) {
    int per_multiprocessor = 0;
    GENESIS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, threads, 0));
    cached = std::max(1, per_multiprocessor) * static_cast<int64_t>(multiprocessor_count());
    cached_device = device;
  }
  return cached;
}

inline int64_t pow2_at_least(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

template <bool kVector, class Op, class In>
void launch_rows_pass(RowTasks t, const In* in, const Op& op, cudaStream_t stream) {
  // About four loads (of 16 bytes, or of 4 elements' worth of scalars) per thread.
  const int64_t per_load = kVector ? kLanes<In, true> : 4;
  t.group = static_cast<int>(std::clamp<int64_t>(pow2_at_least(ceil_div(std::min(t.slice_len, t.cols), 4 * per_load)),
                                                 kWarp, kMaxRowGroup));
  const int threads = std::max(t.group, 256);
  const auto blocks = static_cast<unsigned>(ceil_div(t.tasks, threads / t.group));
  reduce_rows_kernel<Op, In, kVector><<<blocks, threads, 0, stream>>>(t, in, op);
  GENESIS_CUDA_LAUNCH_CHECK();
}

template <class T>
bool aligned16(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// rows x cols, contiguous, reduced along cols.
template <class Op, class T>
void reduce_rows(int64_t rows, int64_t cols, const T* in, const Op& op, cudaStream_t stream) {
  using Acc = typename Op::Acc;
  constexpr int64_t L = kLanes<T, true>;
  const bool vector = L > 1 && aligned16(in) && cols % L == 0;
  const int64_t lanes = vector ? L : 1;
  // One wave of the first pass's blocks of 512 threads; a slice is at least 16 loads per thread.
  const int64_t wave = vector ? resident_blocks(reduce_rows_kernel<ToPartials<Op>, T, true>, kMaxRowGroup)
                              : resident_blocks(reduce_rows_kernel<ToPartials<Op>, T, false>, kMaxRowGroup);
  const int64_t min_slice = 16 * kMaxRowGroup * lanes;
  int64_t slices = 1;
  if (rows < wave && cols > min_slice) {
    slices = std::min(ceil_div(wave, rows), ceil_div(cols, min_slice));
    slices = std::max<int64_t>(1, std::min<int64_t>(slices, static_cast<int64_t>(kScratchBytes / sizeof(Acc)) / rows));
  }
  int64_t slice_len = cols;
  if (slices > 1) {
    slice_len = ceil_div(ceil_div(cols, slices), lanes) * lanes;
    slices = ceil_div(cols, slice_len);
  }
  auto first_pass = [&](const RowTasks& t, const auto& pass_op) {
    if (vector) launch_rows_pass<true>(t, in, pass_op, stream);
    else launch_rows_pass<false>(t, in, pass_op, stream);
  };
  if (slices == 1) {
    first_pass(RowTasks{rows, 1, cols, cols, 0}, op);
    return;
  }
  auto* partials = static_cast<Acc*>(scratch(stream));
  first_pass(RowTasks{rows * slices, slices, slice_len, cols, 0}, ToPartials<Op>{op, partials});
  launch_rows_pass<false>(RowTasks{rows, 1, slices, slices, 0}, partials, FromPartials<Op>{op}, stream);
}

// [outer, extent, inner] reduced along extent: one thread per output column (inner > 1), or
// per short row (inner == 1, extent <= kThreadRowLimit).
template <class Op, class T>
void reduce_columns(int64_t outer, int64_t extent, int64_t inner, const T* in, const Op& op, cudaStream_t stream) {
  using Acc = typename Op::Acc;
  constexpr int64_t L = kLanes<T, true>;
  const bool vector = L > 1 && aligned16(in) && inner % L == 0;
  const int64_t columns = outer * inner;
  const int64_t packed_columns = columns / (vector ? L : 1);
  const int64_t wave = vector ? resident_blocks(reduce_columns_kernel<ToPartials<Op>, T, true>, kColumnBlock)
                              : resident_blocks(reduce_columns_kernel<ToPartials<Op>, T, false>, kColumnBlock);
  // Taller blocks when the columns alone leave the GPU idle, while each thread still folds 8+ rows.
  int64_t height = 1;
  while (height < 8 && ceil_div(packed_columns, kColumnBlock / height) < wave && extent >= 16 * height) height *= 2;
  const int64_t width = kColumnBlock / height;
  const int64_t column_blocks = ceil_div(packed_columns, width);
  int64_t splits = 1;
  if (column_blocks < wave) {
    splits = std::min(ceil_div(wave, column_blocks), ceil_div(extent, 8 * height));
    const int64_t fitting = static_cast<int64_t>(kScratchBytes / sizeof(Acc)) / columns;
    splits = std::max<int64_t>(1, std::min({splits, fitting, int64_t{65535}}));
  }
  const int64_t split_len = ceil_div(extent, splits);
  splits = ceil_div(extent, split_len);
  const ColumnTasks t{extent, inner, columns, split_len};
  const dim3 grid(static_cast<unsigned>(column_blocks), static_cast<unsigned>(splits));
  const dim3 block(static_cast<unsigned>(width), static_cast<unsigned>(height));
  auto launch = [&](const auto& pass_op) {
    using PassOp = std::decay_t<decltype(pass_op)>;
    if (vector) reduce_columns_kernel<PassOp, T, true><<<grid, block, 0, stream>>>(t, in, pass_op);
    else reduce_columns_kernel<PassOp, T, false><<<grid, block, 0, stream>>>(t, in, pass_op);
    GENESIS_CUDA_LAUNCH_CHECK();
  };
  if (splits == 1) {
    launch(op);
    return;
  }
  auto* partials = static_cast<Acc*>(scratch(stream));
  launch(ToPartials<Op>{op, partials});
  combine_splits_kernel<Op, Acc><<<static_cast<unsigned>(ceil_div(columns, kWarp)), dim3(kWarp, kSplitLanes), 0, stream>>>(
      columns, splits, partials, op);
  GENESIS_CUDA_LAUNCH_CHECK();
}

// Any ReduceShape: rows when inner == 1 (full reductions are one row), columns otherwise.
template <class Op, class T>
void reduce(ReduceShape s, const T* in, const Op& op, cudaStream_t stream) {
  const int64_t outputs = s.outer * s.inner;
  if (outputs == 0) return;
  if (s.extent == 0) {
    reduce_rows(outputs, int64_t{0}, in, op, stream);
  } else if (s.inner == 1 && s.extent > kThreadRowLimit) {
    reduce_rows(s.outer, s.extent, in, op, stream);
  } else {
    reduce_columns(s.outer, s.extent, s.inner, in, op, stream);
  }
}

}  // namespace genesis::kernels::cuda::reduce_engine
