#pragma once
// CUDA elementwise launchers; same contracts as kernels/cpu/elementwise.h plus a stream.
// Shapes and strides are host arrays (element strides; 0 = broadcast); outputs of
// unary/binary/where are contiguous.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/elementwise_ops.h"
#include "kernels/cpu/random.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cuda {

void unary(UnaryOp op, DType dtype, int ndim, const int64_t* shape, const void* x, const int64_t* x_strides, void* y,
           ElementwiseParams params, cudaStream_t stream);
void unary_backward(UnaryOp op, DType dtype, int64_t n, const void* x, const void* grad_y, void* grad_x,
                    ElementwiseParams params, cudaStream_t stream);
void binary(BinaryOp op, DType dtype, int ndim, const int64_t* shape, const void* a, const int64_t* a_strides,
            const void* b, const int64_t* b_strides, void* out, cudaStream_t stream);
void where(DType dtype, int ndim, const int64_t* shape, const bool* cond, const int64_t* cond_strides, const void* a,
           const int64_t* a_strides, const void* b, const int64_t* b_strides, void* out, cudaStream_t stream);
void copy(int ndim, const int64_t* shape, DType src_dtype, const void* src, const int64_t* src_strides,
          DType dst_dtype, void* dst, const int64_t* dst_strides, cudaStream_t stream);
void fill(DType dtype, int64_t n, void* dst, double value, cudaStream_t stream);
// Same element-to-counter mapping as kernels::cpu::random_fill: identical bits on both devices.
void random_fill(RandomKind kind, DType dtype, int64_t n, void* out, uint64_t seed, uint64_t offset, double a,
                 double b, cudaStream_t stream);

}  // namespace genesis::kernels::cuda
