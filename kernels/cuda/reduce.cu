// CUDA sum, prod, max/min with their indices, and the product's backward, on the engine of
// reduce_engine.cuh.
#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/reduce_engine.cuh"
#include "libgenesis/core/error.h"

namespace genesis::kernels::cuda {

namespace reduce_engine {

Scratch scratch(cudaStream_t stream) {
  static std::mutex mutex;
  static auto* buffers = new std::map<std::pair<int, cudaStream_t>, void*>;  // kept for the process
  constexpr size_t kArrivalBytes = kMaxSplitRows * sizeof(unsigned);
  int device = 0;
  GENESIS_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lock(mutex);
  void*& buffer = (*buffers)[{device, stream}];
  if (!buffer) {
    GENESIS_CUDA_CHECK(cudaMalloc(&buffer, kScratchBytes + kArrivalBytes));
    // Ordered before every later launch on `stream` (the memset runs on it).
    GENESIS_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(buffer) + kScratchBytes, 0, kArrivalBytes, stream));
  }
  return {buffer, reinterpret_cast<unsigned*>(static_cast<char*>(buffer) + kScratchBytes)};
}

}  // namespace reduce_engine

namespace {

template <class T>
using sum_out_t = std::conditional_t<kIsFloat<T>, T, int64_t>;

template <class T>
struct SumOp {
  using Acc = sum_acc_t<T>;
  sum_out_t<T>* out;
  __device__ Acc identity() const { return Acc(0); }
  __device__ Acc step(Acc acc, T x, int64_t) const { return acc + to_acc<Acc>(x); }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  __device__ void store(int64_t i, Acc acc) const { out[i] = from_acc<sum_out_t<T>>(acc); }
};

template <class T>
struct MeanOp {
  using Acc = float_acc_t<T>;
  T* out;
  Acc extent;
  __device__ Acc identity() const { return Acc(0); }
  __device__ Acc step(Acc acc, T x, int64_t) const { return acc + to_acc<Acc>(x); }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  __device__ void store(int64_t i, Acc acc) const { out[i] = from_acc<T>(acc / extent); }
};

template <class T>
struct ProdOp {
  using Acc = sum_acc_t<T>;
  sum_out_t<T>* out;
  __device__ Acc identity() const { return Acc(1); }
  __device__ Acc step(Acc acc, T x, int64_t) const { return combine(acc, to_acc<Acc>(x)); }
  __device__ Acc combine(Acc a, Acc b) const {
    if constexpr (kIsFloat<T>) {
      return a * b;
    } else {  // wraps around like the CPU (signed overflow would be undefined)
      return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    }
  }
  __device__ void store(int64_t i, Acc acc) const { out[i] = from_acc<sum_out_t<T>>(acc); }
};

// Values compare as float for f16/bf16 and as int for bool.
template <class T>
using compare_t = std::conditional_t<kIsHalf<T>, float, std::conditional_t<std::is_same_v<T, bool>, int32_t, T>>;

template <class C>
__device__ __forceinline__ bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return v != v;
  } else {
    return false;
  }
}

template <class T, Extreme kWhich>
struct ExtremeOp {
  using C = compare_t<T>;
  struct Acc {
    C value;
    int64_t index;  // -1: no element yet
  };
  T* values;
  int64_t* indices;

  // True when `candidate` replaces `best`: a NaN beats everything, and ties keep `best`.
  __device__ static bool beats(C candidate, C best) {
    if (is_nan(best)) return false;
    if (is_nan(candidate)) return true;
    return kWhich == Extreme::max ? candidate > best : candidate < best;
  }
  __device__ Acc identity() const { return {C(0), -1}; }
  // Indices grow along a thread's walk, so a later element only wins by beating the value.
  __device__ Acc step(Acc acc, T x, int64_t index) const {
    const C v = to_acc<C>(x);
    return acc.index < 0 || beats(v, acc.value) ? Acc{v, index} : acc;
  }
  // The better value, or the lower index between equal values (or two NaNs): the same
  // answer in any combination order.
  __device__ Acc combine(Acc a, Acc b) const {
    if (b.index < 0) return a;
    if (a.index < 0) return b;
    if (beats(b.value, a.value)) return b;
    if (beats(a.value, b.value)) return a;
    return b.index < a.index ? b : a;
  }
  __device__ void store(int64_t i, Acc acc) const {
    if (values) values[i] = from_acc<T>(acc.value);
    if (indices) indices[i] = acc.index;
  }
};

