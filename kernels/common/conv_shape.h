#pragma once
// The shapes of a 2-D convolution and pooling over NCHW buffers, and the sizes of the im2col
// column matrices derived from them: the argument structs of kernels/cpu/conv.h and
// kernels/cuda/conv.h, filled by the op layer (libgenesis/ops/conv.cpp).
#include <cstdint>

namespace genesis::kernels {

struct Conv2dShape {
  int64_t batch = 0, in_channels = 0, height = 0, width = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  int64_t out_h = 0, out_w = 0;
};

struct Pool2dShape {
  int64_t planes = 0, height = 0, width = 0;  // planes = N * C
  int64_t kernel_h = 0, kernel_w = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int64_t out_h = 0, out_w = 0;
};

// Entry (sample, row, position) of a block's column matrix lives at sample * sample_stride +
// row * row_stride + position. Sample-major ([sample][row][position]) gives one GEMM operand per
// sample; row-major across samples ([row][sample][position]) gives one operand spanning a block.
struct ColumnLayout {
  int64_t sample_stride, row_stride;
};

// The convolution as GEMMs: per (sample, group), weight [out_per_group, patch] x columns
// [patch, spatial]; one sample's column matrix holds `rows` = groups * patch rows.
struct ConvSizes {
  int64_t in_per_group, out_per_group, patch, spatial, rows, image;
  explicit ConvSizes(const Conv2dShape& s)
      : in_per_group(s.in_channels / s.groups),
        out_per_group(s.out_channels / s.groups),
        patch(in_per_group * s.kernel_h * s.kernel_w),
        spatial(s.out_h * s.out_w),
        rows(s.in_channels * s.kernel_h * s.kernel_w),
        image(s.height * s.width) {}
  // Column-matrix entries of one sample (all groups).
  int64_t per_sample() const { return rows * spatial; }
  ColumnLayout sample_major() const { return {rows * spatial, spatial}; }
  ColumnLayout row_major(int64_t samples) const { return {spatial, samples * spatial}; }
};

}  // namespace genesis::kernels
