// Loss-scale kernels: the unscaling pass reads and writes each gradient element once (memory
// bound, a multi-tensor launch like the gradient norm's); the scale update is one thread.
#include <climits>

#include "kernels/cuda/amp.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/multi_tensor.cuh"
#include "libgenesis/core/error.h"

namespace genesis::kernels::cuda {

namespace {

constexpr int kUnscaleBlock = 256;

// x *= inv in f32 (f64 for f64 gradients), as PyTorch's _amp_foreach_non_finite_check_and_unscale_.
template <class T>
__device__ __forceinline__ bool unscale_range(void* data, int64_t begin, int64_t end, float inv) {
  using A = float_acc_t<T>;
  T* x = static_cast<T*>(data);
  bool found = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const A v = to_acc<A>(x[i]);
    found |= !isfinite(v);
    x[i] = from_acc<T>(v * static_cast<A>(inv));
  }
  return found;
}

__global__ void __launch_bounds__(kUnscaleBlock) unscale_kernel(GradTable table, const float* scale, float* found_inf) {
  const float inv = inverse_scale(*scale);
  const int64_t chunks = table.chunk_start[table.count];
  bool found = false;
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    const TableChunk c = table_chunk<kGradChunk>(table, chunk);
    void* data = table.data[c.tensor];
    switch (table.dtype[c.tensor]) {
      case DType::f64:
        found |= unscale_range<double>(data, c.begin, c.end, inv);
        break;
      case DType::f16:
        found |= unscale_range<__half>(data, c.begin, c.end, inv);
        break;
      case DType::bf16:
        found |= unscale_range<__nv_bfloat16>(data, c.begin, c.end, inv);
        break;
      default:
        found |= unscale_range<float>(data, c.begin, c.end, inv);
        break;
    }
  }
  if (__syncthreads_or(found) && threadIdx.x == 0) *found_inf = 1.0f;
}

__global__ void update_scale_kernel(LossScaleState state, const float* found_inf, ScaleUpdate update, float* record) {
  update_loss_scale(state, found_inf, update, record);
}

}  // namespace

void unscale_grads(std::span<const GradBuffer> grads, const float* scale, float* found_inf, cudaStream_t stream) {
  check_grad_dtypes("unscale_grads", grads);
  for_each_grad_table(grads, [&](const GradTable& table) {
    const unsigned blocks = grid_size(table.chunk_start[table.count] * kUnscaleBlock, kUnscaleBlock);
    unscale_kernel<<<blocks, kUnscaleBlock, 0, stream>>>(table, scale, found_inf);
    GENESIS_CUDA_LAUNCH_CHECK();
  });
}

void update_loss_scale(const LossScaleState& state, const float* found_inf, const ScaleUpdate& update, float* record,
                       cudaStream_t stream) {
  update_scale_kernel<<<1, 1, 0, stream>>>(state, found_inf, update, record);
  GENESIS_CUDA_LAUNCH_CHECK();
}

}  // namespace genesis::kernels::cuda
