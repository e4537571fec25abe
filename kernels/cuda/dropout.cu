// Fused dropout: one thread per Philox counter (four consecutive elements) draws the keep
// mask, writes it for the backward pass and scales the kept inputs. Memory-bound.
#include "kernels/common/philox.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dropout.h"

namespace genesis::kernels::cuda {

namespace {

template <class T, class A>
__global__ void dropout_forward_kernel(int64_t n, const T* x, double keep_prob, A scale, uint64_t seed, uint64_t offset,
                                       bool* keep, T* y) {
  const int64_t counters = (n + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < counters; c += stride) {
    const Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(c), 0, seed);
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = c * 4 + lane;
      if (i >= n) break;
      // The comparison of kernels/cpu/random.cpp's Bernoulli draw, in double.
      const bool kept = static_cast<double>(uint_to_unit_float(r.v[lane])) <= keep_prob;
      keep[i] = kept;
      y[i] = kept ? from_acc<T>(to_acc<A>(x[i]) * scale) : from_acc<T>(A(0));
    }
  }
}

template <class T, class A>
__global__ void dropout_backward_kernel(int64_t n, const bool* keep, const T* grad_y, A scale, T* grad_x) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    grad_x[i] = keep[i] ? from_acc<T>(to_acc<A>(grad_y[i]) * scale) : from_acc<T>(A(0));
  }
}

}  // namespace

void dropout_forward(DType dtype, int64_t n, const void* x, double keep_prob, double scale, uint64_t seed,
                     uint64_t offset, bool* keep, void* y, cudaStream_t stream) {
  if (n == 0) return;
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "dropout", {
    using A = float_acc_t<scalar_t>;
    dropout_forward_kernel<<<grid_size((n + 3) / 4), kBlockSize, 0, stream>>>(n, static_cast<const scalar_t*>(x),
                                                                              keep_prob, static_cast<A>(scale), seed,
                                                                              offset, keep, static_cast<scalar_t*>(y));
  });
  GENESIS_CUDA_LAUNCH_CHECK();
}

void dropout_backward(DType dtype, int64_t n, const bool* keep, const void* grad_y, double scale, void* grad_x,
                      cudaStream_t stream) {
  if (n == 0) return;
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "dropout backward", {
    using A = float_acc_t<scalar_t>;
    dropout_backward_kernel<<<grid_size(n), kBlockSize, 0, stream>>>(
        n, keep, static_cast<const scalar_t*>(grad_y), static_cast<A>(scale), static_cast<scalar_t*>(grad_x));
  });
  GENESIS_CUDA_LAUNCH_CHECK();
}

}  // namespace genesis::kernels::cuda
