#pragma once
// Loss scaling for fp16 training, with the semantics and defaults of PyTorch's
// torch.amp.GradScaler, kept on the device so that a step never waits for the host:
//
//   scaler.scale_loss(loss).backward();   // gradients of loss * scale: small fp16 gradients survive
//   scaler.unscale_(params);              // gradients / scale in one pass; found_inf = any inf/nan
//   clip_grad_norm(params, max_norm);     // on the true gradients
//   optimizer.step(scaler.found_inf());   // a no-op on the device when found_inf is set
//   scaler.update();                      // back off on inf/nan, grow after growth_interval clean steps
//
// The host reads the device only in read_history() (the trainer's log steps) and state_dict()
// (checkpoints).
#include <cstdint>
#include <vector>

#include "libgenesis/core/tensor.h"

namespace genesis::amp {

// Below this scale (2^-24, the smallest fp16 subnormal) every step has been overflowing: the
// trainer stops the run.
inline constexpr double kMinLossScale = 0x1p-24;

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;      // > 1
  double backoff_factor = 0.5;     // in (0, 1)
  int64_t growth_interval = 2000;  // >= 1
  bool dynamic = true;             // false: the scale stays init_scale (steps with inf/nan are still skipped)
};

// What a checkpoint keeps of a scaler.
struct GradScalerState {
  double scale = 0;
  int64_t growth_tracker = 0;  // clean steps in a row since the last growth or backoff
  int64_t skipped_steps = 0;   // steps skipped for inf/nan, over the whole run
  bool operator==(const GradScalerState&) const = default;
};

// One update() as read_history() reports it.
struct ScaleStep {
  bool skipped = false;   // its gradients held inf/nan: the optimizer step was a no-op
  double scale = 0;       // the loss scale the step ran with
  double next_scale = 0;  // the scale after update()
};

class GradScaler {
 public:
  // Checks the options (ValueError) and puts the state on `device`.
  explicit GradScaler(Device device, GradScalerOptions options = {});

  // loss * scale, differentiable (backward gives gradients times the scale).
  Tensor scale_loss(const Tensor& loss) const;
  // Divides the gradient of every parameter that has one (f32, f64, f16 or bf16, on the
  // scaler's device) by the scale and sets found_inf to 1 when any element is inf or nan, else 0:
  // one pass (on CUDA a multi-tensor launch per 36 gradients), no host read. Once per step.
  void unscale_(const std::vector<Tensor>& params);
  // Backs the scale off (found_inf) or counts a clean step and grows it every growth_interval,
  // on the device; appends the step to the history. Needs unscale_ since the last update().
  void update();

  const Tensor& scale() const { return scale_; }          // f32 0-d
  const Tensor& found_inf() const { return found_inf_; }  // f32 0-d: Optimizer::step's skip_if
  const GradScalerOptions& options() const { return options_; }

  // The steps since the last call (one host read), in order; the history grows until read.
  std::vector<ScaleStep> read_history();

  GradScalerState state_dict() const;  // host reads
  void load_state_dict(const GradScalerState& state);

 private:
  Device device_;
  GradScalerOptions options_;
  Tensor scale_;
  Tensor growth_tracker_;  // i32 0-d
  Tensor skipped_steps_;   // i64 0-d
  Tensor found_inf_;
  Tensor history_;  // f32 [capacity, 3]: found_inf, scale used, scale after (kernels::update_loss_scale)
  int64_t history_size_ = 0;
  bool unscaled_ = false;  // unscale_ ran since the last update()
};

}  // namespace genesis::amp
