#include "kernels/cpu/conv.h"
#include "kernels/cpu/linalg.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/reduce.h"

namespace genesis::kernels::cpu {

namespace {

// Row-major C = op(A) op(B) + beta * C.
void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float beta, float* c, int64_t ldc) {
  sgemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

void blas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
               const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), 1.0, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

// A 1x1 kernel with unit stride and no padding reads the input image itself as the column matrix.
bool is_pointwise(const Conv2dShape& s) {
  return s.kernel_h == 1 && s.kernel_w == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0;
}

// f32 convolutions go through oneDNN's primitives unless GENESIS_CPU_CONV=im2col (read once) or
// genesis was built without it -- except, when the GEMM is oneDNN's sgemm (linalg.h), where
// im2col + that GEMM measured faster on the build host: 1x1 kernels, a GEMM as they stand
// (32x64x28x28 * 128x64x1x1 fwd+bwd 6.35 -> 3.20 ms), and fewer than 8 input channels a group,
// which the primitives' blocked layouts pad to 8 or 16 (the first layer of the CNN recipe,
// 128x1x28x28 * 32x1x3x3 fwd+bwd 5.89 -> 3.84 ms); with OpenBLAS's sgemm those stay on the
// primitives (6.24 vs 5.50 and 9.41 vs 5.56 ms). GENESIS_CPU_CONV=dnnl sends everything there.
bool use_dnnl(const Conv2dShape& s) {
#if GENESIS_WITH_DNNL
  static const std::string_view choice = [] {
    const char* value = std::getenv("GENESIS_CPU_CONV");
    return std::string_view(value ? value : "");
  }();
  if (choice == "im2col") return false;
  if (choice == "dnnl") return true;
  if (cpu_gemm() != CpuGemm::onednn) return true;
  const bool pointwise = s.kernel_h == 1 && s.kernel_w == 1;
  return !pointwise && s.in_channels / s.groups >= 8;
#else
  (void)s;
  return false;
#endif
}

// Samples are processed in blocks: im2col / col2im of a whole block run in one OpenMP region, then
// the block's GEMMs run back to back, so OpenMP and OpenBLAS threads do not take turns (and spin
// against each other) for every sample. The block's column buffer stays under this many entries.
constexpr int64_t kColumnBudget = int64_t{1} << 22;

int64_t samples_per_block(const Conv2dShape& s, const ConvSizes& g) {
  return std::clamp<int64_t>(kColumnBudget / g.per_sample(), 1, std::max<int64_t>(s.batch, 1));
}

// columns[(c, ki, kj), (oh, ow)] = image[c, oh*sh - ph + ki*dh, ow*sw - pw + kj*dw], zero outside the image,
// for `planes` consecutive input planes. One column-matrix row per work item: it reads one input row
// at a time with a fixed step.
template <class T>
void im2col(const Conv2dShape& s, int64_t planes, const T* image, T* columns) {
  const int64_t taps = s.kernel_h * s.kernel_w, spatial = s.out_h * s.out_w;
  parallel_for(planes * taps, spatial, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t c = row / taps, ki = (row % taps) / s.kernel_w, kj = row % s.kernel_w;
      const T* plane = image + c * s.height * s.width;
      for (int64_t oh = 0; oh < s.out_h; ++oh) {
        T* out = columns + row * spatial + oh * s.out_w;
        const int64_t ih = oh * s.stride_h - s.pad_h + ki * s.dilation_h;
        if (ih < 0 || ih >= s.height) {
          std::fill(out, out + s.out_w, T(0));
          continue;
        }
        const T* in = plane + ih * s.width;
        for (int64_t ow = 0; ow < s.out_w; ++ow) {
          const int64_t iw = ow * s.stride_w - s.pad_w + kj * s.dilation_w;
          out[ow] = iw >= 0 && iw < s.width ? in[iw] : T(0);
        }
      }
    }
  });
}

