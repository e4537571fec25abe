#pragma once
// Fused multi-tensor optimizer updates on CUDA, with the formulas of kernels/cpu/optim.h: one
// launch updates up to kMaxTensorsPerLaunch parameters (their pointers travel in the kernel
// arguments), so a model's step is a handful of launches and no host synchronization. Also
// the global gradient norm and norm clipping, on the device.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "kernels/common/optim_steps.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cuda {

inline constexpr int kMaxTensorsPerLaunch = 36;

// One parameter: n contiguous elements in each buffer. The parameter and its state slots
// have the parameter dtype (f32 or f64); the gradient has the parameter dtype or, for f32
// parameters, f16/bf16. Slots: adam exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad only);
// sgd momentum_buffer (momentum != 0 only); lion exp_avg.
// `step` (device memory, may be null) is StepGate::step of kernels/cpu/optim.h.
struct OptimTensor {
  void* param = nullptr;
  const void* grad = nullptr;
  void* slots[3] = {nullptr, nullptr, nullptr};
  int64_t n = 0;
  int64_t* step = nullptr;
  // f32 parameters: a bf16 copy written with the updated values (autocast's kept copy of the
  // parameter, libgenesis/autograd/autocast_weights.h), or null.
  void* low = nullptr;
};

// Gradient-norm clipping folded into an update: each gradient is multiplied by
// min(1, max_norm / (*norm + 1e-6)) as it is read (what clip_by_norm would have stored first,
// without its pass over the gradients). Off while norm is null.
struct GradClip {
  const float* norm = nullptr;  // device memory: the global gradient norm
  float max_norm = 0.0f;
};

// `skip_if` (device memory, may be null) is StepGate::skip_if: every update of the call is a
// no-op while it is nonzero. Tensors with a `step` take their step number from it.
void adam_step(DType param_dtype, DType grad_dtype, std::span<const OptimTensor> tensors, const AdamStep& s,
               cudaStream_t stream, const float* skip_if = nullptr, GradClip clip = {});
void sgd_step(DType param_dtype, DType grad_dtype, std::span<const OptimTensor> tensors, const SgdStep& s,
              cudaStream_t stream, const float* skip_if = nullptr, GradClip clip = {});
void lion_step(DType param_dtype, DType grad_dtype, std::span<const OptimTensor> tensors, const LionStep& s,
               cudaStream_t stream, const float* skip_if = nullptr, GradClip clip = {});

// A floating tensor of n contiguous elements (a gradient).
struct NormTensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t n = 0;
};

// Floats of scratch global_norm needs for `count` tensors.
int64_t global_norm_scratch(int64_t count);
// norm[0] = sqrt(sum of x^2 over every element of every tensor), squares summed in f32 in a
// fixed order (no atomics: the same inputs give the same bits). `scratch` holds
// global_norm_scratch(tensors.size()) floats; `norm` is one float; both on the device.
void global_norm(std::span<const NormTensor> tensors, float* scratch, float* norm, cudaStream_t stream);
// Every tensor *= min(1, max_norm / (norm[0] + 1e-6)), the coefficient computed on the device.
void clip_by_norm(std::span<const NormTensor> tensors, const float* norm, double max_norm, cudaStream_t stream);

}  // namespace genesis::kernels::cuda
