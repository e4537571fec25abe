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

}  // namespace

void binary(BinaryOp op, DType dtype, int ndim, const int64_t* shape, const void* a, const int64_t* a_strides,
            const void* b, const int64_t* b_strides, void* out, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_ALL(dtype, {
    binary_typed<scalar_t>(op, ndim, shape, static_cast<const scalar_t*>(a), a_strides, static_cast<const scalar_t*>(b),
                           b_strides, out, stream);
  });
}

}  // namespace genesis::kernels::cuda