// The adjoint of im2col: image[c, ih, iw] = sum of every column entry im2col read from there.
// Each work item owns whole planes, so the sums are race-free and in a fixed order.
template <class T>
void col2im(const Conv2dShape& s, int64_t planes, const T* columns, T* image) {
  const int64_t taps = s.kernel_h * s.kernel_w, spatial = s.out_h * s.out_w;
  parallel_for(planes, taps * spatial, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      T* plane = image + c * s.height * s.width;
      std::fill(plane, plane + s.height * s.width, T(0));
      for (int64_t ki = 0; ki < s.kernel_h; ++ki) {
        for (int64_t kj = 0; kj < s.kernel_w; ++kj) {
          const T* col = columns + ((c * s.kernel_h + ki) * s.kernel_w + kj) * spatial;
          for (int64_t oh = 0; oh < s.out_h; ++oh) {
            const int64_t ih = oh * s.stride_h - s.pad_h + ki * s.dilation_h;
            if (ih < 0 || ih >= s.height) continue;
            T* in = plane + ih * s.width;
            const T* src = col + oh * s.out_w;
            for (int64_t ow = 0; ow < s.out_w; ++ow) {
              const int64_t iw = ow * s.stride_w - s.pad_w + kj * s.dilation_w;
              if (iw >= 0 && iw < s.width) in[iw] += src[ow];
            }
          }
        }
      }
    }
  });
}

// The column matrix of one call, from a buffer per thread and type that later calls reuse: a
// fresh std::vector zero-filled its megabytes and paid page faults for them on every call
// (the first layer of the CNN recipe: 3.6 MB a call). im2col and the GEMMs write every entry.
// Buffers above kKeptColumnBytes are released after the call rather than kept.
template <class T>
class ColumnScratch {
 public:
  explicit ColumnScratch(size_t n) {
    if (buffer().size() < n) buffer().resize(n);
    data_ = buffer().data();
  }
  ~ColumnScratch() {
    if (buffer().size() * sizeof(T) > kKeptColumnBytes) std::vector<T>().swap(buffer());
  }
  ColumnScratch(const ColumnScratch&) = delete;
  ColumnScratch& operator=(const ColumnScratch&) = delete;
  T* data() const { return data_; }

 private:
  static constexpr size_t kKeptColumnBytes = size_t{64} << 20;
  static std::vector<T>& buffer() {
    thread_local std::vector<T> kept;
    return kept;
  }
  T* data_ = nullptr;
};

// Which way a block's column matrices go: built from the images (im2col) before the GEMMs, or
// folded back into the images (col2im) after them.
enum class Columns { from_images, to_images };

// Runs gemm(n, grp, columns) for every sample n and group grp, where `columns` is the [patch,
// spatial] column matrix of (n, grp): the images themselves for a pointwise kernel, else the
// scratch of the sample's block, filled from or folded into `images` [N, C_in, H, W] as `flow` says.
template <Columns flow, class Image, class Gemm>
void gemm_per_sample_group(const Conv2dShape& s, const ConvSizes& g, Image* images, Gemm&& gemm) {
  using T = std::remove_const_t<Image>;
  const bool pointwise = is_pointwise(s);
  const int64_t block = samples_per_block(s, g);
  const ColumnScratch<T> columns(pointwise ? 0 : static_cast<size_t>(block * g.per_sample()));
  for (int64_t first = 0; first < s.batch; first += block) {
    const int64_t count = std::min(block, s.batch - first);
    Image* block_images = images + first * s.in_channels * g.image;
    Image* cols = pointwise ? block_images : columns.data();
    if constexpr (flow == Columns::from_images)
      if (!pointwise) im2col(s, count * s.in_channels, block_images, columns.data());
    for (int64_t n = first; n < first + count; ++n)
      for (int64_t grp = 0; grp < s.groups; ++grp)
        gemm(n, grp, cols + ((n - first) * s.groups + grp) * g.patch * g.spatial);
    if constexpr (flow == Columns::to_images)
      if (!pointwise) col2im(s, count * s.in_channels, cols, block_images);
  }
}

template <class T>
void conv2d_forward_typed(const Conv2dShape& s, const T* x, const T* w, const T* bias, T* y) {
  if constexpr (std::is_same_v<T, float>)
    if (use_dnnl(s) && conv_dnnl_forward(s, x, w, bias, y)) return;
  const ConvSizes g(s);
  gemm_per_sample_group<Columns::from_images>(s, g, x, [&](int64_t n, int64_t grp, const T* cols) {
    // y_g [out_per_group, spatial] = W_g [out_per_group, patch] x columns [patch, spatial] (+ bias)
    T* out = y + (n * s.out_channels + grp * g.out_per_group) * g.spatial;
    blas_gemm(false, false, g.out_per_group, g.spatial, g.patch, w + grp * g.out_per_group * g.patch, g.patch, cols,
              g.spatial, T(0), out, g.spatial);
    if (!bias) return;
    for (int64_t co = 0; co < g.out_per_group; ++co) {
      const T b = bias[grp * g.out_per_group + co];
      for (int64_t i = 0; i < g.spatial; ++i) out[co * g.spatial + i] += b;
    }
  });
}

