#pragma once
// Helpers shared by the CUDA kernels: the device type of each dtype, conversions to and from
// the compute type, dtype and index-type dispatch, launch sizing, and the collapsed strided
// geometry that the general elementwise path walks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "kernels/common/collapsed_dims.h"
#include "kernels/common/elementwise_ops.h"
#include "libgenesis/core/dtype.h"
#include "kernels/cuda/check.h"

// Checks the launch that precedes it (bad configuration, missing kernel image).
#define GENESIS_CUDA_LAUNCH_CHECK() GENESIS_CUDA_CHECK(cudaGetLastError())

// Like GENESIS_DISPATCH_ALL, with scalar_t bound to the type kernels compute on
// (__half and __nv_bfloat16 for f16 and bf16; the storage layouts are identical).
#define GENESIS_CUDA_DISPATCH_ALL(DTYPE, ...)            \
  switch (DTYPE) {                                       \
    GENESIS_DTYPE_CASE(f32, float, __VA_ARGS__)          \
    GENESIS_DTYPE_CASE(f64, double, __VA_ARGS__)         \
    GENESIS_DTYPE_CASE(f16, __half, __VA_ARGS__)         \
    GENESIS_DTYPE_CASE(bf16, __nv_bfloat16, __VA_ARGS__) \
    GENESIS_DTYPE_CASE(i32, int32_t, __VA_ARGS__)        \
    GENESIS_DTYPE_CASE(i64, int64_t, __VA_ARGS__)        \
    GENESIS_DTYPE_CASE(boolean, bool, __VA_ARGS__)       \
  }

#define GENESIS_CUDA_DISPATCH_FLOAT(DTYPE, WHAT, ...)    \
  switch (DTYPE) {                                       \
    GENESIS_DTYPE_CASE(f32, float, __VA_ARGS__)          \
    GENESIS_DTYPE_CASE(f64, double, __VA_ARGS__)         \
    GENESIS_DTYPE_CASE(f16, __half, __VA_ARGS__)         \
    GENESIS_DTYPE_CASE(bf16, __nv_bfloat16, __VA_ARGS__) \
    default:                                             \
      ::genesis::throw_unsupported_dtype(WHAT, DTYPE);   \
  }

namespace genesis::kernels::cuda {

template <class T>
inline constexpr bool kIsHalf = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <class T>
inline constexpr bool kIsFloat = std::is_floating_point_v<T> || kIsHalf<T>;

// Floating compute type: double for f64, float for f32/f16/bf16 (as acc_t on the CPU).
template <class T>
using float_acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
// Sums and products: the CPU's acc_t with the device's half types (float for f32/f16/bf16,
// double, int64 for integers and bool).
template <class T>
using sum_acc_t = std::conditional_t<kIsFloat<T>, float_acc_t<T>, int64_t>;

__device__ __forceinline__ float half_to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float half_to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Round-to-nearest-even, as the CPU's float16/bfloat16 constructors do.
template <class T>
__device__ __forceinline__ T float_to_half(float v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    return __float2bfloat16_rn(v);
  }
}

template <class A, class T>
__device__ __forceinline__ A to_acc(T v) {
  if constexpr (kIsHalf<T>) {
    return static_cast<A>(half_to_float(v));
  } else {
    return static_cast<A>(v);
  }
}

