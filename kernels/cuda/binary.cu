// CUDA binary ops on two tensors (broadcasting through zero strides): the contiguous loop, the
// broadcast loop for bias rows / columns / 0-d operands, or the strided loop
// (elementwise_loops.cuh). Formulas: kernels/common/math.h, as on the CPU.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/elementwise_loops.cuh"

namespace genesis::kernels::cuda {

namespace {

template <class T>
void binary_typed(BinaryOp op, int ndim, const int64_t* shape, const T* a, const int64_t* as, const T* b,
                  const int64_t* bs, void* out, cudaStream_t stream) {
  ContiguousStrides os(ndim, shape);
  const std::array<const int64_t*, 3> strides{os.s, as, bs};
  switch (op) {
#define GENESIS_BINARY_CASE(name)                                                                             \
  case BinaryOp::name: {                                                                                      \
    using F = Binary<T, BinaryOp::name>;                                                                      \
    return loops::launch_binary(ndim, shape, strides, stream, F{}, static_cast<typename F::Out*>(out), a, b); \
  }
    GENESIS_FORALL_BINARY_OPS(GENESIS_BINARY_CASE)
#undef GENESIS_BINARY_CASE
  }
}

// An f32 result of operands of types A and B (float, __half or __nv_bfloat16), each widened
// exactly to f32 first.
template <class A, class B, BinaryOp OP>
struct MixedBinary {
  __device__ float operator()(A a, B b) const { return binary_arith<float>(OP, to_acc<float>(a), to_acc<float>(b)); }
};

template <class A, class B>
void binary_mixed_typed(BinaryOp op, int ndim, const int64_t* shape, const A* a, const int64_t* as, const B* b,
                        const int64_t* bs, float* out, cudaStream_t stream) {
  ContiguousStrides os(ndim, shape);
  const std::array<const int64_t*, 3> strides{os.s, as, bs};
  switch (op) {
    case BinaryOp::add:
      return loops::launch(ndim, shape, strides, stream, MixedBinary<A, B, BinaryOp::add>{}, out, a, b);
    case BinaryOp::sub:
      return loops::launch(ndim, shape, strides, stream, MixedBinary<A, B, BinaryOp::sub>{}, out, a, b);
    default:  // mul (binary_mixed admits add, sub and mul only)
      return loops::launch(ndim, shape, strides, stream, MixedBinary<A, B, BinaryOp::mul>{}, out, a, b);
  }
}

// Calls f with a typed null pointer of the 16-bit dtype.
template <class F>
void with_half_type(DType dtype, F&& f) {
  if (dtype == DType::bf16) {
    f(static_cast<const __nv_bfloat16*>(nullptr));
  } else {
    f(static_cast<const __half*>(nullptr));
  }
}

}  // namespace

bool binary_mixed_supported(BinaryOp op, DType a_dtype, DType b_dtype) {
  if (op != BinaryOp::add && op != BinaryOp::sub && op != BinaryOp::mul) return false;
  return (a_dtype == DType::f32 && is_half(b_dtype)) || (is_half(a_dtype) && b_dtype == DType::f32);
}

void binary_mixed(BinaryOp op, DType a_dtype, DType b_dtype, int ndim, const int64_t* shape, const void* a,
                  const int64_t* a_strides, const void* b, const int64_t* b_strides, float* out, cudaStream_t stream) {
  if (!binary_mixed_supported(op, a_dtype, b_dtype))
    throw_unsupported_dtype("binary_mixed (add, sub or mul of an f32 and a 16-bit operand)", b_dtype);
  if (a_dtype == DType::f32) {
    with_half_type(b_dtype, [&]<class H>(const H*) {
      binary_mixed_typed(op, ndim, shape, static_cast<const float*>(a), a_strides, static_cast<const H*>(b), b_strides,
                         out, stream);
    });
  } else {
    with_half_type(a_dtype, [&]<class H>(const H*) {
      binary_mixed_typed(op, ndim, shape, static_cast<const H*>(a), a_strides, static_cast<const float*>(b), b_strides,
                         out, stream);
    });
  }
}

void binary(BinaryOp op, DType dtype, int ndim, const int64_t* shape, const void* a, const int64_t* a_strides,
            const void* b, const int64_t* b_strides, void* out, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_ALL(dtype, {
    binary_typed<scalar_t>(op, ndim, shape, static_cast<const scalar_t*>(a), a_strides, static_cast<const scalar_t*>(b),
                           b_strides, out, stream);
  });
}

}  // namespace genesis::kernels::cuda