template <class T>
void conv2d_backward_input_im2col(const Conv2dShape& s, const T* grad_y, const T* w, T* grad_x) {
  const ConvSizes g(s);
  gemm_per_sample_group<Columns::to_images>(s, g, grad_x, [&](int64_t n, int64_t grp, T* cols) {
    // columns [patch, spatial] = W_g^T [patch, out_per_group] x grad_y_g [out_per_group, spatial]
    const T* gy = grad_y + (n * s.out_channels + grp * g.out_per_group) * g.spatial;
    blas_gemm(true, false, g.patch, g.spatial, g.out_per_group, w + grp * g.out_per_group * g.patch, g.patch, gy,
              g.spatial, T(0), cols, g.spatial);
  });
}

template <class T>
void conv2d_backward_weight_im2col(const Conv2dShape& s, const T* x, const T* grad_y, T* grad_w) {
  const ConvSizes g(s);
  std::fill(grad_w, grad_w + s.out_channels * g.patch, T(0));
  gemm_per_sample_group<Columns::from_images>(s, g, x, [&](int64_t n, int64_t grp, const T* cols) {
    // grad_w_g [out_per_group, patch] += grad_y_g [out_per_group, spatial] x columns^T [spatial, patch]
    const T* gy = grad_y + (n * s.out_channels + grp * g.out_per_group) * g.spatial;
    blas_gemm(false, true, g.out_per_group, g.patch, g.spatial, gy, g.spatial, cols, g.spatial, T(1),
              grad_w + grp * g.out_per_group * g.patch, g.patch);
  });
}

template <class T>
void conv2d_backward_typed(const Conv2dShape& s, const T* grad_y, const T* x, const T* w, T* grad_x, T* grad_w,
                           T* grad_bias) {
  auto sum_bias = [&] { sum_channels(dtype_of<T>(), s.batch, s.out_channels, s.out_h * s.out_w, grad_y, grad_bias); };
  if constexpr (std::is_same_v<T, float>) {
    // oneDNN's weights primitive sums the bias along with the weight's gradient.
    if (use_dnnl(s) && (grad_x || grad_w) &&
        conv_dnnl_backward(s, grad_y, x, w, grad_x, grad_w, grad_w ? grad_bias : nullptr)) {
      if (grad_bias && !grad_w) sum_bias();
      return;
    }
  }
  if (grad_x) conv2d_backward_input_im2col(s, grad_y, w, grad_x);
  if (grad_w) conv2d_backward_weight_im2col(s, x, grad_y, grad_w);
  if (grad_bias) sum_bias();
}

// Window bounds of output position `o` along one dimension, clipped to the input [0, size).
struct Window {
  int64_t begin, end;
  Window(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t size)
      : begin(std::max<int64_t>(o * stride - pad, 0)), end(std::min<int64_t>(o * stride - pad + kernel, size)) {}
};

// Windows that never leave the input (no padding, the last one inside): the taps can be taken
// one at a time across a whole output row, without per-window bounds or branches, so the
// compiler vectorizes the row.
bool pool_windows_inside(const Pool2dShape& s) {
  return s.pad_h == 0 && s.pad_w == 0 && (s.out_h - 1) * s.stride_h + s.kernel_h <= s.height &&
         (s.out_w - 1) * s.stride_w + s.kernel_w <= s.width;
}

// The same maximum and first-maximum index as the general loop below: taps in row-major window
// order, a later tap taking over only when strictly greater, or NaN over a number.
template <class T>
void max_pool2d_forward_inside(const Pool2dShape& s, const T* x, T* y, int64_t* argmax) {
  parallel_for(s.planes * s.out_h, s.out_w * s.kernel_h * s.kernel_w, [&](int64_t begin, int64_t end) {
    // The winning tap per output (row-major index in the window): 32-bit lanes beside the values,
    // and no branch on the data (random values would mispredict every other comparison).
    std::vector<T> best(static_cast<size_t>(s.out_w));
    std::vector<int32_t> tap(static_cast<size_t>(s.out_w));
    T* bp = best.data();
    int32_t* tp = tap.data();
    const int64_t sw = s.stride_w;
    for (int64_t row = begin; row < end; ++row) {
      const T* plane = x + (row / s.out_h) * s.height * s.width;
      const int64_t h0 = (row % s.out_h) * s.stride_h;
      const T* first = plane + h0 * s.width;
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        bp[ow] = first[ow * sw];
        tp[ow] = 0;
      }
      for (int64_t ki = 0; ki < s.kernel_h; ++ki) {
        for (int64_t kj = ki == 0 ? 1 : 0; kj < s.kernel_w; ++kj) {
          const T* in = plane + (h0 + ki) * s.width + kj;
          const auto t = static_cast<int32_t>(ki * s.kernel_w + kj);
          for (int64_t ow = 0; ow < s.out_w; ++ow) {
            const T v = in[ow * sw], b = bp[ow];
            const bool take = (v > b) | ((v != v) & (b == b));
            bp[ow] = take ? v : b;
            tp[ow] = take ? t : tp[ow];
          }
        }
      }
      T* out = y + row * s.out_w;
      int64_t* at = argmax + row * s.out_w;
      for (int64_t ow = 0; ow < s.out_w; ++ow) {
        out[ow] = bp[ow];
        at[ow] = (h0 + tp[ow] / s.kernel_w) * s.width + ow * sw + tp[ow] % s.kernel_w;
      }
    }
  });
}