template <class T, class A>
__device__ __forceinline__ T from_acc(A v) {
  if constexpr (kIsHalf<T>) {
    return float_to_half<T>(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// The CPU's cast_value (kernels/cpu/elementwise.cpp): bool is "!= 0" (NaN is true); 16-bit
// floats go through float in both directions.
template <class Dst, class Src>
__device__ __forceinline__ Dst cast_value(Src v) {
  if constexpr (std::is_same_v<Dst, Src>) {
    return v;
  } else if constexpr (kIsHalf<Src>) {
    return cast_value<Dst>(half_to_float(v));
  } else if constexpr (std::is_same_v<Dst, bool>) {
    return static_cast<float>(v) != 0.0f || static_cast<double>(v) != 0.0;
  } else if constexpr (kIsHalf<Dst>) {
    return float_to_half<Dst>(static_cast<float>(v));
  } else {
    return static_cast<Dst>(v);
  }
}

// exp in the accumulator type A of inputs of type T. Half-precision inputs take the hardware
// exp2 (__expf: a few ulp of f32, far below their own precision); f32 and f64 the exact one.
template <class T, class A>
__device__ __forceinline__ A exp_for(A v) {
  if constexpr (kIsHalf<T>) {
    return __expf(v);
  } else {
    return exp(v);
  }
}

// Records an index fault for the host to raise at its next synchronization (see
// cuda::KernelFault); only the first report of the process sticks until it is raised.
__device__ __forceinline__ void report_index_fault(::genesis::cuda::KernelFault* fault, int op, int64_t value, int64_t bound) {
  if (atomicCAS(&fault->set, 0u, 1u) == 0u) {
    fault->op = op;
    fault->value = value;
    fault->bound = bound;
    __threadfence_system();
  }
}

inline constexpr int kBlockSize = 256;

// An attribute of the current device, looked up once per thread, device and attribute.
template <cudaDeviceAttr kAttribute>
inline int device_attribute() {
  thread_local int cached_device = -1, cached_value = 0;
  int device = 0;
  GENESIS_CUDA_CHECK(cudaGetDevice(&device));
  if (device != cached_device) {
    GENESIS_CUDA_CHECK(cudaDeviceGetAttribute(&cached_value, kAttribute, device));
    cached_device = device;
  }
  return cached_value;
}

inline int multiprocessor_count() { return device_attribute<cudaDevAttrMultiProcessorCount>(); }
// In bytes.
inline int shared_memory_per_multiprocessor() {
  return device_attribute<cudaDevAttrMaxSharedMemoryPerMultiprocessor>();
}

// Blocks of `threads` for a grid-stride loop over `items` work items: one item per thread up
// to the number of blocks that can be resident at once (2048 threads per multiprocessor).
inline unsigned grid_size(int64_t items, int threads = kBlockSize) {
  int64_t wanted = (items + threads - 1) / threads;
  int64_t resident = static_cast<int64_t>(multiprocessor_count()) * (2048 / threads);
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, resident)));
}

// N operands sharing one logical shape, each with its own element strides (0 = broadcast),
// collapsed as the CPU's loops collapse them (kernels/common/collapsed_dims.h): a contiguous
// tensor is one dimension.
template <int N>
struct Geometry : CollapsedDims<N> {
  using CollapsedDims<N>::CollapsedDims;
  using CollapsedDims<N>::ndim, CollapsedDims<N>::shape, CollapsedDims<N>::strides;

  bool contiguous() const {
    if (ndim != 1) return false;
    for (int k = 0; k < N; ++k)
      if (strides[k][0] != 1 && shape[0] != 1) return false;
    return true;
  }

  // True when every index and element offset fits in 32-bit arithmetic (with headroom for the
  // grid-stride increment).
  bool fits_int32(int64_t numel) const {
    constexpr int64_t kMax = INT32_MAX / 2;
    if (numel > kMax) return false;
    for (int k = 0; k < N; ++k) {
      int64_t extent = 0;
      for (int d = 0; d < ndim; ++d) extent += (shape[d] - 1) * (strides[k][d] < 0 ? -strides[k][d] : strides[k][d]);
      if (extent > kMax) return false;
    }
    return true;
  }
};

// Element offsets of linear index `i` for every operand: a div/mod per collapsed dimension.
template <class Index, int N>
__device__ __forceinline__ void offsets_of(const Geometry<N>& g, Index i, Index (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    Index extent = static_cast<Index>(g.shape[d]);
    Index coord = i % extent;
    i /= extent;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += coord * static_cast<Index>(g.strides[k][d]);
  }
}

// Calls f.template operator()<Index>() with Index = int32_t when `narrow` (every index and offset
// of the launch fits 32-bit arithmetic, whose divisions are cheaper) and int64_t otherwise.
template <class F>
void with_index_type(bool narrow, F&& f) {
  if (narrow) {
    f.template operator()<int32_t>();
  } else {
    f.template operator()<int64_t>();
  }
}

inline int64_t numel_of(int ndim, const int64_t* shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

}  // namespace genesis::kernels::cuda
