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
#include "libgenesis/autograd/autocast_weights.h"
#include "libgenesis/data/loader.h"
#include "libgenesis/dist/data_parallel.h"
#include "libgenesis/models/causal_lm.h"
#include "libgenesis/nn/module.h"
#include "libgenesis/optim/optimizer.h"

namespace genesis::train {

// What a model that is not a language model is trained to minimize against its batch's targets.
enum class SampleLoss {
  cross_entropy,  // a classifier: class indices
  mse,            // a regression: numbers, shaped as the model's output
  l1,
};

struct StepSettings {
  std::optional<DType> autocast;  // [amp] dtype; nullopt: f32
  SampleLoss loss = SampleLoss::cross_entropy;
  int64_t grad_accum_steps = 1;
  double clip_grad_norm = 0.0;   // <= 0: the norm is measured, nothing clipped
  double clip_grad_value = 0.0;  // <= 0: off
};

struct StepResult {
  // The step's loss: the sum of every counted target's loss over its micro-batches (and ranks)
  // divided by their number (0-d, on the device).
  Tensor loss;
  Tensor grad_norm;  // before clipping (0-d, on the device)
  // This rank's rows, input tokens (Batch::tokens) and counted targets (Batch::loss_terms).
  int64_t samples = 0;
  int64_t tokens = 0;
  int64_t loss_terms = 0;
  // A stop was asked for between micro-batches: the step was abandoned (gradients dropped, no
  // update); loss and grad_norm are undefined.
  bool interrupted = false;
};

// Where a step's micro-batches come from: the next one, and the targets the next `count` will
// count without making them (the step divides every micro-batch's summed loss by their total
// before its first backward; train/data_source.h's sources know it).
struct MicroBatches {
  std::function<data::Batch()> next;
  std::function<int64_t(int64_t count)> loss_terms_ahead;
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
  // Runs one step on grad_accum_steps micro-batches (moved to `device`). The loss is
  // normalized over the whole step: each micro-batch's summed loss is divided by the targets
  // counted in all of the step's micro-batches on all ranks, so that accumulating N micro-batches
  // gives the gradient of one batch N times larger, however many targets each one counts (SFT
  // rows with more or fewer trained tokens). With an fp16
  // scaler its found-inf flag skips the update, otherwise skip_if's (when given). stop_requested
  // is asked before every micro-batch after the first; when it says yes the step is abandoned.
  // Data parallel: loss is the mean over the ranks and samples this rank's count; stop_requested
  // must give every rank the same answer.
  StepResult run(const MicroBatches& batches, Device device, const SkipFlag& skip_if = {},
                 const PhaseMark& mark = {}, const std::function<bool()>& stop_requested = {});

 private:
  void zero_grad();
  // The summed loss of a micro-batch's counted targets (moved to `device`).
  Tensor summed_loss(const data::Batch& batch, Device device);
  // What a micro-batch's summed loss is divided by: the step's counted targets over all ranks,
  // per rank (the data-parallel mean of the gradients divides by the ranks once more). A 0-d
  // device tensor under data parallelism, where it takes one small all-reduce.
  Tensor step_denominator(int64_t local_count, Device device);

  nn::Module& model_;
  models::CausalLM* causal_lm_;  // the fused-loss path, when the model is one
  Optimizer& optimizer_;
  amp::GradScaler* scaler_;
  StepSettings settings_;
  dist::DataParallel* data_parallel_;
  std::vector<Tensor> params_;
  // One process under bf16 autocast on CUDA: the parameters' bf16 copies kept across steps and
  // written by the fused AdamW step (autograd/autocast_weights.h).
  std::optional<autocast_weights::Registration> autocast_copies_;
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
// [B, T, V] against the next tokens [B, T]; a regression's mse or l1 of outputs against targets
// of their shape.
Tensor training_loss(const Tensor& logits, const Tensor& targets, Reduction reduction = Reduction::mean,
                     SampleLoss loss = SampleLoss::cross_entropy);

}  // namespace genesis::train