// Calls pool(plane, wh, ww, out) for every output position of x: `plane` the input plane it
// reads, wh and ww its window's rows and columns clipped to the plane, `out` its index in the
// output. One output row (plane, oh) per work item; its windows read kernel_h rows of one plane.
// A pool reads s.width into a local first: through the reference the compiler reloads it for
// every window row (bf16 avg_pool2d 2x2 measured 11% slower).
template <class T, class Pool>
void for_each_window(const Pool2dShape& s, const T* x, Pool&& pool) {
  parallel_for(s.planes * s.out_h, s.out_w * s.kernel_h * s.kernel_w, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const T* plane = x + (row / s.out_h) * s.height * s.width;
      const Window wh(row % s.out_h, s.stride_h, s.pad_h, s.kernel_h, s.height);
      for (int64_t ow = 0; ow < s.out_w; ++ow)
        pool(plane, wh, Window(ow, s.stride_w, s.pad_w, s.kernel_w, s.width), row * s.out_w + ow);
    }
  });
}

template <class T>
void max_pool2d_forward_typed(const Pool2dShape& s, const T* x, T* y, int64_t* argmax) {
  using A = acc_t<T>;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (pool_windows_inside(s) && s.kernel_h > 0 && s.kernel_w > 0) return max_pool2d_forward_inside(s, x, y, argmax);
  }
  for_each_window(s, x, [&](const T* plane, const Window& wh, const Window& ww, int64_t out) {
    const int64_t width = s.width;
    A best = -std::numeric_limits<A>::infinity();
    int64_t best_at = -1;
    for (int64_t h = wh.begin; h < wh.end; ++h) {
      for (int64_t w = ww.begin; w < ww.end; ++w) {
        const A v = static_cast<A>(plane[h * width + w]);
        if (best_at < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
          best = v;
          best_at = h * width + w;
        }
      }
    }
    y[out] = static_cast<T>(best);
    argmax[out] = best_at;
  });
}

// One plane per work item: overlapping windows add into the same plane in a fixed order.
template <class T>
void max_pool2d_backward_typed(const Pool2dShape& s, const T* grad_y, const int64_t* argmax, T* grad_x) {
  using A = acc_t<T>;
  const int64_t image = s.height * s.width, outputs = s.out_h * s.out_w;
  parallel_for(s.planes, image + outputs, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      T* gx = grad_x + p * image;
      std::fill(gx, gx + image, T(0));
      for (int64_t o = p * outputs; o < (p + 1) * outputs; ++o) {
        gx[argmax[o]] = static_cast<T>(static_cast<A>(gx[argmax[o]]) + static_cast<A>(grad_y[o]));
      }
    }
  });
}

template <class T>
void avg_pool2d_forward_typed(const Pool2dShape& s, const T* x, T* y) {
  using A = acc_t<T>;
  const A divisor = static_cast<A>(s.kernel_h * s.kernel_w);
  for_each_window(s, x, [&](const T* plane, const Window& wh, const Window& ww, int64_t out) {
    const int64_t width = s.width;
    A total = 0;
    for (int64_t h = wh.begin; h < wh.end; ++h)
      for (int64_t w = ww.begin; w < ww.end; ++w) total += static_cast<A>(plane[h * width + w]);
    y[out] = static_cast<T>(total / divisor);
  });
}

