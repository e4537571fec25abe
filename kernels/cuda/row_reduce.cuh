#pragma once
// Row reductions shared by the nn kernels (nn.cu, nn_rows.cu): butterfly shuffles within a
// warp, then a fixed-order pass over the per-warp results, so every run gives the same bits.
#include <cstdint>
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/packs.cuh"

namespace genesis::kernels::cuda::rows {

constexpr int kWarp = 32;
constexpr int kThreads = 256;

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

// Reduction over the kGroup threads sharing a row (a warp, or the whole block of kThreads);
// every thread gets the result. `shared` holds one value per warp of the block.
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

}  // namespace genesis::kernels::cuda::rows

// Rows handled by the thread's group of kGroup threads: a grid-stride loop over rows in steps
// of the groups in flight.
#define GENESIS_FOR_EACH_GROUP_ROW(ROW, ROW_COUNT)                                                            \
  for (int64_t ROW = static_cast<int64_t>(blockIdx.x) * (::genesis::kernels::cuda::rows::kThreads / kGroup) + \
                     threadIdx.x / kGroup;                                                                    \
       ROW < (ROW_COUNT);                                                                                     \
       ROW += static_cast<int64_t>(gridDim.x) * (::genesis::kernels::cuda::rows::kThreads / kGroup))
