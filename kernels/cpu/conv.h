#pragma once
// CPU 2-D convolution and pooling over contiguous NCHW buffers. Convolution kernels take f32
// or f64 (the op layer widens f16/bf16 to f32); f32 runs through oneDNN's primitives where
// genesis was built with it (conv_dnnl.cpp; GENESIS_CPU_CONV=im2col forces the fallback), f64
// and shapes oneDNN refuses through im2col + OpenBLAS GEMM per sample and group. Pooling
// kernels take every floating dtype and compute in acc_t.
#include <cstdint>
#include <string>

#include "kernels/common/conv_shape.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cpu {

using kernels::Conv2dShape;
using kernels::Pool2dShape;

// y [N, C_out, oH, oW] = x [N, C_in, H, W] (*) w [C_out, C_in / groups, kH, kW] (+ bias [C_out] when non-null).
void conv2d_forward(DType dtype, const Conv2dShape& s, const void* x, const void* w, const void* bias, void* y);
// The gradients conv2d's backward computes, each where its pointer is non-null (overwritten,
// not accumulated):
//   x     [N, C_in, H, W] from grad_y and w;
//   w     [C_out, C_in / groups, kH, kW] from x and grad_y, summed over the batch;
//   bias  [C_out], the sum of grad_y over the batch and pixels of each channel.
struct Conv2dGradients {
  void* x = nullptr;
  void* w = nullptr;
  void* bias = nullptr;
};
// x may be null when out.w is, w when out.x is.
void conv2d_backward(DType dtype, const Conv2dShape& s, const void* grad_y, const void* x, const void* w,
                     Conv2dGradients out);

// The f32 path through oneDNN: false when it does not take the shape (or genesis was built
// without oneDNN), and the caller computes it otherwise. Same contracts as above.
bool conv_dnnl_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y);
// grad_bias only together with grad_w (the weights' primitive sums it while reading grad_y).
bool conv_dnnl_backward(const Conv2dShape& s, const float* grad_y, const float* x, const float* w, float* grad_x,
                        float* grad_w, float* grad_bias);
// Which f32 convolution runs for a shape: "oneDNN 2.6.3 jit:avx2", "im2col + OpenBLAS" (for
// `genesis info` and the bench).
std::string conv2d_implementation(const Conv2dShape& s);


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