template <class T>
void avg_pool2d_backward_typed(const Pool2dShape& s, const T* grad_y, T* grad_x) {
  using A = acc_t<T>;
  const A divisor = static_cast<A>(s.kernel_h * s.kernel_w);
  const int64_t image = s.height * s.width;
  parallel_for(s.planes, image + s.out_h * s.out_w * s.kernel_h * s.kernel_w, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      T* gx = grad_x + p * image;
      const T* gy = grad_y + p * s.out_h * s.out_w;
      std::fill(gx, gx + image, T(0));
      for (int64_t oh = 0; oh < s.out_h; ++oh) {
        const Window wh(oh, s.stride_h, s.pad_h, s.kernel_h, s.height);
        for (int64_t ow = 0; ow < s.out_w; ++ow) {
          const Window ww(ow, s.stride_w, s.pad_w, s.kernel_w, s.width);
          const A share = static_cast<A>(gy[oh * s.out_w + ow]) / divisor;
          for (int64_t h = wh.begin; h < wh.end; ++h)
            for (int64_t w = ww.begin; w < ww.end; ++w)
              gx[h * s.width + w] = static_cast<T>(static_cast<A>(gx[h * s.width + w]) + share);
        }
      }
    }
  });
}

}  // namespace

#if !GENESIS_WITH_DNNL
bool conv_dnnl_forward(const Conv2dShape&, const float*, const float*, const float*, float*) { return false; }
bool conv_dnnl_backward(const Conv2dShape&, const float*, const float*, const float*, float*, float*, float*) {
  return false;
}
#else
std::string conv_dnnl_implementation(const Conv2dShape& s);  // conv_dnnl.cpp
#endif

std::string conv2d_implementation(const Conv2dShape& s) {
#if GENESIS_WITH_DNNL
  if (use_dnnl(s))
    if (std::string dnnl = conv_dnnl_implementation(s); !dnnl.empty()) return dnnl;
#endif
  (void)s;
  return std::string("im2col + ") + cpu_gemm_name(cpu_gemm()) + " sgemm";
}

// Convolution runs in f32 or f64 only: the op layer widens half types before calling.
void conv2d_forward(DType dtype, const Conv2dShape& s, const void* x, const void* w, const void* bias, void* y) {
  GENESIS_DISPATCH_F32_F64(dtype, "conv2d", {
    conv2d_forward_typed<scalar_t>(s, static_cast<const scalar_t*>(x), static_cast<const scalar_t*>(w),
                                   static_cast<const scalar_t*>(bias), static_cast<scalar_t*>(y));
  });
}

void conv2d_backward(DType dtype, const Conv2dShape& s, const void* grad_y, const void* x, const void* w,
                     Conv2dGradients out) {
  GENESIS_DISPATCH_F32_F64(dtype, "conv2d backward", {
    conv2d_backward_typed<scalar_t>(s, static_cast<const scalar_t*>(grad_y), static_cast<const scalar_t*>(x),
                                    static_cast<const scalar_t*>(w), static_cast<scalar_t*>(out.x),
                                    static_cast<scalar_t*>(out.w), static_cast<scalar_t*>(out.bias));
  });
}

void max_pool2d_forward(DType dtype, const Pool2dShape& s, const void* x, void* y, int64_t* argmax) {
  GENESIS_DISPATCH_FLOAT(dtype, "max_pool2d", {
    max_pool2d_forward_typed<scalar_t>(s, static_cast<const scalar_t*>(x), static_cast<scalar_t*>(y), argmax);
  });
}

void max_pool2d_backward(DType dtype, const Pool2dShape& s, const void* grad_y, const int64_t* argmax, void* grad_x) {
  GENESIS_DISPATCH_FLOAT(dtype, "max_pool2d backward", {
    max_pool2d_backward_typed<scalar_t>(s, static_cast<const scalar_t*>(grad_y), argmax,
                                        static_cast<scalar_t*>(grad_x));
  });
}

void avg_pool2d_forward(DType dtype, const Pool2dShape& s, const void* x, void* y) {
  GENESIS_DISPATCH_FLOAT(dtype, "avg_pool2d", {
    avg_pool2d_forward_typed<scalar_t>(s, static_cast<const scalar_t*>(x), static_cast<scalar_t*>(y));
  });
}

void avg_pool2d_backward(DType dtype, const Pool2dShape& s, const void* grad_y, void* grad_x) {
  GENESIS_DISPATCH_FLOAT(dtype, "avg_pool2d backward", {
    avg_pool2d_backward_typed<scalar_t>(s, static_cast<const scalar_t*>(grad_y), static_cast<scalar_t*>(grad_x));
  });
}

}  // namespace genesis::kernels::cpu
