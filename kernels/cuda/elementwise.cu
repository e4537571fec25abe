// CUDA elementwise kernels. Every op is a functor applied by one of two loops: a contiguous
// loop with packed (up to 16-byte) accesses, and a strided loop over the collapsed geometry.
// The scalar formulas are those of the CPU kernels (kernels/common/math.h), evaluated in the
// same compute types, so results agree up to the last ulp of the math library.
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/common/math.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.h"

namespace genesis::kernels::cuda {

namespace {

template <class T, int VEC>
struct Pack {
  T v[VEC];
};

// Pack loads and stores go through a plain vector type of the same size, so that they compile
// to single wide accesses (a copied struct of 16-bit floats would be split into scalar loads).
template <int BYTES>
struct RawVector;
template <>
struct RawVector<16> {
  using type = uint4;
};
template <>
struct RawVector<8> {
  using type = uint2;
};
template <>
struct RawVector<4> {
  using type = uint32_t;
};
template <>
struct RawVector<2> {
  using type = uint16_t;
};

template <int VEC, class T>
__device__ __forceinline__ Pack<T, VEC> load_pack(const T* base, int64_t index) {
  using Raw = typename RawVector<sizeof(T) * VEC>::type;
  Raw raw = reinterpret_cast<const Raw*>(base)[index];
  Pack<T, VEC> pack;
  memcpy(&pack, &raw, sizeof(Raw));
  return pack;
}

template <int VEC, class T>
__device__ __forceinline__ void store_pack(T* base, int64_t index, const Pack<T, VEC>& pack) {
  using Raw = typename RawVector<sizeof(T) * VEC>::type;
  Raw raw;
  memcpy(&raw, &pack, sizeof(Raw));
  reinterpret_cast<Raw*>(base)[index] = raw;
}

template <int VEC, class F, class Out, class... In>
__device__ __forceinline__ Pack<Out, VEC> apply_pack(const F& f, const Pack<In, VEC>&... in) {
  Pack<Out, VEC> out;
#pragma unroll
  for (int j = 0; j < VEC; ++j) out.v[j] = f(in.v[j]...);
  return out;
}

// All operands contiguous and aligned to VEC elements: thread t of the grid-stride loop reads
// pack t of every input (one vector load each, coalesced across the warp) and writes pack t of
// the output; the last n % VEC elements are handled one per thread.
template <int VEC, class F, class Out, class... In>
__global__ void contiguous_kernel(int64_t n, F f, Out* out, const In*... in) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / VEC;
  for (int64_t p = first; p < packs; p += stride) {
    store_pack<VEC>(out, p, apply_pack<VEC, F, Out>(f, load_pack<VEC>(in, p)...));
  }
  for (int64_t i = packs * VEC + first; i < n; i += stride) out[i] = f(in[i]...);
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

template <int VEC, class T>
bool aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * VEC) == 0;
}

// out = f(in...) over `shape`; strides[0] are the output's, strides[k + 1] those of input k.
template <class F, class Out, class... In>
void launch(int ndim, const int64_t* shape, const std::array<const int64_t*, 1 + sizeof...(In)>& strides,
            cudaStream_t stream, F f, Out* out, const In*... in) {
  constexpr int N = 1 + sizeof...(In);
  const int64_t n = numel_of(ndim, shape);
  if (n == 0) return;
  Geometry<N> g(ndim, shape, strides);
  constexpr size_t kWidest = std::max({sizeof(Out), sizeof(In)...});
  constexpr int VEC = static_cast<int>(16 / kWidest);
  if (g.contiguous() && aligned<VEC>(out) && (aligned<VEC>(in) && ...)) {
    contiguous_kernel<VEC><<<grid_size((n + VEC - 1) / VEC), kBlockSize, 0, stream>>>(n, f, out, in...);
  } else if (g.fits_int32(n)) {
    strided_kernel<int32_t><<<grid_size(n), kBlockSize, 0, stream>>>(static_cast<int32_t>(n), g, f, out, in...);
  } else {
    strided_kernel<int64_t><<<grid_size(n), kBlockSize, 0, stream>>>(n, g, f, out, in...);
  }
  GENESIS_CUDA_LAUNCH_CHECK();
}

// --- functors --------------------------------------------------------------

template <class T, UnaryOp OP>
struct UnaryFloat {
  float_acc_t<T> p, q;
  __device__ T operator()(T x) const {
    using A = float_acc_t<T>;
    return from_acc<T>(unary_float<A>(OP, to_acc<A>(x), p, q));
  }
};

// Integer forms of the ops that keep integer dtypes (the CPU kernel's unary_integer).
template <class T, UnaryOp OP>
struct UnaryInteger {
  double lo, hi;
  __device__ T operator()(T x) const {
    if constexpr (OP == UnaryOp::neg) {
      return static_cast<T>(-x);
    } else if constexpr (OP == UnaryOp::abs) {
      return x < 0 ? static_cast<T>(-x) : x;
    } else if constexpr (OP == UnaryOp::relu) {
      return x > 0 ? x : T(0);
    } else if constexpr (OP == UnaryOp::sign) {
      return static_cast<T>((x > 0) - (x < 0));
    } else {
      static_assert(OP == UnaryOp::clamp);
      double y = static_cast<double>(x);
      if (lo == lo && y < lo) y = ::ceil(lo);  // NaN bound = unbounded
      if (hi == hi && y > hi) y = ::floor(hi);
      return static_cast<T>(y);
    }
  }
};

