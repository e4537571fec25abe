// CUDA convolution and pooling. Convolution: im2col gathers the strided input into a
// compute-type column matrix, cuBLAS multiplies it with the weight (batched over the samples
// of a block, one call per group), and the input gradient runs col2im as a gather: each input
// pixel sums the column entries read from it, taps in the CPU's order, so no two threads write
// one element. Pooling: one thread per output element forward; backward, one thread per input
// element visits the windows covering it in ascending order and rounds after each addition as
// the CPU's scatter does.
#include <algorithm>
#include <climits>
#include <initializer_list>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv.h"
#include "kernels/cuda/linalg.h"

namespace genesis::kernels::cuda {

namespace {

// Column-buffer budget in elements (256 MiB of f32): further samples run in further blocks.
constexpr int64_t kColumnBudget = int64_t{1} << 26;

// 32-bit index arithmetic suffices while every extent stays far below 2^31 (headroom for the
// grid-stride increment and for sums of two extents).
bool fits_int32(std::initializer_list<int64_t> extents) {
  for (int64_t e : extents)
    if (e > INT32_MAX / 4) return false;
  return true;
}

struct InputStrides {
  int64_t n, c, h, w;
  explicit InputStrides(const int64_t* s) : n(s[0]), c(s[1]), h(s[2]), w(s[3]) {}
};

int64_t samples_per_block(const Conv2dShape& s) {
  const ConvSizes z(s);
  return std::clamp<int64_t>(kColumnBudget / std::max<int64_t>(z.rows * z.spatial, 1), 1,
                             std::max<int64_t>(s.batch, 1));
}

// The sizes of a sliding window over `channels` image planes, in the kernels' index type: what
// convolution and pooling share (Conv2dShape and Pool2dShape name these fields alike).
template <class Index>
struct WindowDims {
  Index channels, height, width, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, out_h, out_w;
  template <class Shape>
  WindowDims(const Shape& s, int64_t channel_count)
      : channels(static_cast<Index>(channel_count)),
        height(static_cast<Index>(s.height)),
        width(static_cast<Index>(s.width)),
        kernel_h(static_cast<Index>(s.kernel_h)),
        kernel_w(static_cast<Index>(s.kernel_w)),
        stride_h(static_cast<Index>(s.stride_h)),
        stride_w(static_cast<Index>(s.stride_w)),
        pad_h(static_cast<Index>(s.pad_h)),
        pad_w(static_cast<Index>(s.pad_w)),
        out_h(static_cast<Index>(s.out_h)),
        out_w(static_cast<Index>(s.out_w)) {}
};

template <class Index>
struct ConvDims : WindowDims<Index> {
  Index dilation_h, dilation_w;
  explicit ConvDims(const Conv2dShape& s)
      : WindowDims<Index>(s, s.in_channels),
        dilation_h(static_cast<Index>(s.dilation_h)),
        dilation_w(static_cast<Index>(s.dilation_w)) {}
};

bool conv_fits_int32(const Conv2dShape& s, int64_t items) {
  return fits_int32(
      {items, s.height + 2 * s.pad_h, s.width + 2 * s.pad_w, s.stride_h, s.stride_w, s.dilation_h, s.dilation_w});
}

// One thread per column entry: consecutive threads write consecutive positions of a row and
// read one input row with the stride step. Memory-bound.
template <class Index, class T, class A>
__global__ void im2col_kernel(ConvDims<Index> d, Index samples, const T* x, InputStrides xs, ColumnLayout layout,
                              A* columns) {
  const Index spatial = d.out_h * d.out_w, rows = d.channels * d.kernel_h * d.kernel_w;
  const Index total = samples * rows * spatial;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index position = i % spatial, sample_row = i / spatial;
    const Index row = sample_row % rows, n = sample_row / rows;
    const Index kj = row % d.kernel_w, ki = (row / d.kernel_w) % d.kernel_h, c = row / (d.kernel_w * d.kernel_h);
    const Index ih = (position / d.out_w) * d.stride_h - d.pad_h + ki * d.dilation_h;
    const Index iw = (position % d.out_w) * d.stride_w - d.pad_w + kj * d.dilation_w;
    A v = 0;
    if (ih >= 0 && ih < d.height && iw >= 0 && iw < d.width)
      v = to_acc<A>(x[n * xs.n + c * xs.c + ih * xs.h + iw * xs.w]);
    columns[n * layout.sample_stride + row * layout.row_stride + position] = v;
  }
}

// One thread per input-gradient element: it sums the column entries im2col read from its
// pixel, taps (ki, kj) ascending like the CPU's col2im, and writes the element once.
template <class Index, class T, class A>
__global__ void col2im_kernel(ConvDims<Index> d, Index samples, const A* columns, ColumnLayout layout, T* image) {
  const Index plane_size = d.height * d.width, taps = d.kernel_h * d.kernel_w;
  const Index total = samples * d.channels * plane_size;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index w = i % d.width, h = (i / d.width) % d.height, plane = i / plane_size;
    const Index c = plane % d.channels, n = plane / d.channels;
    const A* rows = columns + n * layout.sample_stride + c * taps * layout.row_stride;
    A sum = 0;
    for (Index ki = 0; ki < d.kernel_h; ++ki) {
      const Index th = h + d.pad_h - ki * d.dilation_h;
      if (th < 0) break;  // later taps reach further up
      if (th % d.stride_h != 0 || th / d.stride_h >= d.out_h) continue;
      for (Index kj = 0; kj < d.kernel_w; ++kj) {
        const Index tw = w + d.pad_w - kj * d.dilation_w;
        if (tw < 0) break;
        if (tw % d.stride_w != 0 || tw / d.stride_w >= d.out_w) continue;
        sum += rows[(ki * d.kernel_w + kj) * layout.row_stride + (th / d.stride_h) * d.out_w + tw / d.stride_w];
      }
    }
    image[i] = from_acc<T>(sum);
  }
}

