// CUDA unary, select, fill and random kernels (binary ops: binary.cu, binary_scalar.cu; copies:
// copy.cu). Every op is a functor applied by the loops of elementwise_loops.cuh. The scalar
// formulas are those of the CPU kernels (kernels/common/math.h), evaluated in the same compute
// types, so results agree up to the last ulp of the math library.
#include <cstdint>
#include <type_traits>

#include "kernels/common/math.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/elementwise_loops.cuh"

namespace genesis::kernels::cuda {

namespace {

using loops::launch;

// --- functors --------------------------------------------------------------

// GELU's tanh form for 16-bit inputs as x * sigmoid(2u), which equals 0.5 x (1 + tanh u): with
// the hardware exp it costs a third of tanhf, and at 16 bits an element the arithmetic, not the
// memory, would set the pace. (f32 and f64 keep the shared formula, bit for bit the CPU's.)
__device__ __forceinline__ float gelu_tanh_sigmoid(float x, float& u_prime) {
  const float u = static_cast<float>(kGeluTanhScale) * (x + static_cast<float>(kGeluTanhCubic) * x * x * x);
  u_prime = static_cast<float>(kGeluTanhScale) * (1.0f + 3.0f * static_cast<float>(kGeluTanhCubic) * x * x);
  return 1.0f / (1.0f + __expf(-2.0f * u));
}

template <class T, UnaryOp OP>
struct UnaryFloat {
  float_acc_t<T> p, q;
  __device__ T operator()(T x) const {
    using A = float_acc_t<T>;
    if constexpr (kIsHalf<T> && OP == UnaryOp::gelu_tanh) {
      float u_prime;
      const float v = to_acc<float>(x);
      return from_acc<T>(v * gelu_tanh_sigmoid(v, u_prime));
    } else {
      return from_acc<T>(unary_float<A>(OP, to_acc<A>(x), p, q));
    }
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
    if constexpr (kIsHalf<T> && OP == UnaryOp::gelu_tanh) {
      // d/dx x s(2u) = s + 2 x s (1 - s) u'
      float u_prime;
      const float v = to_acc<float>(x), sig = gelu_tanh_sigmoid(v, u_prime);
      return from_acc<T>(to_acc<float>(grad_y) * (sig + 2.0f * v * sig * (1.0f - sig) * u_prime));
    } else {
      return from_acc<T>(to_acc<A>(grad_y) * unary_float_derivative<A>(OP, to_acc<A>(x), p, q));
    }
  }
};

template <class T>
struct Select {
  __device__ T operator()(bool c, T a, T b) const { return c ? a : b; }
};

// The scalar is converted per element as fill converts it (cast_value from double).
template <class T>
struct SelectScalar {
  double value;
  bool value_if_true;
  __device__ T operator()(bool c, T x) const { return c == value_if_true ? cast_value<T>(value) : x; }
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

void where(DType dtype, int ndim, const int64_t* shape, const bool* cond, const int64_t* cond_strides, const void* a,
           const int64_t* a_strides, const void* b, const int64_t* b_strides, void* out, cudaStream_t stream) {
  ContiguousStrides os(ndim, shape);
  GENESIS_CUDA_DISPATCH_ALL(dtype, {
    launch(ndim, shape, {os.s, cond_strides, a_strides, b_strides}, stream, Select<scalar_t>{},
           static_cast<scalar_t*>(out), cond, static_cast<const scalar_t*>(a), static_cast<const scalar_t*>(b));
  });
}

void where_scalar(DType dtype, int ndim, const int64_t* shape, const bool* cond, const int64_t* cond_strides,
                  const void* x, const int64_t* x_strides, double value, bool value_if_true, void* out,
                  cudaStream_t stream) {
  ContiguousStrides os(ndim, shape);
  GENESIS_CUDA_DISPATCH_ALL(dtype, {
    launch(ndim, shape, {os.s, cond_strides, x_strides}, stream, SelectScalar<scalar_t>{value, value_if_true},
           static_cast<scalar_t*>(out), cond, static_cast<const scalar_t*>(x));
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
