#include "libgenesis/amp/grad_scaler.h"

#include <cmath>

#include "kernels/cpu/amp.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/amp.h"
#endif

namespace genesis::amp {

namespace {

constexpr int64_t kHistoryColumns = 3;

}  // namespace

GradScaler::GradScaler(Device device, GradScalerOptions o) : device_(device), options_(o) {
  GENESIS_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0.0, ValueError,
                "GradScaler: init_scale must be a finite number > 0 (got ", o.init_scale, ")");
  if (o.dynamic) {
    GENESIS_CHECK(o.growth_factor > 1.0, ValueError, "GradScaler: growth_factor must be > 1 (got ", o.growth_factor,
                  ")");
    GENESIS_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, ValueError,
                  "GradScaler: backoff_factor must be in (0, 1) (got ", o.backoff_factor, ")");
    GENESIS_CHECK(o.growth_interval >= 1, ValueError, "GradScaler: growth_interval must be >= 1 (got ",
                  o.growth_interval, ")");
  }
  scale_ = scalar_tensor(o.init_scale, {.dtype = DType::f32, .device = device});
  growth_tracker_ = zeros({}, {.dtype = DType::i32, .device = device});
  skipped_steps_ = zeros({}, {.dtype = DType::i64, .device = device});
  found_inf_ = zeros({}, {.dtype = DType::f32, .device = device});
  history_ = empty({64, kHistoryColumns}, {.dtype = DType::f32, .device = device});
}

Tensor GradScaler::scale_loss(const Tensor& loss) const {
  GENESIS_CHECK(loss.device() == device_, DeviceError, "GradScaler::scale_loss: the loss is on ", loss.device().str(),
                " but the scaler on ", device_.str());
  return mul(loss, scale_);
}

void GradScaler::unscale_(const std::vector<Tensor>& params) {
  GENESIS_CHECK(!unscaled_, UsageError, "GradScaler::unscale_: already called since the last update()");
  NoGradGuard no_grad;
  found_inf_.zero_();
  std::vector<kernels::GradBuffer> grads;
  for (Tensor p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    GENESIS_CHECK(g.device() == device_, DeviceError, "GradScaler::unscale_: a gradient is on ", g.device().str(),
                  " but the scaler on ", device_.str());
    GENESIS_CHECK(is_floating(g.dtype()), DTypeError, "GradScaler::unscale_: a gradient has dtype ",
                  dtype_name(g.dtype()));
    if (!g.is_contiguous()) {
      g = g.contiguous();
      p.set_grad(g);
    }
    grads.push_back({.data = g.data_ptr(), .dtype = g.dtype(), .n = g.numel()});
  }
  if (device_.is_cpu()) {
    kernels::cpu::unscale_grads(grads, scale_.data<float>(), found_inf_.data<float>());
  } else {
    GENESIS_ON_CUDA(
        kernels::cuda::unscale_grads(grads, scale_.data<float>(), found_inf_.data<float>(), cuda::current_stream()));
  }
  unscaled_ = true;
}

void GradScaler::update() {
  GENESIS_CHECK(unscaled_, UsageError,
                "GradScaler::update: call unscale_ first (it finds the inf/nan gradients that update reacts to)");
  NoGradGuard no_grad;
  if (history_size_ == history_.size(0)) {  // grow on the device: no host read
    Tensor bigger = empty({2 * history_size_, kHistoryColumns}, {.dtype = DType::f32, .device = device_});
    bigger.narrow(0, 0, history_size_).copy_(history_);
    history_ = bigger;
  }
  const kernels::LossScaleState state{.scale = scale_.data<float>(),
                                      .growth_tracker = growth_tracker_.data<int32_t>(),
                                      .skipped_steps = skipped_steps_.data<int64_t>()};
  // A fixed scale is a dynamic one whose factors are 1.
  const kernels::ScaleUpdate factors{.growth_factor = options_.dynamic ? options_.growth_factor : 1.0,
                                     .backoff_factor = options_.dynamic ? options_.backoff_factor : 1.0,
                                     .growth_interval = options_.growth_interval};
  float* record = history_.data<float>() + history_size_ * kHistoryColumns;
  if (device_.is_cpu()) {
    kernels::update_loss_scale(state, found_inf_.data<float>(), factors, record);
  } else {
    GENESIS_ON_CUDA(
        kernels::cuda::update_loss_scale(state, found_inf_.data<float>(), factors, record, cuda::current_stream()));
  }
  ++history_size_;
  unscaled_ = false;
}

std::vector<ScaleStep> GradScaler::read_history() {
  std::vector<ScaleStep> steps;
  if (history_size_ == 0) return steps;
  const std::vector<float> rows = history_.narrow(0, 0, history_size_).to_vector<float>();
  for (int64_t i = 0; i < history_size_; ++i) {
    const float* row = rows.data() + i * kHistoryColumns;
    steps.push_back({.skipped = row[0] != 0.0f, .scale = row[1], .next_scale = row[2]});
  }
  history_size_ = 0;
  return steps;
}

GradScalerState GradScaler::state_dict() const {
  return {.scale = scale_.item(),
          .growth_tracker = growth_tracker_.item<int64_t>(),
          .skipped_steps = skipped_steps_.item<int64_t>()};
}

void GradScaler::load_state_dict(const GradScalerState& state) {
  GENESIS_CHECK(
      std::isfinite(state.scale) && state.scale > 0.0 && state.growth_tracker >= 0 && state.skipped_steps >= 0,
      ValueError, "GradScaler::load_state_dict: invalid state (scale ", state.scale, ", growth_tracker ",
      state.growth_tracker, ", skipped_steps ", state.skipped_steps, ")");
  NoGradGuard no_grad;
  scale_.fill_(state.scale);
  growth_tracker_.fill_(static_cast<double>(state.growth_tracker));
  skipped_steps_.fill_(static_cast<double>(state.skipped_steps));
}

}  // namespace genesis::amp
