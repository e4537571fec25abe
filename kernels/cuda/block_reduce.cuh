#pragma once
// Warp and block reductions shared by the CUDA kernels, and the online-softmax merge. Every
// reduction combines its values in a fixed tree (butterfly shuffles within a warp, then a fixed
// order over the per-warp results), so it gives the same bits on every run.
#include <cstring>
#include <type_traits>

namespace genesis::kernels::cuda {

inline constexpr int kWarp = 32;

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
// The larger (smaller) of a and b where a NaN wins, as the CPU's nan_max / nan_min: a NaN
// anywhere reaches the result.
struct NanMax {
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return a != a || b <= a ? a : b;
  }
};
struct NanMin {
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return a != a || b >= a ? a : b;
  }
};

// Where a lane's shuffle reads from: lane (this lane ^ arg), or lane (this lane + arg).
enum class Shuffle { kXor, kDown };

// Any trivially copyable struct through a warp shuffle, one 32-bit word at a time.
template <Shuffle kShuffle, class V>
__device__ __forceinline__ V shuffle_words(const V& v, int arg) {
  static_assert(sizeof(V) % 4 == 0, "shuffled values are made of 32-bit words");
  constexpr int kWords = static_cast<int>(sizeof(V) / 4);
  unsigned words[kWords];
  memcpy(words, &v, sizeof(V));
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    if constexpr (kShuffle == Shuffle::kXor) {
      words[w] = __shfl_xor_sync(0xffffffffu, words[w], arg);
    } else {
      words[w] = __shfl_down_sync(0xffffffffu, words[w], arg);
    }
  }
  V out;
  memcpy(&out, words, sizeof(V));
  return out;
}

// v of lane (this lane ^ mask): a number in one shuffle, a struct word by word.
template <class V>
__device__ __forceinline__ V shuffle_xor(const V& v, int mask) {
  if constexpr (std::is_arithmetic_v<V>) {
    return __shfl_xor_sync(0xffffffffu, v, mask);
  } else {
    return shuffle_words<Shuffle::kXor>(v, mask);
  }
}

// Butterfly over a warp: every lane ends with op over the 32 lanes. Each step is
// op(this lane's value, the other lane's), so lane 0 folds higher lanes in on the right: for an
// op that is not symmetric, lane 0 holds the in-order combination.
template <class V, class Op>
__device__ __forceinline__ V warp_reduce(V v, Op op) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v = op(v, shuffle_xor(v, offset));
  return v;
}

// Reduction over the kGroup threads sharing a row (a warp, or the whole block of kGroup); every
// thread gets the result, folding the per-warp results in warp order. `shared` holds one value
// per warp of the block and is free again on return.
template <int kGroup, class V, class Op>
__device__ __forceinline__ V group_reduce(V v, V* shared, Op op) {
  v = warp_reduce(v, op);
  if constexpr (kGroup == kWarp) {
    return v;
  } else {
    const int warp = static_cast<int>(threadIdx.x) / kWarp;
    if (threadIdx.x % kWarp == 0) shared[warp] = v;
    __syncthreads();
    V total = shared[0];
    for (int w = 1; w < kGroup / kWarp; ++w) total = op(total, shared[w]);
    __syncthreads();  // `shared` is rewritten by the next reduction
    return total;
  }
}

// Reduction over a group of `group` consecutive threads (a power of two from a warp up to the
// block), valid in the group's first thread; every thread of the block calls it. The group's
// first warp combines the per-warp results by a butterfly too (`identity` in the lanes past the
// group's warps). `shared` holds one value per warp of the block; the caller passes a barrier
// before writing it again.
template <class V, class Op>
__device__ __forceinline__ V group_reduce_first(V v, int group, V identity, V* shared, Op op) {
  v = warp_reduce(v, op);
  if (group == kWarp) return v;
  const unsigned warp = threadIdx.x / kWarp;
  if (threadIdx.x % kWarp == 0) shared[warp] = v;
  __syncthreads();
  const unsigned member = threadIdx.x & static_cast<unsigned>(group - 1);
  if (member < kWarp) {
    v = member < static_cast<unsigned>(group / kWarp) ? shared[warp + member] : identity;
    v = warp_reduce(v, op);
  }
  return v;
}

// Online softmax: the running maximum of the values seen and the sum of exp(x - max) over them.
template <class A>
struct ExpSum {
  A max;
  A sum;
};

// a and b merged at `max`, the larger of their maxima (callers differ in how NaN and infinities
// choose it): each sum moves to `max` by rescale(sum, from, to) = sum * exp(from - to), in the
// caller's precision and with its guards, and the two are added.
template <class A, class Rescale>
__device__ __forceinline__ ExpSum<A> merge_at(const ExpSum<A>& a, const ExpSum<A>& b, A max, Rescale rescale) {
  return {max, rescale(a.sum, a.max, max) + rescale(b.sum, b.max, max)};
}

}  // namespace genesis::kernels::cuda

// Rows handled by the thread's group of GROUP threads in blocks of BLOCK threads (a constant
// where the kernel's launches fix it, else blockDim.x): a grid-stride loop over rows in steps of
// the groups in flight.
#define GENESIS_FOR_EACH_GROUP_ROW(ROW, ROW_COUNT, GROUP, BLOCK)                                            \
  for (int64_t ROW##_groups = (BLOCK) / (GROUP), ROW##_step = static_cast<int64_t>(gridDim.x) * ROW##_groups, \
               ROW = blockIdx.x * ROW##_groups + threadIdx.x / (GROUP);                                       \
       ROW < (ROW_COUNT); ROW += ROW##_step)
