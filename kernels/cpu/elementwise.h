#pragma once
// CPU elementwise kernels: unary, binary (with broadcasting through zero strides),
// where, casting strided copy and fill. Strides are in elements; outputs of
// unary/binary/where are contiguous.
#include <cstdint>

#include "kernels/common/elementwise_ops.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cpu {

void unary(UnaryOp op, DType dtype, int ndim, const int64_t* shape, const void* x, const int64_t* x_strides, void* y,
           ElementwiseParams params);
// grad_x = grad_y * d op(x)/dx, all contiguous with n elements.
void unary_backward(UnaryOp op, DType dtype, int64_t n, const void* x, const void* grad_y, void* grad_x,
                    ElementwiseParams params);
// out has dtype `dtype`, or bool for comparisons.
void binary(BinaryOp op, DType dtype, int ndim, const int64_t* shape, const void* a, const int64_t* a_strides,
            const void* b, const int64_t* b_strides, void* out);
void where(DType dtype, int ndim, const int64_t* shape, const bool* cond, const int64_t* cond_strides, const void* a,
           const int64_t* a_strides, const void* b, const int64_t* b_strides, void* out);
// dst[i] = cast(src[i]) over a shared shape; both sides strided.
void copy(int ndim, const int64_t* shape, DType src_dtype, const void* src, const int64_t* src_strides,
          DType dst_dtype, void* dst, const int64_t* dst_strides);
void fill(DType dtype, int64_t n, void* dst, double value);

}  // namespace genesis::kernels::cpu
