#pragma once
// One optimizer step of the training loop: forward and backward over each micro-batch (under
// autocast, a causal LM through its fused loss), the gradients averaged over the ranks of a
// data-parallel run (overlapping the last backward), unscale, clipping, the
// optimizer step (skipped on the device when asked) and zero_grad. `genesis train` runs it in
// its loop; `genesis bench train` times its phases.
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "libgenesis/amp/grad_scaler.h"
#include "libgenesis/data/loader.h"
#include "libgenesis/dist/data_parallel.h"
#include "libgenesis/models/causal_lm.h"
#include "libgenesis/nn/module.h"
#include "libgenesis/optim/optimizer.h"

namespace genesis::train {

struct StepSettings {
  std::optional<DType> autocast;  // [amp] dtype; nullopt: f32
  int64_t grad_accum_steps = 1;
  double clip_grad_norm = 0.0;   // <= 0: the norm is measured, nothing clipped
  double clip_grad_value = 0.0;  // <= 0: off
};

struct StepResult {
  Tensor loss;       // the step's mean loss over its micro-batches (0-d, on the device)
  Tensor grad_norm;  // before clipping (0-d, on the device)
  int64_t samples = 0;
  // A stop was asked for between micro-batches: the step was abandoned (gradients dropped, no
  // update); loss and grad_norm are undefined.
  bool interrupted = false;
};

// The phase that just ended: "forward" (after each micro-batch's loss), "backward" (after each
// micro-batch's backward) or "optimizer" (after the step and zero_grad).
using PhaseMark = std::function<void(std::string_view phase)>;
// The optimizer step's skip flag from the step's loss and gradient norm (0-d, on the device;
// nonzero skips the update), or an undefined tensor to always apply it.
using SkipFlag = std::function<Tensor(const Tensor& loss, const Tensor& grad_norm)>;

class TrainStep {
 public:
  // data_parallel: the run's gradient averaging over ranks; null on one process.
  TrainStep(nn::Module& model, Optimizer& optimizer, amp::GradScaler* scaler, StepSettings settings,
            dist::DataParallel* data_parallel = nullptr);
  // Runs one step on grad_accum_steps batches from next_batch (moved to `device`). With an fp16
  // scaler its found-inf flag skips the update, otherwise skip_if's (when given). stop_requested
  // is asked before every micro-batch after the first; when it says yes the step is abandoned.
  // Data parallel: loss is the mean over the ranks and samples this rank's count; stop_requested
  // must give every rank the same answer.
  StepResult run(const std::function<data::Batch()>& next_batch, Device device, const SkipFlag& skip_if = {},
                 const PhaseMark& mark = {}, const std::function<bool()>& stop_requested = {});

 private:
  void zero_grad();
  Tensor loss_of(const Tensor& x, const Tensor& y);

  nn::Module& model_;
  models::CausalLM* causal_lm_;  // the fused-loss path, when the model is one
  Optimizer& optimizer_;
  amp::GradScaler* scaler_;
  StepSettings settings_;
  dist::DataParallel* data_parallel_;
  std::vector<Tensor> params_;
};

// Counts the steps whose loss or gradient norm is inf/NaN on the device, and the first of them
// (training.on_nonfinite): no host read until news() or count().
class NonfiniteSteps {
 public:
  explicit NonfiniteSteps(Device device);
  // This step's flag as the optimizer's skip_if (1 when non-finite); accumulates the count.
  Tensor flag(const Tensor& loss, const Tensor& grad_norm, int64_t step);
  // One host read: a sentence about the non-finite steps since the last call, or nullopt.
  std::optional<std::string> news(int64_t step);
  int64_t count() const;

 private:
  static constexpr double kNone = 1e15;  // "no non-finite step yet"
  Tensor count_, first_;
  int64_t reported_ = 0;
};

// Cross-entropy of logits [N, C] against targets [N], or of a sequence model's logits
// [B, T, V] against the next tokens [B, T].
Tensor training_loss(const Tensor& logits, const Tensor& targets);

}  // namespace genesis::train
