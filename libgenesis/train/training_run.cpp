// The start of a `genesis train` run (train/training_run.h): the ranks, the run directory, data,
// model, data parallel, optimizer, and the resume from a checkpoint.
#include "libgenesis/train/training_run.h"

#include "libgenesis/core/error.h"
#include "libgenesis/core/generator.h"
#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/models/causal_lm.h"
#include "libgenesis/models/hf.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/memory_estimate.h"
#include "libgenesis/train/run_dir.h"

namespace genesis::train {

namespace fs = std::filesystem;

TrainingRun::TrainingRun(const RecipeSpec& spec, const TrainOptions& options, const StopSignal& stop)
    : spec_(spec),
      t_(spec.training),
      options_(options),
      stop_(stop),
      language_model_(language_model_data(spec.data.name)),
      run_dir_(options.run_dir.empty() ? default_run_dir(spec) : options.run_dir),
      recipe_toml_(spec.to_toml()),
      env_(dist::process_env()) {
  set_allow_tf32(spec.run.allow_tf32);
  device_ = detail::rank_device(recipe::resolve_device(spec.run.device), spec.run.device, env_);
  // Under a launcher the run is data parallel even with one rank (as torchrun --nproc-per-node 1
  // runs DDP): the communicator's cost can be measured against a plain run.
  if (env_.launcher != "none")
    group_ = dist::join_process_group(env_, spec.dist.backend, device_, spec.dist.timeout_s);
  rank0_ = env_.rank == 0;
  world_ = env_.world_size;
  // A run that cannot fit stops here, with the numbers, before its run directory, data and model.
  check_memory_fits(spec, device_, world_);
  if (group_) {
    share_.rank = env_.rank;
    share_.world = world_;
    share_.sum = [this](std::vector<double>& v) { group_->sum(v); };
    share_.lockstep = spec.dist.zero == 3;
  }
  prepare_run_directory();
  load_data_and_model();
  if (resuming_) resume();
  if (finished()) return;
  // Every rank starts from rank 0's weights (they agree already when built from one seed).
  if (data_parallel_) data_parallel_->broadcast_parameters();
  announce();
}

void TrainingRun::prepare_run_directory() {
  detail::rank0_first(
      group_.get(),
      [&] {
        // Rank 0 holds the run directory for the whole run (the other ranks write nothing there),
        // before it looks at what is in it: a second run, --resume or --overwrite is refused
        // instead of mixing with this one.
        run_lock_.emplace(lock_run_dir(run_dir_, options_));
        // Stale temporaries go first: a run killed inside its first checkpoint write holds only a
        // start, which --resume begins again from step 0.
        stale_ = io::remove_stale_temporaries(run_dir_ / "checkpoints");
        resuming_ = prepare_run_dir(run_dir_, options_, start_note_);
        if (resuming_) resume_note_ = check_resume_recipe(spec_, run_dir_ / "checkpoints", env_.world_size);
        if (!resuming_) io::write_file_atomic(run_dir_ / "recipe.toml", recipe_toml_);
        if (resuming_) {
          // Peek at the checkpoint's step first: lines a crashed run logged after it are dropped
          // from metrics.jsonl, so the resumed run does not log those steps twice.
          if (const std::optional<int64_t> step = checkpoint_step(run_dir_ / "checkpoints"))
            truncate_metrics_after(run_dir_ / "metrics.jsonl", *step);
        }
      },
      {});
  if (group_) resuming_ = group_->any(rank0_ && resuming_);  // rank 0 decided
  threads_ = detail::set_threads(spec_.run.threads, device_, env_.local_world_size);
  amp_ = recipe::amp_dtype(spec_);
  log_ = std::make_unique<RunLog>(rank0_ ? (run_dir_ / "metrics.jsonl").string() : std::string(),
                                  options_.quiet || !rank0_,
                                  rank0_ && spec_.run.tensorboard ? run_dir_.string() : std::string());
  if (!start_note_.empty()) log_->note(start_note_);
  if (!resume_note_.empty()) log_->note(resume_note_);
  share_.progress = [this](int64_t done, int64_t total) { log_->progress("evaluating", done, total); };
  for (const fs::path& p : stale_) log_->note("removed " + p.string() + ", left by an interrupted checkpoint write");
  if (group_)
    log_->note("data parallel: " + std::to_string(world_) + " ranks (" + env_.launcher + "), gradients over " +
               std::string(group_->gradients().backend()) + ", " + std::to_string(t_.batch_size) +
               " examples per rank per micro-batch");
}

namespace {

SampleLoss sample_loss(const RecipeSpec::Data& data) {
  if (data.task != "regression") return SampleLoss::cross_entropy;
  return data.regression_loss == "l1" ? SampleLoss::l1 : SampleLoss::mse;
}

}  // namespace

void TrainingRun::load_data_and_model() {
  manual_seed(static_cast<uint64_t>(spec_.run.seed));
  // Rank 0 prepares missing data (token shards) before the others look for it.
  // A resumed run encodes its data as its checkpoint says (a table's statistics and classes), not
  // anew from a file that may have grown; a checkpoint that cannot be read is resume()'s to report.
  std::string encoding;
  if (resuming_) {
    try {
      encoding = checkpoint_data_encoding(run_dir_ / "checkpoints");
    } catch (const Error&) {
    }
  }
  auto open_data = [&] { data_ = open_data_source(spec_, device_, *log_, share_, encoding); };
  detail::rank0_first(group_.get(), open_data, open_data);
  model_ = recipe::build_model(spec_, device_);
  data_->check_model(*model_);
  if (group_) {
    // ZeRO-3 cuts a language model into units (its decoder blocks and the rest), gathered around
    // their computation by hooks in the model's forward; a frozen base is sharded with them.
    auto* lm = dynamic_cast<models::CausalLM*>(model_.get());
    const bool units = spec_.dist.zero == 3 && lm != nullptr;
    data_parallel_ = std::make_unique<dist::DataParallel>(
        model_->parameters(nn::Params::trainable), group_->gradients(),
        dist::DataParallelOptions{
            .bucket_mb = spec_.dist.bucket_mb,
            .zero = static_cast<int>(spec_.dist.zero),
            .units = units ? lm->shard_units(nn::Params::trainable) : std::vector<std::vector<Tensor>>{},
            .frozen_units = units ? lm->frozen_units() : std::vector<std::vector<Tensor>>{},
            .reduce_dtype = parse_dtype(spec_.dist.reduce_dtype),
            .param_dtype = parse_dtype(spec_.dist.param_dtype)});
    if (units) lm->set_unit_hooks(data_parallel_->unit_hooks());
  }
  zero_ = data_parallel_ && data_parallel_->sharded();
  std::vector<ParamGroup> groups = recipe::optimizer_groups(spec_, *model_);
  if (zero_) groups = data_parallel_->shard_groups(groups);
  optimizer_ = recipe::build_optimizer(spec_, std::move(groups));
  scaler_ = recipe::build_grad_scaler(spec_, device_);
  total_ = recipe::total_steps(spec_, data_->batches_per_epoch());
  schedule_.emplace(recipe::build_schedule(spec_, total_));
  train_step_ = std::make_unique<TrainStep>(*model_, *optimizer_, scaler_.get(),
                                            StepSettings{.autocast = amp_,
                                                         .loss = sample_loss(spec_.data),
                                                         .grad_accum_steps = t_.grad_accum_steps,
                                                         .clip_grad_norm = t_.clip_grad_norm,
                                                         .clip_grad_value = t_.clip_grad_value},
                                            data_parallel_.get());
  state_.optimizer_name = optimizer_->name();
  state_.scheduler_name = spec_.scheduler.name;
  // A LoRA run's checkpoints hold its adapters and name the base they apply to.
  if (spec_.trains_adapters())
    state_.base = BaseModelRef{.dir = spec_.model.init_from,
                               .fingerprint = models::model_dir_fingerprint(spec_.model.init_from)};
}

void TrainingRun::resume() {
  const std::optional<BaseModelRef> base = state_.base;
  std::string fallback;
  state_ = load_for_resume(run_dir_ / "checkpoints", *model_, optimizer_.get(),
                           zero_ ? OptimizerStateLoader([this](Optimizer& o, const std::vector<NamedTensor>& saved,
                                                               int64_t steps) {
                             data_parallel_->load_full_optimizer_state(o, saved, steps);
                           })
                                 : OptimizerStateLoader(),
                           rank0_, fallback);
  if (!fallback.empty()) {
    log_->note(fallback);
    // Lines the run logged after the checkpoint it resumes from go, as after a crash.
    if (rank0_) {
      truncate_metrics_after(run_dir_ / "metrics.jsonl", state_.step);
      log_->reopen_metrics();  // the truncation wrote a new file
    }
  }
  if (state_.base != base) {
    auto describe = [](const std::optional<BaseModelRef>& b) {
      return b ? "the base " + b->dir + " (fingerprint " + b->fingerprint + ")" : std::string("no base (full training)");
    };
    GENESIS_THROW(RecipeError, "--resume: the checkpoint in ", (run_dir_ / "checkpoints").string(), " was trained on ",
                  describe(state_.base), " but this run has ", describe(base),
                  ": resume with the model.init_from (and [lora]) it was trained with");
  }
  // A global batch split anew (check_resume_recipe allows it when it stays the checkpoint's): the
  // data cursor moves to the same place in the epoch's order, counted in the new loader batches.
  const std::optional<RecipeSpec> trained = checkpoint_recipe(run_dir_ / "checkpoints" / "latest");
  const int64_t saved_rows = trained ? trained->training.batch_size * state_.world_size : 0;
  const int64_t rows = t_.batch_size * world_;
  const bool same_global_batch =
      trained && saved_rows * trained->training.grad_accum_steps == rows * t_.grad_accum_steps;
  if (same_global_batch) state_.cursor = convert_cursor(state_.cursor, saved_rows, rows);
  if (state_.world_size != world_ && same_global_batch)
    log_->note("the checkpoint was written by " + std::to_string(state_.world_size) + " rank(s) and " +
               std::to_string(world_) + " resume it with the same global batch of " +
               std::to_string(rows * t_.grad_accum_steps) + ": the run continues as it would have");
  else if (state_.world_size != world_)
    log_->note("warning: the checkpoint was written by " + std::to_string(state_.world_size) + " rank(s) and " +
               std::to_string(world_) +
               " resume it: the weights and optimizer state carry over, but each global batch now holds other "
               "examples, so the run does not continue exactly as it would have (keeping batch_size x "
               "grad_accum_steps x ranks continues it exactly)");
  if (scaler_ && state_.grad_scaler) scaler_->load_state_dict(*state_.grad_scaler);
  // An automatic thread count follows the machine's load; a resumed CPU run keeps the count
  // the checkpoint was written with, since CPU reductions split by threads (bit-exact resume).
  if (device_.is_cpu() && threads_.source == "automatic" && state_.cpu_threads > 0 &&
      state_.cpu_threads != threads_.threads) {
    threads_ = detail::set_threads(state_.cpu_threads, device_);
    log_->note("resume: " + std::to_string(state_.cpu_threads) + " CPU threads, as the checkpoint was written with");
  } else if (device_.is_cpu() && state_.cpu_threads > 0 && state_.cpu_threads != threads_.threads) {
    log_->note("warning: resuming with " + std::to_string(threads_.threads) + " CPU threads (" + threads_.source +
               ") where the checkpoint was written with " + std::to_string(state_.cpu_threads) +
               ": the losses will differ from an uninterrupted run in the last bits");
  }
  data_->seek(state_.cursor);
  default_generator().set_state(state_.rng);
  log_->note("resumed " + run_dir_.string() + " at step " + std::to_string(state_.step));
  // Rank 0 alone: `latest` points at the checkpoint loaded once it has moved the pointer.
  if (rank0_ && !finished())
    if (const std::string note =
            resume_schedule_note(spec_, run_dir_ / "checkpoints" / "latest", data_->batches_per_epoch(), state_.step);
        !note.empty())
      log_->note(note);
  if (finished())
    // Its summary, metrics and checkpoints stay as they are.
    log_->note("the run finished at step " + std::to_string(state_.step) + " of " + std::to_string(total_) +
               ": nothing to do (raise training.steps or training.epochs to train it further)");
}

void TrainingRun::announce() {
  if (language_model_ && !data_->has_evaluation()) {
    GENESIS_CHECK(t_.eval_every == 0, UsageError, "training.eval_every = ", t_.eval_every, " but ",
                  data_->missing_evaluation(), ", or set training.eval_every = 0");
    log_->note("warning: " + data_->missing_evaluation() + ": the run reports no evaluation");
  }
  if (spec_.run.device == "auto") log_->note("device auto: using " + device_.str());
  if (device_.is_cpu()) {
    if (std::string hint = blas_core_note(); !hint.empty()) log_->note("note: " + hint);
    if (std::string hint = thread_note(threads_); !hint.empty()) log_->note(hint);
  }
  const int64_t frozen = model_->num_parameters(nn::Params::frozen);
  const std::string trained =
      frozen == 0 ? std::string()
                  : " (" + std::to_string(model_->num_parameters(nn::Params::trainable)) + " trained, " +
                        std::to_string(frozen) + " frozen)";
  log_->note("training " + spec_.run.name + " on " + device_.str() + ": " + std::to_string(model_->num_parameters()) +
             " parameters" + trained + ", " + std::to_string(total_) + " steps of " +
             std::to_string(t_.batch_size * t_.grad_accum_steps * world_) +
             " " + data_->row_noun() + " (" + std::to_string(data_->batches_per_epoch()) + " batches per epoch)");
  if (language_model_) {
    flops_per_token_ =
        training_flops_per_token(dynamic_cast<const models::CausalLM&>(*model_), data_->sequence_length());
    peak_ = peak_flops(device_, spec_.run.peak_tflops);
    log_->note("MFU: " + std::to_string(flops_per_token_ / 1e6) + " MFLOP per token against " +
               std::to_string(peak_.flops_per_s / 1e12) + " TFLOP/s (" + peak_.source + ")");
  }
}

}  // namespace genesis::train
