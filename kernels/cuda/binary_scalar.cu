// CUDA binary ops between a tensor and a host scalar: the scalar travels in the functor (a
// kernel argument), so a scalar form costs one launch and no device allocation or copy.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/elementwise_loops.cuh"

namespace genesis::kernels::cuda {

namespace {

template <class T, BinaryOp OP>
struct ScalarBinary {
  using B = Binary<T, OP>;
  typename B::Compute scalar;
  bool scalar_first;
  __device__ typename B::Out operator()(T x) const {
    const typename B::Compute v = B::widen(x);
    return scalar_first ? B::apply(scalar, v) : B::apply(v, scalar);
  }
};

// value in the compute type on the host: floats round to nearest (as the device would),
// integers saturate (as the device's conversion does, NaN giving 0), bool is "!= 0".
template <class C>
C to_compute(double value) {
  if constexpr (std::is_same_v<C, bool>) {
    return value != 0.0;
  } else if constexpr (std::is_floating_point_v<C>) {
    return static_cast<C>(value);
  } else {
    if (std::isnan(value)) return C(0);
    if (value <= static_cast<double>(std::numeric_limits<C>::min())) return std::numeric_limits<C>::min();
    if (value >= static_cast<double>(std::numeric_limits<C>::max())) return std::numeric_limits<C>::max();
    return static_cast<C>(value);
  }
}

template <class T>
void binary_scalar_typed(BinaryOp op, int ndim, const int64_t* shape, const T* a, const int64_t* as, double value,
                         bool scalar_first, void* out, cudaStream_t stream) {
  ContiguousStrides os(ndim, shape);
  switch (op) {
#define GENESIS_SCALAR_CASE(name)                                                                       \
  case BinaryOp::name: {                                                                                \
    using F = ScalarBinary<T, BinaryOp::name>;                                                          \
    const F f{to_compute<typename F::B::Compute>(value), scalar_first};                                 \
    return loops::launch(ndim, shape, {os.s, as}, stream, f, static_cast<typename F::B::Out*>(out), a); \
  }
    GENESIS_FORALL_BINARY_OPS(GENESIS_SCALAR_CASE)
#undef GENESIS_SCALAR_CASE
  }
}

}  // namespace

void binary_scalar(BinaryOp op, DType dtype, int ndim, const int64_t* shape, const void* a, const int64_t* a_strides,
                   double value, bool scalar_first, void* out, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_ALL(dtype, {
    binary_scalar_typed<scalar_t>(op, ndim, shape, static_cast<const scalar_t*>(a), a_strides, value, scalar_first, out,
                                  stream);
  });
}

}  // namespace genesis::kernels::cuda