// y = y_acc + bias[channel] (bias nullable), rounded to T; y may alias y_acc.
template <class Index, class T, class A>
__global__ void conv_output_kernel(Index total, Index spatial, Index channels, const A* y_acc, const A* bias, T* y) {
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    A v = y_acc[i];
    if (bias) v += bias[(i / spatial) % channels];
    y[i] = from_acc<T>(v);
  }
}

template <class T, class A>
void im2col(const Conv2dShape& s, int64_t samples, const T* x, InputStrides xs, ColumnLayout layout, A* columns,
            cudaStream_t stream) {
  const ConvSizes z(s);
  const int64_t total = samples * z.rows * z.spatial;
  if (total == 0) return;
  with_index_type(conv_fits_int32(s, total), [&]<class Index>() {
    im2col_kernel<Index><<<grid_size(total), kBlockSize, 0, stream>>>(ConvDims<Index>(s), static_cast<Index>(samples),
                                                                      x, xs, layout, columns);
  });
  GENESIS_CUDA_LAUNCH_CHECK();
}

template <class T, class A>
void col2im(const Conv2dShape& s, int64_t samples, const A* columns, ColumnLayout layout, T* image,
            cudaStream_t stream) {
  const ConvSizes z(s);
  const int64_t total = samples * s.in_channels * s.height * s.width;
  if (total == 0) return;
  with_index_type(conv_fits_int32(s, std::max(total, samples * z.rows * z.spatial)), [&]<class Index>() {
    col2im_kernel<Index><<<grid_size(total), kBlockSize, 0, stream>>>(ConvDims<Index>(s), static_cast<Index>(samples),
                                                                      columns, layout, image);
  });
  GENESIS_CUDA_LAUNCH_CHECK();
}

template <class A>
constexpr DType compute_dtype() {
  return std::is_same_v<A, double> ? DType::f64 : DType::f32;
}

// out_i = W_g in_i (W_g^T in_i when kTransposed) for the `count` samples i of a block, in one
// batched gemm: the group's weight W_g [out_per_group, patch] serves every sample (batch stride 0);
// in_i and out_i have `spatial` columns and lie in_stride and out_stride elements apart.
template <bool kTransposed, class A>
void weight_gemm(const ConvSizes& z, const A* w, int64_t g, const A* in, int64_t in_stride, A* out, int64_t out_stride,
                 int64_t count, cudaStream_t stream) {
  GemmArgs args;
  args.trans_a = kTransposed;
  args.m = kTransposed ? z.patch : z.out_per_group;
  args.n = z.spatial;
  args.k = kTransposed ? z.out_per_group : z.patch;
  args.a = w + g * z.out_per_group * z.patch;
  args.lda = z.patch;
  args.stride_a = 0;
  args.b = in;
  args.ldb = z.spatial;
  args.stride_b = in_stride;
  args.c = out;
  args.ldc = z.spatial;
  args.stride_c = out_stride;
  args.batch = count;
  gemm(compute_dtype<A>(), args, stream);
}

