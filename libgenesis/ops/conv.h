#pragma once
// 2-D convolution (im2col + GEMM) and pooling over NCHW tensors.
#include <array>

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
Tensor avg_pool2d(const Tensor& x, Pool2dOptions options = {});

}  // namespace genesis
