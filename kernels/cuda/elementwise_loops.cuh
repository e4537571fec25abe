#pragma once
// The loops every CUDA elementwise kernel runs on, shared by elementwise.cu, binary.cu,
// binary_scalar.cu and copy.cu: a contiguous loop with packed (up to 16-byte) accesses, a
// broadcast loop for "one full operand, one small one" binary ops, and a strided loop over the
// collapsed geometry with 32-bit indexing when it fits. Also the functors two files share.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "kernels/common/math.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/packs.cuh"

namespace genesis::kernels::cuda {

namespace loops {

template <int VEC, class F, class Out, class... In>
__device__ __forceinline__ Pack<Out, VEC> apply_pack(const F& f, const Pack<In, VEC>&... in) {
  Pack<Out, VEC> out;
#pragma unroll
  for (int j = 0; j < VEC; ++j) out.v[j] = f(in.v[j]...);
  return out;
}

// All operands contiguous and aligned to VEC elements: thread t reads pack t of every input (one
// vector load each, coalesced across the warp) and writes pack t of the output; the last n % VEC
// elements are handled one per thread. Launched with one thread per pack (contiguous_grid), so
// the loop runs once: on the H100 that beats both a grid capped at the resident threads and 2 or
// 4 packs per thread (by up to 4% on f32 8192^2 add and on gelu).
template <int VEC, class F, class Out, class... In>
__global__ void contiguous_kernel(int64_t n, F f, Out* out, const In*... in) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / VEC;
  for (int64_t p = first; p < packs; p += stride) {
    store_pack<VEC>(out + static_cast<size_t>(p) * VEC, apply_pack<VEC, F, Out>(f, load_pack<VEC>(in + static_cast<size_t>(p) * VEC)...));
  }
  for (int64_t i = packs * VEC + first; i < n; i += stride) out[i] = f(in[i]...);
}

inline constexpr int kContiguousBlock = 128;

// Blocks of kContiguousBlock threads for one thread per pack (at least one block, for the tail).
inline unsigned contiguous_grid(int64_t packs) {
  return static_cast<unsigned>(std::clamp<int64_t>((packs + kContiguousBlock - 1) / kContiguousBlock, 1, INT32_MAX));
}

template <class Index, int N, class F, class Out, class... In, size_t... I>
__device__ __forceinline__ void apply_at(const F& f, Out* out, const Index (&off)[N], std::index_sequence<I...>,
                                         const In*... in) {
  out[off[0]] = f(in[off[I + 1]]...);
}

// General case: element i of the logical shape, its per-operand offsets from div/mod over the
// collapsed dimensions (operand 0 is the output).
template <class Index, int N, class F, class Out, class... In>
__global__ void strided_kernel(Index n, Geometry<N> g, F f, Out* out, const In*... in) {
  const Index stride = static_cast<Index>(gridDim.x) * static_cast<Index>(blockDim.x);
  for (Index i = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
       i < n; i += stride) {
    Index off[N];
    offsets_of(g, i, off);
    apply_at(f, out, off, std::make_index_sequence<N - 1>{}, in...);
  }
}

// Where the second operand of a binary op sits relative to the first: a [rows, cols] walk with
// its own strides (0 for a broadcast axis), as in bias [cols], column [rows, 1] or a scalar.
struct BroadcastOperand {
  int32_t cols, row_stride, col_stride;
  bool first;  // the broadcast operand is the op's left-hand side
};

// out and `full` row-major and aligned to VEC: pack p of both is one vector access; the other
// operand's elements are read one by one at (row, col) stepped along the pack (they repeat
// across rows, so they come from L1/L2). 32-bit index math: one division per pack.
template <int VEC, class F, class Out, class T>
__global__ void broadcast_kernel(int32_t n, BroadcastOperand b, F f, Out* out, const T* full, const T* other) {
  const int32_t stride = static_cast<int32_t>(gridDim.x * blockDim.x);
  const int32_t first = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  const int32_t packs = n / VEC;
  for (int32_t p = first; p < packs; p += stride) {
    int32_t row = p * VEC / b.cols;
    int32_t col = p * VEC - row * b.cols;
    const Pack<T, VEC> x = load_pack<VEC>(full + static_cast<size_t>(p) * VEC);
    Pack<Out, VEC> y;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const T o = other[row * b.row_stride + col * b.col_stride];
      y.v[j] = b.first ? f(o, x.v[j]) : f(x.v[j], o);
      if (++col == b.cols) {
        col = 0;
        ++row;
      }
    }
    store_pack<VEC>(out + static_cast<size_t>(p) * VEC, y);
  }
  for (int32_t i = packs * VEC + first; i < n; i += stride) {
    const int32_t row = i / b.cols, col = i - row * b.cols;
    const T o = other[row * b.row_stride + col * b.col_stride];
    out[i] = b.first ? f(o, full[i]) : f(full[i], o);
  }
}

template <int VEC, class T>
bool aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * VEC) == 0;
}

template <class... T>
constexpr int vector_width() {
  return static_cast<int>(16 / std::max({sizeof(T)...}));
}

