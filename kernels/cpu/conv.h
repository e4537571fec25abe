#pragma once
// CPU 2-D convolution (im2col + OpenBLAS GEMM per sample and group) and pooling over
// contiguous NCHW buffers. Convolution kernels take f32 or f64 (the op layer widens
// f16/bf16 to f32); pooling kernels take every floating dtype and compute in acc_t.
#include <cstdint>

#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cpu {

struct Conv2dShape {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  int64_t out_h = 0, out_w = 0;
};

// y [N, C_out, oH, oW] = x [N, C_in, H, W] (*) w [C_out, C_in / groups, kH, kW] (+ bias [C_out] when non-null).
void conv2d_forward(DType dtype, const Conv2dShape& s, const void* x, const void* w, const void* bias, void* y);
// grad_x [N, C_in, H, W] from grad_y and w (overwritten, not accumulated).
void conv2d_backward_input(DType dtype, const Conv2dShape& s, const void* grad_y, const void* w, void* grad_x);
// grad_w [C_out, C_in / groups, kH, kW] from x and grad_y, summed over the batch in order.
void conv2d_backward_weight(DType dtype, const Conv2dShape& s, const void* x, const void* grad_y, void* grad_w);

struct Pool2dShape {
  int64_t planes = 0, height = 0, width = 0;  // planes = N * C
  int64_t kernel_h = 0, kernel_w = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int64_t out_h = 0, out_w = 0;
};

// y[p, oh, ow] = max over the window; argmax[p, oh, ow] = h * W + w of the first maximum
// (a NaN counts as the maximum). Padding never wins.
void max_pool2d_forward(DType dtype, const Pool2dShape& s, const void* x, void* y, int64_t* argmax);
// grad_x (overwritten) receives each grad_y element at its argmax position.
void max_pool2d_backward(DType dtype, const Pool2dShape& s, const void* grad_y, const int64_t* argmax, void* grad_x);
// Window mean with padding counted as zeros (divisor kH * kW).
void avg_pool2d_forward(DType dtype, const Pool2dShape& s, const void* x, void* y);
// grad_x (overwritten) receives grad_y / (kH * kW) over each window.
void avg_pool2d_backward(DType dtype, const Pool2dShape& s, const void* grad_y, void* grad_x);

}  // namespace genesis::kernels::cpu