template <class T, UnaryOp OP>
struct UnaryDerivative {
  float_acc_t<T> p, q;
  __device__ T operator()(T x, T grad_y) const {
    using A = float_acc_t<T>;
    return from_acc<T>(to_acc<A>(grad_y) * unary_float_derivative<A>(OP, to_acc<A>(x), p, q));
  }
};

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

template <class T, BinaryOp OP>
struct Binary {
  using Out = std::conditional_t<is_comparison(OP), bool, T>;
  __device__ Out operator()(T a, T b) const {
    if constexpr (kIsFloat<T>) {
      using A = float_acc_t<T>;
      if constexpr (is_comparison(OP)) {
        return binary_compare<A>(OP, to_acc<A>(a), to_acc<A>(b));
      } else {
        return from_acc<T>(binary_arith<A>(OP, to_acc<A>(a), to_acc<A>(b)));
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
};

template <class T>
struct Select {
  __device__ T operator()(bool c, T a, T b) const { return c ? a : b; }
};

template <class Src, class Dst>
struct Cast {
  __device__ Dst operator()(Src v) const { return cast_value<Dst>(v); }
};

template <class T>
struct Constant {
  double value;
  __device__ T operator()() const { return cast_value<T>(value); }
};

// --- per-op dispatch ---------------------------------------------------------

template <class T>
void unary_typed(UnaryOp op, int ndim, const int64_t* shape, const T* x, const int64_t* xs, T* y,
                 ElementwiseParams params, cudaStream_t stream) {
  ContiguousStrides ys(ndim, shape);
  std::array<const int64_t*, 2> strides{ys.s, xs};
  if constexpr (kIsFloat<T>) {
    using A = float_acc_t<T>;
    const A p = static_cast<A>(params.a), q = static_cast<A>(params.b);
    switch (op) {
#define GENESIS_UNARY_CASE(name) \
  case UnaryOp::name:            \
    return launch(ndim, shape, strides, stream, UnaryFloat<T, UnaryOp::name>{p, q}, y, x);
      GENESIS_FORALL_UNARY_OPS(GENESIS_UNARY_CASE)
#undef GENESIS_UNARY_CASE
    }
  } else {
    switch (op) {
#define GENESIS_UNARY_INT_CASE(name) \
  case UnaryOp::name:                \
    return launch(ndim, shape, strides, stream, UnaryInteger<T, UnaryOp::name>{params.a, params.b}, y, x);
      GENESIS_UNARY_INT_CASE(neg)
      GENESIS_UNARY_INT_CASE(abs)
      GENESIS_UNARY_INT_CASE(relu)
      GENESIS_UNARY_INT_CASE(sign)
      GENESIS_UNARY_INT_CASE(clamp)
#undef GENESIS_UNARY_INT_CASE
      default:  // the CPU kernel leaves integers unchanged under the floating-only ops
        return launch(ndim, shape, strides, stream, Cast<T, T>{}, y, x);
    }
  }
}

template <class T>
void unary_backward_typed(UnaryOp op, int64_t n, const T* x, const T* grad_y, T* grad_x, ElementwiseParams params,
                          cudaStream_t stream) {
  using A = float_acc_t<T>;
  const A p = static_cast<A>(params.a), q = static_cast<A>(params.b);
  const int64_t unit = 1;
  std::array<const int64_t*, 3> strides{&unit, &unit, &unit};
  switch (op) {
#define GENESIS_UNARY_BWD_CASE(name) \
  case UnaryOp::name:                \
    return launch(1, &n, strides, stream, UnaryDerivative<T, UnaryOp::name>{p, q}, grad_x, x, grad_y);
    GENESIS_FORALL_UNARY_OPS(GENESIS_UNARY_BWD_CASE)
#undef GENESIS_UNARY_BWD_CASE
  }
}

template <class T>
void binary_typed(BinaryOp op, int ndim, const int64_t* shape, const T* a, const int64_t* as, const T* b,
                  const int64_t* bs, void* out, cudaStream_t stream) {
  ContiguousStrides os(ndim, shape);
  std::array<const int64_t*, 3> strides{os.s, as, bs};
  switch (op) {
#define GENESIS_BINARY_CASE(name)                                                               \
  case BinaryOp::name: {                                                                        \
    using F = Binary<T, BinaryOp::name>;                                                        \
    return launch(ndim, shape, strides, stream, F{}, static_cast<typename F::Out*>(out), a, b); \
  }
    GENESIS_FORALL_BINARY_OPS(GENESIS_BINARY_CASE)
#undef GENESIS_BINARY_CASE
  }
}

// One thread per Philox counter, i.e. four consecutive elements; the element-to-counter map and
// the arithmetic are those of kernels/cpu/random.cpp, in double.
template <class T>
__global__ void random_kernel(RandomKind kind, int64_t n, T* out, uint64_t seed, uint64_t offset, double a, double b) {
  const int64_t counters = (n + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < counters; c += stride) {
    const Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(c), 0, seed);
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = c * 4 + lane;
      if (i >= n) break;
      double v = 0.0;
      switch (kind) {
        case RandomKind::uniform:
          v = a + (b - a) * (1.0 - static_cast<double>(uint_to_unit_float(r.v[lane])));
          break;
        case RandomKind::normal: {
          const int base = lane & ~1;
          double u1 = uint_to_unit_float(r.v[base]), u2 = uint_to_unit_float(r.v[base + 1]);
          double radius = ::sqrt(-2.0 * ::log(u1));
          double angle = 6.283185307179586 * u2;
          v = a + b * radius * ((lane & 1) ? ::sin(angle) : ::cos(angle));
          break;
        }
        case RandomKind::randint: {
          auto range = static_cast<uint64_t>(b - a);
          v = a + static_cast<double>((static_cast<uint64_t>(r.v[lane]) * range) >> 32);
          break;
        }
        case RandomKind::bernoulli:
          v = uint_to_unit_float(r.v[lane]) <= a ? 1.0 : 0.0;
          break;
      }
      if constexpr (std::is_same_v<T, bool>) {
        out[i] = v != 0.0;
      } else if constexpr (kIsFloat<T>) {
        out[i] = from_acc<T>(static_cast<float_acc_t<T>>(v));
      } else {
        out[i] = static_cast<T>(static_cast<int64_t>(v));
      }
    }
  }
}

}  // namespace

