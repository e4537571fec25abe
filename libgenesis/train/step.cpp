#include "libgenesis/train/step.h"

#include <algorithm>
#include <limits>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/loss.h"

namespace genesis::train {

Tensor training_loss(const Tensor& logits, const Tensor& targets, Reduction reduction, SampleLoss loss) {
  if (loss != SampleLoss::cross_entropy) {
    GENESIS_CHECK(logits.shape() == targets.shape(), ShapeError, "regression: the model's outputs ", logits.shape(),
                  " and the targets ", targets.shape(), " differ in shape (a regression model has one output)");
    // In f32 whatever autocast computed the outputs in.
    const Tensor outputs = logits.to(DType::f32);
    return loss == SampleLoss::mse ? mse_loss(outputs, targets, reduction) : l1_loss(outputs, targets, reduction);
  }
  if (logits.dim() != 3) return cross_entropy(logits, targets, {.reduction = reduction});
  const int64_t rows = logits.size(0) * logits.size(1);
  return cross_entropy(logits.reshape({rows, logits.size(2)}), targets.reshape({rows}), {.reduction = reduction});
}

TrainStep::TrainStep(nn::Module& model, Optimizer& optimizer, amp::GradScaler* scaler, StepSettings settings,
                     dist::DataParallel* data_parallel)
    : model_(model),
      causal_lm_(dynamic_cast<models::CausalLM*>(&model)),
      optimizer_(optimizer),
      scaler_(scaler),
      settings_(settings),
      data_parallel_(data_parallel),
      params_(model.parameters(nn::Params::trainable)) {
  // Data parallel writes parameters outside the optimizer (broadcasts, ZeRO's gathers): its
  // runs cast every step, as does every run off CUDA or outside bf16 autocast.
  const bool on_gpu = !params_.empty() && params_.front().device().is_cuda();
  if (on_gpu && !data_parallel_ && settings_.autocast == DType::bf16) autocast_copies_.emplace(model.parameters());
}

void TrainStep::zero_grad() {
  // Under ZeRO-1 the optimizer holds only this rank's pieces: the model's gradients are the
  // data-parallel layer's to clear (they live in its buckets).
  if (data_parallel_) {
    data_parallel_->zero_grad();
    return;
  }
  // On a GPU the gradients are dropped (PyTorch's set_to_none): the forward then runs without
  // them, so the step's peak (the end of the forward) is lower by their size, and the next
  // backward writes fresh ones from the caching allocator. CPU steps keep their buffers.
  const bool on_gpu = !params_.empty() && params_.front().device().is_cuda();
  optimizer_.zero_grad(/*set_to_none=*/on_gpu);
}

Tensor TrainStep::summed_loss(const data::Batch& batch, Device device) {
  AutocastGuard autocast(settings_.autocast);
  const Tensor x = batch.inputs.to(device), y = batch.targets.to(device);
  // Language models take the fused head's loss, which never keeps [B, T, V] logits.
  if (causal_lm_)
    return causal_lm_->loss(x, y, Reduction::sum, batch.doc_start.defined() ? batch.doc_start.to(device) : Tensor());
  GENESIS_CHECK(!batch.doc_start.defined(), ValueError, "packed rows (doc_start) need a language model");
  return training_loss(model_(x), y, Reduction::sum, settings_.loss);
}

Tensor TrainStep::step_denominator(int64_t local_count, Device device) {
  if (!data_parallel_) return scalar_tensor(static_cast<double>(std::max<int64_t>(local_count, 1)), {.device = device});
  NoGradGuard no_grad;
  // The mean over the ranks of their counts: the total divided by the ranks. A step without
  // a counted target anywhere has a zero sum to divide; 1/ranks keeps that 0 rather than NaN.
  const Tensor mean = data_parallel_->average(scalar_tensor(static_cast<double>(local_count), {.device = device}));
  return maximum(mean, 1.0 / static_cast<double>(data_parallel_->world_size()));
}

StepResult TrainStep::run(const MicroBatches& batches, Device device, const SkipFlag& skip_if,
                          const PhaseMark& mark, const std::function<bool()>& stop_requested) {
  auto phase = [&mark](std::string_view name) {
    if (mark) mark(name);
  };
  StepResult result;
  const int64_t micro_steps = settings_.grad_accum_steps;
  const Tensor denominator = step_denominator(batches.loss_terms_ahead(micro_steps), device);
  for (int64_t micro = 0; micro < micro_steps; ++micro) {
    if (micro > 0 && stop_requested && stop_requested()) {
      zero_grad();
      StepResult abandoned;
      abandoned.samples = result.samples;
      abandoned.interrupted = true;
      return abandoned;
    }
    const data::Batch batch = batches.next();
    Tensor scaled = div(summed_loss(batch, device), denominator);
    phase("forward");
    // Only the last micro-batch's backward averages over the ranks; the others accumulate here.
    if (data_parallel_ && micro == micro_steps - 1) data_parallel_->arm();
    (scaler_ ? scaler_->scale_loss(scaled) : scaled).backward();
    phase("backward");
    result.loss = result.loss.defined() ? add(result.loss, scaled.detach()) : scaled.detach();
    result.samples += batch.targets.size(0);
    result.tokens += batch.tokens;
    result.loss_terms += batch.counted_targets();
  }
  // What the update acts on: the model's parameters, or under ZeRO-1 this rank's chunks of them.
  const std::vector<Tensor>& update_params = data_parallel_ ? data_parallel_->update_params() : params_;
  if (data_parallel_) {
    data_parallel_->finish();
    result.loss = data_parallel_->average(result.loss);
  }
  if (scaler_) {
    scaler_->unscale_(update_params);
    if (data_parallel_) data_parallel_->agree_found_inf(scaler_->found_inf());
  }
  // Clipping by norm alone is folded into the update (no pass that scales the gradients first):
  // the norm is measured (over the ranks' chunks under ZeRO-1) and handed to the optimizer.
  const bool fold_clip = settings_.clip_grad_norm > 0.0 && settings_.clip_grad_value <= 0.0;
  const double clip_now = fold_clip ? 0.0 : settings_.clip_grad_norm;
  result.grad_norm = data_parallel_ ? data_parallel_->clip_grad_norm(clip_now) : clip_grad_norm(params_, clip_now);
  if (settings_.clip_grad_value > 0.0) clip_grad_value(update_params, settings_.clip_grad_value);
  // Skipped on the device on inf/nan (the scaler's found-inf, or the caller's flag).
  optimizer_.step(scaler_   ? scaler_->found_inf()
                  : skip_if ? skip_if(result.loss, result.grad_norm)
                            : Tensor(),
                  fold_clip ? result.grad_norm : Tensor(), settings_.clip_grad_norm);
  if (data_parallel_) data_parallel_->gather_parameters();
  if (scaler_) scaler_->update();
  zero_grad();
  phase("optimizer");
  return result;
}

NonfiniteSteps::NonfiniteSteps(Device device)
    : count_(scalar_tensor(0.0, {.dtype = DType::f64, .device = device})),
      first_(scalar_tensor(kNone, {.dtype = DType::f64, .device = device})) {}

Tensor NonfiniteSteps::flag(const Tensor& loss, const Tensor& grad_norm, int64_t step) {
  NoGradGuard no_grad;
  const Tensor sum = add(loss.to(DType::f64), grad_norm.to(DType::f64));  // inf/NaN if either is
  const Tensor bad = sub(1.0, lt(abs(sum), std::numeric_limits<double>::infinity()).to(DType::f64));
  count_ = add(count_, bad);
  first_ = minimum(first_, add(mul(bad, static_cast<double>(step) - kNone), kNone));
  return bad.to(DType::f32);
}

std::optional<std::string> NonfiniteSteps::news(int64_t step) {
  const auto total = static_cast<int64_t>(count_.item());
  if (total == reported_) return std::nullopt;
  const int64_t fresh = total - reported_;
  reported_ = total;
  return "step " + std::to_string(static_cast<int64_t>(first_.item())) + " had a non-finite loss or gradient norm (" +
         std::to_string(fresh) + " such step(s) in the last window, " + std::to_string(total) + " by step " +
         std::to_string(step) + "); its update was not applied";
}

int64_t NonfiniteSteps::count() const {
  return static_cast<int64_t>(count_.item());
}

}  // namespace genesis::train