template <class T, class A>
void conv2d_forward_typed(const Conv2dShape& s, const T* x, InputStrides xs, const A* w, const A* bias, A* columns,
                          A* y_acc, T* y, cudaStream_t stream) {
  const ConvSizes z(s);
  const int64_t block = samples_per_block(s);
  const ColumnLayout layout = z.sample_major();
  for (int64_t first = 0; first < s.batch; first += block) {
    const int64_t count = std::min(block, s.batch - first);
    im2col(s, count, x + first * xs.n, xs, layout, columns, stream);
    for (int64_t g = 0; g < s.groups; ++g) {
      // y_g[n] [out_per_group, spatial] = W_g [out_per_group, patch] x columns_g[n] [patch, spatial]
      weight_gemm<false>(z, w, g, columns + g * z.patch * z.spatial, layout.sample_stride,
                         y_acc + (first * s.out_channels + g * z.out_per_group) * z.spatial, s.out_channels * z.spatial,
                         count, stream);
    }
  }
  const int64_t total = s.batch * s.out_channels * z.spatial;
  const bool in_place = static_cast<const void*>(y_acc) == static_cast<const void*>(y);
  if (total == 0 || (in_place && !bias)) return;
  with_index_type(fits_int32({total}), [&]<class Index>() {
    conv_output_kernel<Index><<<grid_size(total), kBlockSize, 0, stream>>>(
        static_cast<Index>(total), static_cast<Index>(z.spatial), static_cast<Index>(s.out_channels), y_acc, bias, y);
  });
  GENESIS_CUDA_LAUNCH_CHECK();
}

template <class T, class A>
void conv2d_backward_input_typed(const Conv2dShape& s, const A* grad_y, const A* w, A* columns, T* grad_x,
                                 cudaStream_t stream) {
  const ConvSizes z(s);
  const int64_t block = samples_per_block(s);
  const ColumnLayout layout = z.sample_major();
  for (int64_t first = 0; first < s.batch; first += block) {
    const int64_t count = std::min(block, s.batch - first);
    for (int64_t g = 0; g < s.groups; ++g) {
      // columns_g[n] [patch, spatial] = W_g^T [patch, out_per_group] x grad_y_g[n] [out_per_group, spatial]
      weight_gemm<true>(z, w, g, grad_y + (first * s.out_channels + g * z.out_per_group) * z.spatial,
                        s.out_channels * z.spatial, columns + g * z.patch * z.spatial, layout.sample_stride, count,
                        stream);
    }
    col2im(s, count, columns, layout, grad_x + first * s.in_channels * s.height * s.width, stream);
  }
}

template <class T, class A>
void conv2d_backward_weight_typed(const Conv2dShape& s, const T* x, InputStrides xs, const A* grad_y_t, A* columns,
                                  A* grad_w, cudaStream_t stream) {
  const ConvSizes z(s);
  const int64_t block = samples_per_block(s);
  if (s.batch == 0) {
    GENESIS_CUDA_CHECK(cudaMemsetAsync(grad_w, 0, static_cast<size_t>(s.out_channels * z.patch) * sizeof(A), stream));
    return;
  }
  for (int64_t first = 0; first < s.batch; first += block) {
    const int64_t count = std::min(block, s.batch - first);
    const ColumnLayout layout = z.row_major(count);
    im2col(s, count, x + first * xs.n, xs, layout, columns, stream);
    for (int64_t g = 0; g < s.groups; ++g) {
      // grad_w_g [out_per_group, patch] (+)= grad_y_t_g [out_per_group, count * spatial] x columns_g^T
      GemmArgs args;
      args.trans_b = true;
      args.m = z.out_per_group;
      args.n = z.patch;
      args.k = count * z.spatial;
      args.a = grad_y_t + g * z.out_per_group * s.batch * z.spatial + first * z.spatial;
      args.lda = s.batch * z.spatial;
      args.b = columns + g * z.patch * layout.row_stride;
      args.ldb = layout.row_stride;
      args.c = grad_w + g * z.out_per_group * z.patch;
      args.ldc = z.patch;
      args.beta = first == 0 ? 0.0 : 1.0;
      gemm(compute_dtype<A>(), args, stream);
    }
  }
}