void unary(UnaryOp op, DType dtype, int ndim, const int64_t* shape, const void* x, const int64_t* x_strides, void* y,
           ElementwiseParams params, cudaStream_t stream) {
  if (dtype == DType::boolean) throw_unsupported_dtype("unary", dtype);
  GENESIS_CUDA_DISPATCH_ALL(dtype, {
    if constexpr (!std::is_same_v<scalar_t, bool>) {
      unary_typed<scalar_t>(op, ndim, shape, static_cast<const scalar_t*>(x), x_strides, static_cast<scalar_t*>(y),
                            params, stream);
    }
  });
}

void unary_backward(UnaryOp op, DType dtype, int64_t n, const void* x, const void* grad_y, void* grad_x,
                    ElementwiseParams params, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "unary backward", {
    unary_backward_typed<scalar_t>(op, n, static_cast<const scalar_t*>(x), static_cast<const scalar_t*>(grad_y),
                                   static_cast<scalar_t*>(grad_x), params, stream);
  });
}

void binary(BinaryOp op, DType dtype, int ndim, const int64_t* shape, const void* a, const int64_t* a_strides,
            const void* b, const int64_t* b_strides, void* out, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_ALL(dtype, {
    binary_typed<scalar_t>(op, ndim, shape, static_cast<const scalar_t*>(a), a_strides, static_cast<const scalar_t*>(b),
                           b_strides, out, stream);
  });
}

void where(DType dtype, int ndim, const int64_t* shape, const bool* cond, const int64_t* cond_strides, const void* a,
           const int64_t* a_strides, const void* b, const int64_t* b_strides, void* out, cudaStream_t stream) {
  ContiguousStrides os(ndim, shape);
  GENESIS_CUDA_DISPATCH_ALL(dtype, {
    launch(ndim, shape, {os.s, cond_strides, a_strides, b_strides}, stream, Select<scalar_t>{},
           static_cast<scalar_t*>(out), cond, static_cast<const scalar_t*>(a), static_cast<const scalar_t*>(b));
  });
}

void copy(int ndim, const int64_t* shape, DType src_dtype, const void* src, const int64_t* src_strides, DType dst_dtype,
          void* dst, const int64_t* dst_strides, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_ALL(src_dtype, {
    using Src = scalar_t;
    GENESIS_CUDA_DISPATCH_ALL(dst_dtype, {
      launch(ndim, shape, {dst_strides, src_strides}, stream, Cast<Src, scalar_t>{}, static_cast<scalar_t*>(dst),
             static_cast<const Src*>(src));
    });
  });
}

void fill(DType dtype, int64_t n, void* dst, double value, cudaStream_t stream) {
  const int64_t unit = 1;
  GENESIS_CUDA_DISPATCH_ALL(
      dtype, { launch(1, &n, {&unit}, stream, Constant<scalar_t>{value}, static_cast<scalar_t*>(dst)); });
}

void random_fill(RandomKind kind, DType dtype, int64_t n, void* out, uint64_t seed, uint64_t offset, double a, double b,
                 cudaStream_t stream) {
  if (n <= 0) return;
  GENESIS_CUDA_DISPATCH_ALL(dtype, {
    random_kernel<scalar_t>
        <<<grid_size((n + 3) / 4), kBlockSize, 0, stream>>>(kind, n, static_cast<scalar_t*>(out), seed, offset, a, b);
    GENESIS_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace genesis::kernels::cuda
