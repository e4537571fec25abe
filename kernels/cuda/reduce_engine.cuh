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
// fill the GPU, the extent is cut into slices reduced by separate blocks into a scratch buffer;
// the slices of a row are then folded by the row's last block to finish (counted with an
// atomic arrival counter, in the same launch), those of columns by a second launch. Every
// combination follows a fixed tree that depends only on the shape and the device, so results
// are bit-reproducible.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/packs.cuh"
#include "kernels/cuda/reduce.h"
#include "libgenesis/core/error.h"

namespace genesis::kernels::cuda::reduce_engine {

constexpr int kMaxRowGroup = 512;
constexpr int kColumnBlock = 256;
// Rows up to this long are folded by one thread each (a warp per row would idle most lanes).
constexpr int64_t kThreadRowLimit = 8;
// Loads each thread keeps in flight before folding them in.
constexpr int kUnroll = 4;
// Partial results of split reductions live in a per-(device, stream) buffer of this size,
// followed by one arrival counter per row of a split row reduction (at most kMaxSplitRows).
constexpr size_t kScratchBytes = size_t{4} << 20;
constexpr int64_t kMaxSplitRows = 4096;

struct Scratch {
  void* partials;      // kScratchBytes
  unsigned* arrivals;  // kMaxSplitRows counters, zero between launches
};
// The scratch of the current device for `stream` (reduce.cu). Launches on one stream are
// ordered, so the passes of one reduction and the next reduction never overlap.
Scratch scratch(cudaStream_t stream);

// Lane 0 ends with the combination of the 32 lanes (lower lanes on the left). A shift-down tree
// of its own rather than block_reduce.cuh's butterfly, which made bf16 row reductions slower.
template <class Op, class Acc>
__device__ __forceinline__ Acc warp_combine(const Op& op, Acc acc) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1)
    acc = op.combine(acc, shuffle_words<Shuffle::kDown>(acc, offset));
  return acc;
}

template <class T, bool kVector>
inline constexpr int kLanes = kVector ? static_cast<int>(16 / sizeof(T)) : 1;

// N elements loaded at once (one 16-byte load when N > 1): packs.cuh's Pack.
using cuda::Pack;

// An op whose results go to the scratch buffer (first pass of a split reduction).
template <class Op>
struct ToPartials : Op {
  using Acc = typename Op::Acc;
  Acc* partials;
  __device__ void store(int64_t i, Acc acc) const { partials[i] = acc; }
};

// The first pass of a split row reduction, which also finishes it: every block (one slice of
// one row) stores its partial result, and the last block of a row to arrive folds the row's
// partials in slice order and stores the op's result. One launch instead of two.
template <class Op>
struct SlicedRows : Op {
  using Acc = typename Op::Acc;
  Acc* partials;
  unsigned* arrivals;
  __device__ void store(int64_t i, Acc acc) const { partials[i] = acc; }
  __device__ void store_result(int64_t row, Acc acc) const { Op::store(row, acc); }
};

template <class Op>
inline constexpr bool kIsSlicedRows = requires(const Op& op) {
  op.arrivals;
};

