#pragma once
// Loss scaling for fp16 training on CUDA, with the formulas of kernels/cpu/amp.h. Nothing here
// synchronizes with the host: the scale, the found-inf flag and the counters stay on the device.
#include <cuda_runtime_api.h>

#include <span>

#include "kernels/common/loss_scale.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cuda {

// Every gradient *= 1 / *scale and *found_inf = 1 when any element is inf or nan (it is not
// cleared otherwise): one multi-tensor launch per kMaxTensorsPerLaunch gradients.
void unscale_grads(std::span<const GradBuffer> grads, const float* scale, float* found_inf, cudaStream_t stream);

// update_loss_scale (kernels/cpu/amp.h) in one thread on the device.
void update_loss_scale(const LossScaleState& state, const float* found_inf, const ScaleUpdate& update, float* record,
                       cudaStream_t stream);

}  // namespace genesis::kernels::cuda
