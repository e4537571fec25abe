#pragma once
// CUDA 2-D convolution (im2col + cuBLAS GEMM batched over the samples of a block) and pooling
// over NCHW buffers, with the contracts of kernels/cpu/conv.h and its shapes
// (kernels/common/conv_shape.h). Inputs x are read through their element strides [N, C, H, W];
// every other buffer is contiguous. Convolution computes in f32
// for f32/f16/bf16 and in f64 for f64 (the "compute type"): the column gather widens half
// inputs. Every sum runs in a fixed order (no atomics), so results are deterministic; the
// pooling kernels reproduce the CPU's arithmetic step for step and match it bit for bit.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/conv_shape.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cuda {

// Compute-type elements of the column buffer the convolution kernels need for shape `s`.
int64_t conv2d_column_elements(const Conv2dShape& s);

// y [N, C_out, oH, oW] (dtype) = x (dtype, strided) (*) w + bias. w [C_out, C_in / groups, kH, kW]
// and bias [C_out] (nullable) are in the compute type; the GEMMs write y_acc (compute type, y's
// size), which may be y itself when dtype is the compute type.
void conv2d_forward(DType dtype, const Conv2dShape& s, const void* x, const int64_t* x_strides, const void* w,
                    const void* bias, void* columns, void* y_acc, void* y, cudaStream_t stream);
// grad_x [N, C_in, H, W] (dtype, overwritten) from grad_y [N, C_out, oH, oW] and w, both in the compute type.
void conv2d_backward_input(DType dtype, const Conv2dShape& s, const void* grad_y, const void* w, void* columns,
                           void* grad_x, cudaStream_t stream);
// grad_w (compute type, overwritten) from x (dtype, strided) and grad_y transposed to
// [C_out, N, oH, oW] (compute type), so one GEMM per group sums over the whole block of samples.
void conv2d_backward_weight(DType dtype, const Conv2dShape& s, const void* x, const int64_t* x_strides,
                            const void* grad_y_t, void* columns, void* grad_w, cudaStream_t stream);

// Pooling reads x [N, C, H, W] (s.planes = N * C, `channels` = C) through x_strides.
// y = window maximum, argmax = h * W + w of its first maximum (a NaN counts as the maximum).
void max_pool2d_forward(DType dtype, const Pool2dShape& s, int64_t channels, const void* x, const int64_t* x_strides,
                        void* y, int64_t* argmax, cudaStream_t stream);
// grad_x (overwritten) receives each grad_y element at its argmax position.
void max_pool2d_backward(DType dtype, const Pool2dShape& s, const void* grad_y, const int64_t* argmax, void* grad_x,
                         cudaStream_t stream);
// Window mean with padding counted as zeros (divisor kH * kW).
void avg_pool2d_forward(DType dtype, const Pool2dShape& s, int64_t channels, const void* x, const int64_t* x_strides,
                        void* y, cudaStream_t stream);
// grad_x (overwritten) receives grad_y / (kH * kW) over each window.
void avg_pool2d_backward(DType dtype, const Pool2dShape& s, const void* grad_y, void* grad_x, cudaStream_t stream);

}  // namespace genesis::kernels::cuda
