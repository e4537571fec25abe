#pragma once
// CUDA elementwise launchers; same contracts as kernels/cpu/elementwise.h plus a stream.
// Shapes and strides are host arrays (element strides; 0 = broadcast) read at launch: kernels
// receive them by value, nothing is copied to the device. Outputs of unary/binary/where are
// contiguous (or an input itself, for the in-place forms).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/elementwise_ops.h"
#include "kernels/common/random_kind.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cuda {

void unary(UnaryOp op, DType dtype, int ndim, const int64_t* shape, const void* x, const int64_t* x_strides, void* y,
           ElementwiseParams params, cudaStream_t stream);
void unary_backward(UnaryOp op, DType dtype, int64_t n, const void* x, const void* grad_y, void* grad_x,
                    ElementwiseParams params, cudaStream_t stream);
void binary(BinaryOp op, DType dtype, int ndim, const int64_t* shape, const void* a, const int64_t* a_strides,
            const void* b, const int64_t* b_strides, void* out, cudaStream_t stream);
// out (f32) = a (op) b for add, sub and mul where one operand is f32 and the other f16 or bf16,
// widened on load: the f32 result a cast pass would give, without the pass.
bool binary_mixed_supported(BinaryOp op, DType a_dtype, DType b_dtype);
void binary_mixed(BinaryOp op, DType a_dtype, DType b_dtype, int ndim, const int64_t* shape, const void* a,
                  const int64_t* a_strides, const void* b, const int64_t* b_strides, float* out, cudaStream_t stream);
// out = a (op) value, or value (op) a when scalar_first. The scalar is held in the compute
// type: f32 for the 16-bit floats (it is not rounded to the tensor's dtype), f64 for f64, the
// dtype itself (saturated) for integers and bool. out may be a itself when a is contiguous.
void binary_scalar(BinaryOp op, DType dtype, int ndim, const int64_t* shape, const void* a, const int64_t* a_strides,
                   double value, bool scalar_first, void* out, cudaStream_t stream);
void where(DType dtype, int ndim, const int64_t* shape, const bool* cond, const int64_t* cond_strides, const void* a,
           const int64_t* a_strides, const void* b, const int64_t* b_strides, void* out, cudaStream_t stream);
// out = cond ? value : x when value_if_true, else cond ? x : value; value converted as fill does.
void where_scalar(DType dtype, int ndim, const int64_t* shape, const bool* cond, const int64_t* cond_strides,
                  const void* x, const int64_t* x_strides, double value, bool value_if_true, void* out,
                  cudaStream_t stream);
// Contiguous same-dtype copies are a cudaMemcpyAsync; transposed ones (last two dimensions
// swapped) go through shared-memory tiles.
void copy(int ndim, const int64_t* shape, DType src_dtype, const void* src, const int64_t* src_strides,
          DType dst_dtype, void* dst, const int64_t* dst_strides, cudaStream_t stream);
void fill(DType dtype, int64_t n, void* dst, double value, cudaStream_t stream);
// Same element-to-counter mapping as kernels::cpu::random_fill: identical bits on both devices.
void random_fill(RandomKind kind, DType dtype, int64_t n, void* out, uint64_t seed, uint64_t offset, double a,
                 double b, cudaStream_t stream);

}  // namespace genesis::kernels::cuda