bool pool_fits_int32(const Pool2dShape& s, int64_t items) {
  return fits_int32({items, s.planes * s.height * s.width, s.planes * s.out_h * s.out_w, s.height + 2 * s.pad_h,
                     s.width + 2 * s.pad_w, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w});
}

// One thread per output element; its window reads kernel_h rows of one (strided) plane.
template <bool kMax, class Index, class T>
__global__ void pool_forward_kernel(WindowDims<Index> d, Index planes, const T* x, InputStrides xs, T* y,
                                    int64_t* argmax) {
  using A = float_acc_t<T>;
  const Index outputs = d.out_h * d.out_w, total = planes * outputs;
  const A divisor = static_cast<A>(d.kernel_h * d.kernel_w);
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index ow = i % d.out_w, oh = (i / d.out_w) % d.out_h, p = i / outputs;
    const T* plane = x + (p / d.channels) * xs.n + (p % d.channels) * xs.c;
    const Index h_start = oh * d.stride_h - d.pad_h, w_start = ow * d.stride_w - d.pad_w;
    const Index h_begin = h_start < 0 ? 0 : h_start,
                h_end = h_start + d.kernel_h < d.height ? h_start + d.kernel_h : d.height;
    const Index w_begin = w_start < 0 ? 0 : w_start,
                w_end = w_start + d.kernel_w < d.width ? w_start + d.kernel_w : d.width;
    A value = 0;  // the maximum, or the sum
    Index best_at = -1;
    for (Index h = h_begin; h < h_end; ++h) {
      for (Index w = w_begin; w < w_end; ++w) {
        const A v = to_acc<A>(plane[h * xs.h + w * xs.w]);
        if constexpr (kMax) {
          if (best_at < 0 || v > value || (isnan(v) && !isnan(value))) {
            value = v;
            best_at = h * d.width + w;
          }
        } else {
          value += v;
        }
      }
    }
    if constexpr (kMax) {
      y[i] = from_acc<T>(value);
      argmax[i] = best_at;
    } else {
      y[i] = from_acc<T>(value / divisor);
    }
  }
}

// Windows along one dimension that cover input position `at`: first..last (empty when last < first).
template <class Index>
__device__ __forceinline__ void covering_windows(Index at, Index pad, Index kernel, Index stride, Index out,
                                                 Index& first, Index& last) {
  const Index earliest_start = at + pad - kernel + 1;
  first = earliest_start <= 0 ? 0 : (earliest_start + stride - 1) / stride;
  last = (at + pad) / stride < out - 1 ? (at + pad) / stride : out - 1;
}

// One thread per input-gradient element: it visits the windows covering its pixel in ascending
// order, adding (max: where its pixel is the argmax; avg: always grad / (kH * kW)) and rounding
// to T after each addition, exactly the CPU's per-plane scatter.
template <bool kMax, class Index, class T>
__global__ void pool_backward_kernel(WindowDims<Index> d, Index planes, const T* grad_y, const int64_t* argmax,
                                     T* grad_x) {
  using A = float_acc_t<T>;
  const Index plane_size = d.height * d.width, outputs = d.out_h * d.out_w, total = planes * plane_size;
  const A divisor = static_cast<A>(d.kernel_h * d.kernel_w);
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<Index>(gridDim.x) * blockDim.x) {
    const Index at = i % plane_size, h = at / d.width, w = at % d.width;
    const Index base = (i / plane_size) * outputs;
    Index oh_first, oh_last, ow_first, ow_last;
    covering_windows(h, d.pad_h, d.kernel_h, d.stride_h, d.out_h, oh_first, oh_last);
    covering_windows(w, d.pad_w, d.kernel_w, d.stride_w, d.out_w, ow_first, ow_last);
    T g = from_acc<T>(A(0));
    for (Index oh = oh_first; oh <= oh_last; ++oh) {
      for (Index ow = ow_first; ow <= ow_last; ++ow) {
        const Index o = base + oh * d.out_w + ow;
        if constexpr (kMax) {
          if (argmax[o] == at) g = from_acc<T>(to_acc<A>(g) + to_acc<A>(grad_y[o]));
        } else {
          g = from_acc<T>(to_acc<A>(g) + to_acc<A>(grad_y[o]) / divisor);
        }
      }
    }
    grad_x[i] = g;
  }
}