// One warp per row, in chunks of 32 columns: a shuffle scan gives each lane the product of the
// chunk's earlier (then later) elements, and a carry holds the product of the earlier (later)
// chunks. The forward walk stores prefixes into grad_in; the backward walk multiplies them by
// suffix * grad_out. Lane l owns column c = l (mod 32) in both walks, so no barrier is needed.
template <class A>
__global__ void prod_rows_backward_kernel(int64_t rows, int64_t cols, const A* in, const A* grad_out, A* grad_in) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  GENESIS_FOR_EACH_GROUP_ROW(r, rows, kWarp, blockDim.x) {
    const A* x = in + r * cols;
    A* gx = grad_in + r * cols;
    A carry = 1;
    for (int64_t base = 0; base < cols; base += 32) {
      const int64_t c = base + lane;
      A inclusive = c < cols ? x[c] : A(1);
      for (int offset = 1; offset < 32; offset <<= 1) {
        const A other = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive *= other;
      }
      A exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
      if (lane == 0) exclusive = 1;
      if (c < cols) gx[c] = carry * exclusive;
      carry *= __shfl_sync(0xffffffffu, inclusive, 31);
    }
    carry = grad_out[r];
    for (int64_t base = (cols - 1) / 32 * 32; base >= 0; base -= 32) {
      const int64_t c = base + lane;
      A inclusive = c < cols ? x[c] : A(1);
      for (int offset = 1; offset < 32; offset <<= 1) {
        const A other = __shfl_down_sync(0xffffffffu, inclusive, offset);
        if (lane + offset < 32) inclusive *= other;
      }
      A exclusive = __shfl_down_sync(0xffffffffu, inclusive, 1);
      if (lane == 31) exclusive = 1;
      if (c < cols) gx[c] *= carry * exclusive;
      carry *= __shfl_sync(0xffffffffu, inclusive, 0);
    }
  }
}

}  // namespace

void sum(DType dtype, ReduceShape shape, const void* in, void* out, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_ALL(dtype, {
    reduce_engine::reduce(shape, static_cast<const scalar_t*>(in),
                          SumOp<scalar_t>{static_cast<sum_out_t<scalar_t>*>(out)}, stream);
  });
}

void mean(DType dtype, ReduceShape shape, const void* in, void* out, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "mean", {
    using A = float_acc_t<scalar_t>;
    reduce_engine::reduce(shape, static_cast<const scalar_t*>(in),
                          MeanOp<scalar_t>{static_cast<scalar_t*>(out), static_cast<A>(shape.extent)}, stream);
  });
}

void sum_rows(DType dtype, int64_t rows, int64_t cols, const void* in, void* out, cudaStream_t stream) {
  sum(dtype, ReduceShape{rows, cols, 1}, in, out, stream);
}

void prod(DType dtype, ReduceShape shape, const void* in, void* out, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_ALL(dtype, {
    reduce_engine::reduce(shape, static_cast<const scalar_t*>(in),
                          ProdOp<scalar_t>{static_cast<sum_out_t<scalar_t>*>(out)}, stream);
  });
}

void extreme(Extreme which, DType dtype, ReduceShape shape, const void* in, void* values, int64_t* indices,
             cudaStream_t stream) {
  GENESIS_CHECK(shape.extent > 0 || shape.outer * shape.inner == 0, ValueError,
                "max/min: cannot reduce an extent of size 0");
  GENESIS_CUDA_DISPATCH_ALL(dtype, {
    const auto* x = static_cast<const scalar_t*>(in);
    auto* v = static_cast<scalar_t*>(values);
    if (which == Extreme::max)
      reduce_engine::reduce(shape, x, ExtremeOp<scalar_t, Extreme::max>{v, indices}, stream);
    else
      reduce_engine::reduce(shape, x, ExtremeOp<scalar_t, Extreme::min>{v, indices}, stream);
  });
}

void prod_rows_backward(DType dtype, int64_t rows, int64_t cols, const void* in, const void* grad_out, void* grad_in,
                        cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  auto launch = [&](auto tag) {
    using A = decltype(tag);
    prod_rows_backward_kernel<A><<<grid_size(rows * kWarp), kBlockSize, 0, stream>>>(
        rows, cols, static_cast<const A*>(in), static_cast<const A*>(grad_out), static_cast<A*>(grad_in));
    GENESIS_CUDA_LAUNCH_CHECK();
  };
  if (dtype == DType::f32) launch(float{});
  else if (dtype == DType::f64) launch(double{});
  else throw_unsupported_dtype("prod backward on CUDA (f16/bf16 go through f32)", dtype);
}

}  // namespace genesis::kernels::cuda