// out = f(in...) over a collapsed geometry (operand 0 the output).
template <int N, class F, class Out, class... In>
void launch_geometry(const Geometry<N>& g, int64_t n, cudaStream_t stream, F f, Out* out, const In*... in) {
  constexpr int VEC = vector_width<Out, In...>();
  if (g.contiguous() && aligned<VEC>(out) && (aligned<VEC>(in) && ...)) {
    contiguous_kernel<VEC><<<contiguous_grid(n / VEC), kContiguousBlock, 0, stream>>>(n, f, out, in...);
  } else {
    with_index_type(g.fits_int32(n), [&]<class Index>() {
      strided_kernel<Index><<<grid_size(n), kBlockSize, 0, stream>>>(static_cast<Index>(n), g, f, out, in...);
    });
  }
  GENESIS_CUDA_LAUNCH_CHECK();
}

// out = f(in...) over `shape`; strides[0] are the output's, strides[k + 1] those of input k.
template <class F, class Out, class... In>
void launch(int ndim, const int64_t* shape, const std::array<const int64_t*, 1 + sizeof...(In)>& strides,
            cudaStream_t stream, F f, Out* out, const In*... in) {
  const int64_t n = numel_of(ndim, shape);
  if (n == 0) return;
  launch_geometry(Geometry<1 + sizeof...(In)>(ndim, shape, strides), n, stream, f, out, in...);
}

// Operand k of a collapsed geometry of rank <= 2 laid out row-major (as the output is).
template <int N>
bool row_major(const Geometry<N>& g, int k) {
  if (g.ndim == 1) return g.strides[k][0] == 1;
  return g.ndim == 2 && g.strides[k][1] == 1 && g.strides[k][0] == g.shape[1];
}

// Binary out = f(a, b) with out row-major: the broadcast loop when exactly one input is
// row-major too (bias rows, columns, a 0-d operand) and 32-bit offsets suffice; else as launch.
template <class F, class Out, class T>
void launch_binary(int ndim, const int64_t* shape, const std::array<const int64_t*, 3>& strides, cudaStream_t stream,
                   F f, Out* out, const T* a, const T* b) {
  const int64_t n = numel_of(ndim, shape);
  if (n == 0) return;
  const Geometry<3> g(ndim, shape, strides);
  constexpr int VEC = vector_width<Out, T>();
  if (!g.contiguous() && g.ndim <= 2 && row_major(g, 0) && row_major(g, 1) != row_major(g, 2) && g.fits_int32(n)) {
    const int full = row_major(g, 1) ? 1 : 2, other = 3 - full;
    const T* full_ptr = full == 1 ? a : b;
    if (aligned<VEC>(out) && aligned<VEC>(full_ptr)) {
      const int last = g.ndim - 1;
      const BroadcastOperand operand{static_cast<int32_t>(g.shape[last]),
                                     static_cast<int32_t>(g.ndim == 2 ? g.strides[other][0] : 0),
                                     static_cast<int32_t>(g.strides[other][last]), other == 1};
      broadcast_kernel<VEC><<<grid_size((n + VEC - 1) / VEC), kBlockSize, 0, stream>>>(
          static_cast<int32_t>(n), operand, f, out, full_ptr, full == 1 ? b : a);
      GENESIS_CUDA_LAUNCH_CHECK();
      return;
    }
  }
  launch_geometry(g, n, stream, f, out, a, b);
}

}  // namespace loops

// --- functors shared by the binary files ------------------------------------------------

// base^exponent with wrap-around, by squaring: the same bits as the CPU's repeated product.
template <class T>
__device__ __forceinline__ T integer_pow(T base, T exponent) {
  if (exponent < 0) return T(0);
  using U = std::make_unsigned_t<T>;
  U result = 1, factor = static_cast<U>(base);
  for (T e = exponent; e > 0; e >>= 1) {
    if (e & 1) result *= factor;
    factor *= factor;
  }
  return static_cast<T>(result);
}

// a (op) b for operands of dtype T, computed in Compute: float_acc_t<T> for floating dtypes
// (a 16-bit float is widened once), T itself otherwise.
template <class T, BinaryOp OP>
struct Binary {
  using Out = std::conditional_t<is_comparison(OP), bool, T>;
  using Compute = std::conditional_t<kIsFloat<T>, float_acc_t<T>, T>;

  __device__ static Compute widen(T v) {
    if constexpr (kIsFloat<T>) {
      return to_acc<Compute>(v);
    } else {
      return v;
    }
  }

  __device__ static Out apply(Compute a, Compute b) {
    if constexpr (kIsFloat<T>) {
      if constexpr (is_comparison(OP)) {
        return binary_compare<Compute>(OP, a, b);
      } else {
        return from_acc<T>(binary_arith<Compute>(OP, a, b));
      }
    } else if constexpr (is_comparison(OP)) {
      return binary_compare<T>(OP, a, b);
    } else if constexpr (std::is_same_v<T, bool>) {
      // bool arithmetic: add/maximum act as logical or, mul/minimum as logical and.
      if constexpr (OP == BinaryOp::add || OP == BinaryOp::maximum)
        return a || b;
      else if constexpr (OP == BinaryOp::mul || OP == BinaryOp::minimum)
        return a && b;
      else
        return a != b;
    } else if constexpr (OP == BinaryOp::div) {
      return b == 0 ? T(0) : static_cast<T>(a / b);
    } else if constexpr (OP == BinaryOp::pow) {
      return integer_pow(a, b);
    } else {
      return binary_arith<T>(OP, a, b);
    }
  }

  __device__ Out operator()(T a, T b) const { return apply(widen(a), widen(b)); }
};

template <class Src, class Dst>
struct Cast {
  __device__ Dst operator()(Src v) const { return cast_value<Dst>(v); }
};

}  // namespace genesis::kernels::cuda