template <bool kMax, class T>
void pool_forward(const Pool2dShape& s, int64_t channels, const T* x, InputStrides xs, T* y, int64_t* argmax,
                  cudaStream_t stream) {
  const int64_t total = s.planes * s.out_h * s.out_w;
  if (total == 0) return;
  with_index_type(pool_fits_int32(s, total), [&]<class Index>() {
    pool_forward_kernel<kMax><<<grid_size(total), kBlockSize, 0, stream>>>(
        // Pooling's planes are N * C; `channels` is C, which locates a plane in the strided input.
        WindowDims<Index>(s, channels), static_cast<Index>(s.planes), x, xs, y, argmax);
  });
  GENESIS_CUDA_LAUNCH_CHECK();
}

template <bool kMax, class T>
void pool_backward(const Pool2dShape& s, const T* grad_y, const int64_t* argmax, T* grad_x, cudaStream_t stream) {
  const int64_t total = s.planes * s.height * s.width;
  if (total == 0) return;
  // Channels do not matter here: gradients are contiguous planes.
  with_index_type(pool_fits_int32(s, total), [&]<class Index>() {
    pool_backward_kernel<kMax><<<grid_size(total), kBlockSize, 0, stream>>>(
        WindowDims<Index>(s, 1), static_cast<Index>(s.planes), grad_y, argmax, grad_x);
  });
  GENESIS_CUDA_LAUNCH_CHECK();
}

}  // namespace

int64_t conv2d_column_elements(const Conv2dShape& s) {
  const ConvSizes z(s);
  return samples_per_block(s) * z.rows * z.spatial;
}

void conv2d_forward(DType dtype, const Conv2dShape& s, const void* x, const int64_t* x_strides, const void* w,
                    const void* bias, void* columns, void* y_acc, void* y, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "conv2d", {
    using A = float_acc_t<scalar_t>;
    conv2d_forward_typed<scalar_t, A>(s, static_cast<const scalar_t*>(x), InputStrides(x_strides),
                                      static_cast<const A*>(w), static_cast<const A*>(bias), static_cast<A*>(columns),
                                      static_cast<A*>(y_acc), static_cast<scalar_t*>(y), stream);
  });
}

void conv2d_backward_input(DType dtype, const Conv2dShape& s, const void* grad_y, const void* w, void* columns,
                           void* grad_x, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "conv2d backward", {
    using A = float_acc_t<scalar_t>;
    conv2d_backward_input_typed<scalar_t, A>(s, static_cast<const A*>(grad_y), static_cast<const A*>(w),
                                             static_cast<A*>(columns), static_cast<scalar_t*>(grad_x), stream);
  });
}

void conv2d_backward_weight(DType dtype, const Conv2dShape& s, const void* x, const int64_t* x_strides,
                            const void* grad_y_t, void* columns, void* grad_w, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "conv2d backward", {
    using A = float_acc_t<scalar_t>;
    conv2d_backward_weight_typed<scalar_t, A>(s, static_cast<const scalar_t*>(x), InputStrides(x_strides),
                                              static_cast<const A*>(grad_y_t), static_cast<A*>(columns),
                                              static_cast<A*>(grad_w), stream);
  });
}

void max_pool2d_forward(DType dtype, const Pool2dShape& s, int64_t channels, const void* x, const int64_t* x_strides,
                        void* y, int64_t* argmax, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "max_pool2d", {
    pool_forward<true>(s, channels, static_cast<const scalar_t*>(x), InputStrides(x_strides), static_cast<scalar_t*>(y),
                       argmax, stream);
  });
}

void max_pool2d_backward(DType dtype, const Pool2dShape& s, const void* grad_y, const int64_t* argmax, void* grad_x,
                         cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "max_pool2d backward", {
    pool_backward<true>(s, static_cast<const scalar_t*>(grad_y), argmax, static_cast<scalar_t*>(grad_x), stream);
  });
}

void avg_pool2d_forward(DType dtype, const Pool2dShape& s, int64_t channels, const void* x, const int64_t* x_strides,
                        void* y, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "avg_pool2d", {
    pool_forward<false>(s, channels, static_cast<const scalar_t*>(x), InputStrides(x_strides),
                        static_cast<scalar_t*>(y), nullptr, stream);
  });
}

void avg_pool2d_backward(DType dtype, const Pool2dShape& s, const void* grad_y, void* grad_x, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "avg_pool2d backward", {
    pool_backward<false>(s, static_cast<const scalar_t*>(grad_y), nullptr, static_cast<scalar_t*>(grad_x), stream);
  });
}

}  // namespace genesis::kernels::cuda
