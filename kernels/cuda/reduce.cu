// CUDA row sums. Short rows are reduced by one warp each, long rows by one block each; when
// there are too few rows to fill the GPU, each row is cut into slices summed by separate
// blocks and the partial sums are added by a second launch. Every sum is taken in a fixed
// order (no atomics), so repeated runs on a device give identical bits.
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.h"
#include "libgenesis/core/error.h"

namespace genesis::kernels::cuda {

namespace {

template <class T>
using sum_acc_t = std::conditional_t<kIsFloat<T>, float_acc_t<T>, int64_t>;
template <class T>
using sum_out_t = std::conditional_t<kIsFloat<T>, T, int64_t>;

constexpr int kWarp = 32;
// Rows up to this length are summed by a single warp; longer rows get a whole block.
constexpr int64_t kWarpRowLimit = 512;
constexpr int kRowBlock = 512;
// A slice of a split row is at least this long, so each thread still sums 16 or more values.
constexpr int64_t kMinSlice = 16 * kRowBlock;
// Blocks of kRowBlock threads resident per multiprocessor (2048 threads).
constexpr int kBlocksPerMultiprocessor = 2048 / kRowBlock;
// Partial sums of split rows: at most rows * slices <= 2 * (blocks that fit on the GPU) values.
constexpr size_t kScratchBytes = size_t{256} << 10;

template <class A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// One warp per row: lane l sums columns l, l + 32, ... (coalesced), then a shuffle tree.
template <class In, class A, class Out>
__global__ void sum_rows_warp(int64_t rows, int64_t cols, const In* in, Out* out) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t warps_per_block = blockDim.x / kWarp;
  const int64_t total_warps = static_cast<int64_t>(gridDim.x) * warps_per_block;
  for (int64_t r = blockIdx.x * warps_per_block + threadIdx.x / kWarp; r < rows; r += total_warps) {
    const In* row = in + r * cols;
    A acc = 0;
    for (int64_t c = lane; c < cols; c += kWarp) acc += to_acc<A>(row[c]);
    acc = warp_sum(acc);
    if (lane == 0) out[r] = from_acc<Out>(acc);
  }
}

// One block per slice: slice s covers columns [c * slice_len, (c + 1) * slice_len) of row
// s / slices, c = s % slices (a whole row when slices == 1). Thread t sums columns t, t + 512,
// ... of it; each warp reduces by shuffles, then warp 0 adds the per-warp sums from shared memory.
template <class In, class A, class Out>
__global__ void __launch_bounds__(kRowBlock)
    sum_slices_block(int64_t total_slices, int64_t slices, int64_t slice_len, int64_t cols, const In* in, Out* out) {
  __shared__ A partial[kRowBlock / kWarp];
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  for (int64_t s = blockIdx.x; s < total_slices; s += gridDim.x) {
    const int64_t begin = (s % slices) * slice_len;
    const int64_t end = begin + slice_len < cols ? begin + slice_len : cols;
    const In* row = in + (s / slices) * cols;
    A acc = 0;
    for (int64_t c = begin + threadIdx.x; c < end; c += kRowBlock) acc += to_acc<A>(row[c]);
    acc = warp_sum(acc);
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (warp == 0) {
      acc = lane < kRowBlock / kWarp ? partial[lane] : A(0);
      acc = warp_sum(acc);
      if (lane == 0) out[s] = from_acc<Out>(acc);
    }
    __syncthreads();  // `partial` is rewritten for the next slice
  }
}

// Per (device, stream) buffer for the partial sums, allocated on first use and kept: the two
// launches of a split sum are ordered on their stream, so reuse needs no synchronization.
void* scratch(cudaStream_t stream) {
  static std::mutex mutex;
  static auto* buffers = new std::map<std::pair<int, cudaStream_t>, void*>;
  int device = 0;
  GENESIS_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lock(mutex);
  void*& buffer = (*buffers)[{device, stream}];
  if (!buffer) GENESIS_CUDA_CHECK(cudaMalloc(&buffer, kScratchBytes));
  return buffer;
}

template <class T>
void sum_rows_typed(int64_t rows, int64_t cols, const T* in, sum_out_t<T>* out, cudaStream_t stream) {
  using A = sum_acc_t<T>;
  using Out = sum_out_t<T>;
  if (cols <= kWarpRowLimit) {
    sum_rows_warp<T, A, Out><<<grid_size(rows * kWarp), kBlockSize, 0, stream>>>(rows, cols, in, out);
    GENESIS_CUDA_LAUNCH_CHECK();
    return;
  }
  const int64_t resident_blocks = static_cast<int64_t>(multiprocessor_count()) * kBlocksPerMultiprocessor;
  int64_t slices = 1;
  if (rows < resident_blocks) {
    slices = std::min((resident_blocks + rows - 1) / rows, (cols + kMinSlice - 1) / kMinSlice);
  }
  const auto blocks = [&](int64_t work) { return static_cast<unsigned>(std::min(work, resident_blocks)); };
  if (slices == 1) {
    sum_slices_block<T, A, Out><<<blocks(rows), kRowBlock, 0, stream>>>(rows, 1, cols, cols, in, out);
    GENESIS_CUDA_LAUNCH_CHECK();
    return;
  }
  GENESIS_CHECK(static_cast<size_t>(rows * slices) * sizeof(A) <= kScratchBytes, Error,
                "sum_rows: scratch buffer too small for ", rows, " x ", slices, " partial sums");
  A* partials = static_cast<A*>(scratch(stream));
  const int64_t slice_len = (cols + slices - 1) / slices;
  sum_slices_block<T, A, A>
      <<<blocks(rows * slices), kRowBlock, 0, stream>>>(rows * slices, slices, slice_len, cols, in, partials);
  GENESIS_CUDA_LAUNCH_CHECK();
  sum_rows_warp<A, A, Out><<<grid_size(rows * kWarp), kBlockSize, 0, stream>>>(rows, slices, partials, out);
  GENESIS_CUDA_LAUNCH_CHECK();
}

}  // namespace

void sum_rows(DType dtype, int64_t rows, int64_t cols, const void* in, void* out, cudaStream_t stream) {
  if (rows <= 0) return;
  GENESIS_CUDA_DISPATCH_ALL(dtype, {
    sum_rows_typed<scalar_t>(rows, cols, static_cast<const scalar_t*>(in), static_cast<sum_out_t<scalar_t>*>(out),
                             stream);
  });
}

}  // namespace genesis::kernels::cuda
