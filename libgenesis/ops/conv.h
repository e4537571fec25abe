#pragma once
// 2-D convolution (im2col + GEMM) and pooling over NCHW tensors.
#include <array>
#include <string>

#include "libgenesis/core/tensor.h"

namespace genesis {

using Pair = std::array<int64_t, 2>;

struct Conv2dOptions {
  Pair stride{1, 1};
  Pair padding{0, 0};
  Pair dilation{1, 1};
  int64_t groups = 1;
};

// x [N, C_in, H, W], weight [C_out, C_in / groups, kH, kW], bias [C_out] (optional).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Conv2dOptions options = {});

struct Pool2dOptions {
  Pair kernel{2, 2};
  Pair stride{0, 0};  // {0, 0} means "equal to kernel"
  Pair padding{0, 0};
};

// Padding counts as -inf for max; avg_pool2d divides by the full window size including
// padding (PyTorch's default count_include_pad = true).
Tensor max_pool2d(const Tensor& x, Pool2dOptions options = {});
// Which kernels run an f32 CPU convolution (a 3x3, 32 -> 64 channel one at batch 128), for
// `genesis info`: "oneDNN 2.6.3 jit:avx512_core" or "im2col + OpenBLAS".
std::string cpu_conv2d_kernels();
Tensor avg_pool2d(const Tensor& x, Pool2dOptions options = {});

}  // namespace genesis