// A partial result written by another block, read from L2 (past this multiprocessor's L1).
template <class S>
__device__ __forceinline__ S load_from_l2(const S* p) {
  static_assert(sizeof(S) % 4 == 0, "partials are made of 32-bit words");
  constexpr int kWords = static_cast<int>(sizeof(S) / 4);
  unsigned words[kWords];
#pragma unroll
  for (int w = 0; w < kWords; ++w) words[w] = __ldcg(reinterpret_cast<const unsigned*>(p) + w);
  S out;
  memcpy(&out, words, sizeof(S));
  return out;
}

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
  if constexpr (kIsSlicedRows<Op>) {
    // The host launches one task per block here (group == blockDim.x).
    __shared__ bool last;
    const int64_t row = task / t.slices;
    if (threadIdx.x == 0) {
      __threadfence();  // the partial above is visible to the block that counts last
      last = atomicAdd(op.arrivals + row, 1u) == static_cast<unsigned>(t.slices - 1);
    }
    __syncthreads();
    if (!last) return;
    Acc total = op.identity();
    for (int64_t s = threadIdx.x; s < t.slices; s += blockDim.x)
      total = op.combine(total, load_from_l2(op.partials + row * t.slices + s));
    total = warp_combine(op, total);
    if (lane == 0) warp_results[threadIdx.x / kWarp] = total;
    __syncthreads();
    if (threadIdx.x < kWarp) {
      const int warps = static_cast<int>(blockDim.x) / kWarp;
      total = lane < warps ? warp_results[lane] : op.identity();
      total = warp_combine(op, total);
      if (lane == 0) {
        op.store_result(row, total);
        op.arrivals[row] = 0;  // ready for the next launch on this stream
      }
    }
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

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

inline int64_t pow2_at_least(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

template <bool kVector, class Op, class In>
void launch_rows_pass(RowTasks t, const In* in, const Op& op, cudaStream_t stream) {
  // About four loads (of 16 bytes, or of 4 elements' worth of scalars) per thread; a block per
  // task for split rows.
  const int64_t per_load = kVector ? kLanes<In, true> : 4;
  t.group = kIsSlicedRows<Op>
                ? kMaxRowGroup
                : static_cast<int>(std::clamp<int64_t>(
                      pow2_at_least(ceil_div(std::min(t.slice_len, t.cols), 4 * per_load)), kWarp, kMaxRowGroup));
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
  // Blocks of 512 threads resident on the GPU; a slice is at least 16 loads per thread of them.
  const int64_t resident_blocks = static_cast<int64_t>(multiprocessor_count()) * 4;
  const int64_t min_slice = 16 * kMaxRowGroup * lanes;
  int64_t slices = 1;
  if (rows < resident_blocks && rows <= kMaxSplitRows && cols > min_slice) {
    slices = std::min(ceil_div(resident_blocks, rows), ceil_div(cols, min_slice));
    slices = std::max<int64_t>(1, std::min<int64_t>(slices, static_cast<int64_t>(kScratchBytes / sizeof(Acc)) / rows));
  }
  int64_t slice_len = cols;
  if (slices > 1) {
    slice_len = ceil_div(ceil_div(cols, slices), lanes) * lanes;
    slices = ceil_div(cols, slice_len);
  }
  auto first_pass = [&](const RowTasks& t, const auto& pass_op) {
    if (vector)
      launch_rows_pass<true>(t, in, pass_op, stream);
    else
      launch_rows_pass<false>(t, in, pass_op, stream);
  };
  if (slices == 1) {
    first_pass(RowTasks{rows, 1, cols, cols, 0}, op);
    return;
  }
  const Scratch s = scratch(stream);
  first_pass(RowTasks{rows * slices, slices, slice_len, cols, 0},
             SlicedRows<Op>{op, static_cast<Acc*>(s.partials), s.arrivals});
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
  const int64_t resident_blocks = static_cast<int64_t>(multiprocessor_count()) * (2048 / kColumnBlock);
  // Taller blocks when the columns alone leave the GPU idle, while each thread still folds 8+ rows.
  int64_t height = 1;
  while (height < 8 && ceil_div(packed_columns, kColumnBlock / height) < resident_blocks && extent >= 16 * height)
    height *= 2;
  const int64_t width = kColumnBlock / height;
  const int64_t column_blocks = ceil_div(packed_columns, width);
  int64_t splits = 1;
  if (column_blocks < resident_blocks) {
    splits = std::min(ceil_div(resident_blocks, column_blocks), ceil_div(extent, 8 * height));
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
    if (vector)
      reduce_columns_kernel<PassOp, T, true><<<grid, block, 0, stream>>>(t, in, pass_op);
    else
      reduce_columns_kernel<PassOp, T, false><<<grid, block, 0, stream>>>(t, in, pass_op);
    GENESIS_CUDA_LAUNCH_CHECK();
  };
  if (splits == 1) {
    launch(op);
    return;
  }
  auto* partials = static_cast<Acc*>(scratch(stream).partials);
  launch(ToPartials<Op>{op, partials});
  combine_splits_kernel<Op, Acc>
      <<<static_cast<unsigned>(ceil_div(columns, kWarp)), dim3(kWarp, kSplitLanes), 0, stream>>>(columns, splits,
                                                                                                 partials, op);
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
