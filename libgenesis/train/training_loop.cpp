// The step loop of a `genesis train` run (train/training_run.h): the logging window, periodic
// evaluations and checkpoints, non-finite steps, fp16 scale underflow and clean stops.
#include "libgenesis/autograd/autocast.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/core/generator.h"
#include "libgenesis/core/interrupt.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/train/training_run.h"

namespace genesis::train {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

int TrainingRun::train() {
  if (finished()) return 0;
  nonfinite_.emplace(device_);
  // The logged loss is the mean over the logging window (as llm.c and torchtitan log it),
  // summed on the device: no host read between log steps. A checkpoint keeps the open window.
  window_steps_ = state_.log_window_steps;
  if (window_steps_ > 0) window_loss_ = scalar_tensor(state_.log_window_loss, {.dtype = DType::f64, .device = device_});
  last_applied_step_ = state_.step;

  const Clock::time_point start = Clock::now();
  Clock::time_point window_start = start;
  double paused_s = 0;  // evaluations and checkpoints inside the loop
  const int64_t first_step = state_.step;
  model_->train();
  while (state_.step < total_) {
    for (ParamGroup& g : optimizer_->param_groups()) g.lr = schedule_->lr(g.base_lr, state_.step);
    // A stop between micro-batches abandons the step: the checkpoint then holds the last
    // completed one, with the data cursor and generator rewound to where this step began.
    const data::LoaderCursor step_cursor = data_->cursor();
    const GeneratorState step_rng = default_generator().state();
    // Skipped on the device on inf/nan (the scaler's found-inf, or this step's loss and norm).
    const StepResult result = train_step_->run(
        MicroBatches{.next = [this] { return data_->next(); },
                     .loss_terms_ahead = [this](int64_t count) { return data_->loss_terms_ahead(count); }},
        device_,
        [&](const Tensor& loss, const Tensor& norm) { return nonfinite_->flag(loss, norm, state_.step + 1); }, {},
        [this] { return stop_requested(); });
    if (result.interrupted) {
      data_->seek(step_cursor);
      default_generator().set_state(step_rng);
      checkpoint();
      log_->note("stopped by signal during step " + std::to_string(state_.step + 1) +
                 " (between micro-batches; the step is dropped); " + checkpoint_note());
      return 130;
    }
    // This rank's counts for all ranks: the global batch splits evenly over them (an uneven
    // last batch of an epoch, or SFT rows holding different trained tokens, make it an estimate).
    const Processed step{result.samples * world_, result.tokens * world_, result.loss_terms * world_};
    window_.add(step);
    since_start_.add(step);
    {
      NoGradGuard no_grad;
      window_loss_ =
          window_loss_.defined() ? add(window_loss_, result.loss.to(DType::f64)) : result.loss.to(DType::f64);
      ++window_steps_;
    }
    ++state_.step;

    const bool last = state_.step == total_;
    const bool stopping = stop_requested();
    if (state_.step % t_.log_every == 0 || last || stopping) {
      log_step(result.grad_norm, start, window_start, first_step);
      window_start = Clock::now();
      window_ = {};
    }
    // Evaluations and checkpoints inside a logging window do not count as its training time.
    const Clock::time_point pause = Clock::now();
    if (t_.eval_every > 0 && state_.step % t_.eval_every == 0 && !last && data_->has_evaluation()) {
      if (!evaluate_or_stop("the evaluation at step " + std::to_string(state_.step))) return 130;
      log_->eval(state_.step, last_eval_);
    }
    if (stopping) {
      checkpoint();
      log_->note("stopped by signal at step " + std::to_string(state_.step) + "; " + checkpoint_note());
      return 130;
    }
    if (t_.checkpoint_every > 0 && state_.step % t_.checkpoint_every == 0 && !last) checkpoint();
    stop_on_underflow();
    window_start += Clock::now() - pause;
    paused_s += seconds_since(pause);
  }
  // The training loop without its evaluations and checkpoints: what samples_per_s counts.
  const double train_s = seconds_since(start) - paused_s;
  if (data_->has_evaluation()) {
    // Language-model data evaluates on its validation set, whatever eval.split says.
    log_->note("final evaluation on the " + (language_model_ ? std::string("validation") : spec_.eval.split) + " split");
    if (!evaluate_or_stop("the final evaluation")) return 130;
    log_->eval(state_.step, last_eval_);
  }
  checkpoint();
  stop_on_underflow();
  write_summary(train_s, seconds_since(start));  // the final evaluation and checkpoint included
  return 0;
}

// A stop request counts when any rank got it, so that all stop at the same step.
bool TrainingRun::stop_requested() const { return group_ ? group_->any(stop_.requested()) : stop_.requested(); }

// The only host reads of the loop: the loss, gradient norm and loss scale at log steps.
void TrainingRun::log_step(const Tensor& grad_norm, Clock::time_point start, Clock::time_point window_start,
                           int64_t first_step) {
  last_loss_ = window_loss_.item() / static_cast<double>(window_steps_);
  window_loss_ = Tensor();
  window_steps_ = 0;
  check_nonfinite();
  log_skipped_steps();
  const double elapsed = seconds_since(start), window = seconds_since(window_start);
  const double per_step = elapsed / static_cast<double>(state_.step - first_step);
  const double samples_per_s = window > 0 ? static_cast<double>(window_.samples) / window : 0.0;
  const double tokens_per_s = window > 0 ? static_cast<double>(window_.tokens) / window : 0.0;
  const data::LoaderCursor at = data_->cursor();
  log_->step({.step = state_.step,
              .total_steps = total_,
              .epoch = static_cast<double>(at.epoch) +
                       static_cast<double>(at.batch) / static_cast<double>(data_->batches_per_epoch()),
              .loss = last_loss_,
              .lr = optimizer_->param_groups().front().lr,
              .grad_norm = grad_norm.item(),
              .samples_per_s = samples_per_s,
              .tokens_per_s = tokens_per_s,
              .mfu = mfu(tokens_per_s),
              .elapsed_s = elapsed,
              .eta_s = per_step * static_cast<double>(total_ - state_.step),
              .loss_scale = scaler_ ? scaler_->scale().item() : 0.0});
}

void TrainingRun::checkpoint() {
  check_nonfinite();
  log_skipped_steps();
  if (t_.checkpoint_every < 0) return;  // never (training.checkpoint_every = -1)
  state_.log_window_steps = window_steps_;
  state_.log_window_loss = window_steps_ > 0 ? window_loss_.item() : 0.0;
  if (scaler_) state_.grad_scaler = scaler_->state_dict();
  state_.cursor = data_->cursor();
  state_.rng = default_generator().state();
  state_.optimizer_steps = optimizer_->step_count();
  state_.cpu_threads = device_.is_cpu() ? threads_.threads : 0;
  state_.world_size = world_;
  // DDP ranks hold the same weights and optimizer state; ZeRO ranks gather theirs at rank 0 (the
  // weights too under ZeRO-3, one unit at a time to the host).
  std::vector<NamedTensor> optimizer_state = zero_    ? data_parallel_->full_optimizer_state(*optimizer_)
                                             : rank0_ ? optimizer_->state()
                                                      : std::vector<NamedTensor>{};
  const std::vector<NamedTensor> model_tensors =
      data_parallel_ ? data_parallel_->whole_on_rank0(checkpoint_tensors(*model_, state_))
                     : checkpoint_tensors(*model_, state_);
  if (rank0_)
    save_checkpoint(run_dir_ / "checkpoints", *model_, model_tensors, optimizer_->name(), optimizer_state, state_,
                    recipe_toml_,
                    static_cast<size_t>(t_.keep_last), data_->tokenizer(), data_->encoding());
}

// What a stop says of its checkpoint.
std::string TrainingRun::checkpoint_note() const {
  if (t_.checkpoint_every < 0) return "no checkpoint written (training.checkpoint_every = -1)";
  return "checkpoint of step " + std::to_string(state_.step) + " written, resume with --resume";
}

bool TrainingRun::evaluate_or_stop(const std::string& when) {
  try {
    // Under the training's autocast, as the forward passes it measures.
    AutocastGuard autocast(amp_);
    last_eval_ = data_->evaluate(*model_);
    return true;
  } catch (const Interrupted&) {
    checkpoint();
    log_->note("stopped by signal during " + when + "; " + checkpoint_note());
    return false;
  }
}

// Steps with a non-finite loss or gradient norm (without an fp16 scaler, which handles its
// own): flagged on the device, their updates skipped by the optimizer there; the host reads the
// count where it reads anyway (log steps, checkpoints) and stops or notes them
// (training.on_nonfinite).
void TrainingRun::check_nonfinite() {
  if (scaler_) return;
  const std::optional<std::string> problem = nonfinite_->news(state_.step);
  if (!problem) return;
  GENESIS_CHECK(t_.on_nonfinite != "stop", Error, *problem,
                "; no checkpoint was written after it. Lower optimizer.lr, set training.clip_grad_norm, or set "
                "training.on_nonfinite = \"skip\"");
  log_->note("note: " + *problem + "; skipped (training.on_nonfinite = \"skip\")");
}

// fp16: the steps the scaler skipped since the last read go to metrics.jsonl (one host read, at
// log steps and checkpoints); notes the last applied step and the first whose scale underflowed.
void TrainingRun::log_skipped_steps() {
  if (!scaler_) return;
  const std::vector<amp::ScaleStep> history = scaler_->read_history();
  int64_t step = state_.step - static_cast<int64_t>(history.size());
  for (const amp::ScaleStep& s : history) {
    ++step;
    if (s.skipped) log_->skipped_step(step, s.scale);
    else last_applied_step_ = step;
    if (underflow_step_ == 0 && s.next_scale < amp::kMinLossScale) underflow_step_ = step;
  }
}

// A dynamic fp16 scale below 2^-24 means every recent step overflowed: stop with the weights of
// the last applied step in a checkpoint (the skipped steps did not change them).
void TrainingRun::stop_on_underflow() {
  if (underflow_step_ == 0) return;
  checkpoint();
  GENESIS_THROW(Error, "the fp16 loss scale fell below 2^-24 at step ", underflow_step_,
                " (every step with inf/nan gradients is skipped and backs the scale off); the last step applied was ",
                last_applied_step_,
                t_.checkpoint_every < 0 ? std::string(" (no checkpoint: training.checkpoint_every = -1)")
                                        : " and the checkpoint written at step " + std::to_string(state_.step) +
                                              " holds its weights",
                ". Set amp.dtype = \"bf16\" or lower optimizer.lr");
}

}  // namespace genesis::train
