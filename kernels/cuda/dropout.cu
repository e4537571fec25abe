// Fused dropout: one thread per Philox counter (four consecutive elements) draws the keep mask
// and scales the kept values; the backward draws the same mask again. Memory-bound.
#include "kernels/common/philox.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dropout.h"

namespace genesis::kernels::cuda {

namespace {

// Each thread takes one Philox counter: four consecutive elements, kept where
// kernels/cpu/random.cpp's Bernoulli draw (its comparison, in double) keeps them.
template <class T, class A>
__global__ void dropout_kernel(int64_t n, const T* in, DropoutDraws draws, A scale, T* out) {
  const int64_t counters = (n + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < counters; c += stride) {
    const Philox4 r = philox4x32_10(draws.offset + static_cast<uint64_t>(c), 0, draws.seed);
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = c * 4 + lane;
      if (i >= n) break;
      const bool kept = static_cast<double>(uint_to_unit_float(r.v[lane])) <= draws.keep_prob;
      out[i] = kept ? from_acc<T>(to_acc<A>(in[i]) * scale) : from_acc<T>(A(0));
    }
  }
}

// Forward and backward are the same pass: out = kept ? in * scale : 0.
void dropout_pass(const char* what, DType dtype, int64_t n, const void* in, const DropoutDraws& draws, double scale,
                  void* out, cudaStream_t stream) {
  if (n == 0) return;
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, what, {
    using A = float_acc_t<scalar_t>;
    dropout_kernel<<<grid_size((n + 3) / 4), kBlockSize, 0, stream>>>(
        n, static_cast<const scalar_t*>(in), draws, static_cast<A>(scale), static_cast<scalar_t*>(out));
  });
  GENESIS_CUDA_LAUNCH_CHECK();
}

}  // namespace

void dropout_forward(DType dtype, int64_t n, const void* x, const DropoutDraws& draws, double scale, void* y,
                     cudaStream_t stream) {
  dropout_pass("dropout", dtype, n, x, draws, scale, y, stream);
}

void dropout_backward(DType dtype, int64_t n, const DropoutDraws& draws, const void* grad_y, double scale,
                      void* grad_x, cudaStream_t stream) {
  dropout_pass("dropout backward", dtype, n, grad_y, draws, scale, grad_x, stream);
}

}  // namespace genesis::kernels::cuda
