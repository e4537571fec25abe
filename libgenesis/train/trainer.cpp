#include "libgenesis/train/trainer.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/core/generator.h"
#include "libgenesis/core/interrupt.h"
#include "libgenesis/core/threads.h"
#include "libgenesis/dist/data_parallel.h"
#include "libgenesis/dist/process_group.h"
#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/models/causal_lm.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/batches.h"
#include "libgenesis/train/checkpoint.h"
#include "libgenesis/train/run_dir.h"
#include "libgenesis/train/run_log.h"
#include "libgenesis/train/step.h"
#include "libgenesis/train/stop_signal.h"

#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/caching_allocator.h"
#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis::train {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// CPU threads of the run (libgenesis/core/threads.h): run.threads, else OMP_NUM_THREADS, else
// the free cores (the load sampled for 0.1 s on CPU runs). thread_note(choice) is the warning
// when that oversubscribes them, printed with the run's other notes (after the data loads, so
// that an error stays the only line on stderr).
// The ranks of a distributed run on one host share its cores (and would see each other as load).
ThreadChoice set_threads(int64_t threads, Device device, int ranks_per_host = 1) {
  return configure_threads(threads, {.measure_load = device.is_cpu() && ranks_per_host == 1,
                                     .ranks_per_host = ranks_per_host});
}

// A distributed rank's device: cuda:LOCAL_RANK for a CUDA run (torchrun's convention).
Device rank_device(Device device, const std::string& requested, const dist::ProcessEnv& env) {
  if (!env.distributed() || !device.is_cuda()) return device;
  GENESIS_CHECK(!requested.starts_with("cuda:"), UsageError, "run.device = \"", requested, "\" with ",
                env.world_size, " ranks: each rank takes cuda:LOCAL_RANK; use run.device = \"cuda\"");
#if GENESIS_WITH_CUDA
  const int gpus = cuda::device_count();
  GENESIS_CHECK(gpus > 0, UsageError, "run.device = \"", requested, "\" but no CUDA GPU is visible; train on the CPU with "
                "--device cpu");
  GENESIS_CHECK(env.local_rank < gpus, UsageError, env.describe(), " needs GPU ", env.local_rank, " but this host has ",
                gpus, "; start at most ", gpus, " ranks per host");
#endif
  return Device(DeviceType::cuda, env.local_rank);
}

// Start-up work that rank 0 does before the other ranks (it prepares what they share: the run
// directory, token shards). When it fails there, every rank stops: rank 0 with its error, the
// others with a line pointing at it (exit 2 for a usage or recipe error, as rank 0's).
void rank0_first(dist::ProcessGroup* group, const std::function<void()>& on_rank0,
                 const std::function<void()>& on_others) {
  if (!group) return on_rank0();
  auto agree = [group](int code) {
    Tensor t = full({1}, code, {.dtype = DType::i32});
    group->host().all_reduce(t, dist::ReduceOp::max)->wait();
    return t.data<int32_t>()[0];
  };
  if (group->rank() == 0) {
    try {
      on_rank0();
    } catch (const UsageError&) {
      agree(2);
      throw;
    } catch (...) {
      agree(1);
      throw;
    }
    agree(0);
  } else {
    const int code = agree(0);
    if (code == 2) GENESIS_THROW(UsageError, "rank 0 could not start the run (its message says why)");
    if (code != 0) GENESIS_THROW(DistError, "rank 0 could not start the run (its message says why)");
    if (on_others) on_others();
  }
}

// Bytes of the optimizer's per-parameter slots (exp_avg, ...), what ZeRO-1 divides by the ranks.
int64_t optimizer_state_bytes(const Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const NamedTensor& t : optimizer.state())
    if (!t.name.ends_with(".step")) bytes += t.tensor.numel() * static_cast<int64_t>(t.tensor.element_size());
  return bytes;
}

// Peak memory of the run: the CUDA allocator's peak on a GPU, the process's peak resident
// set on the CPU.
int64_t peak_memory_bytes(Device device) {
#if GENESIS_WITH_CUDA
  if (device.is_cuda()) return static_cast<int64_t>(cuda::memory_stats(device.index).peak_allocated);
#endif
  (void)device;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // ru_maxrss is in KiB on Linux
}

}  // namespace

void check_local_launch(const RecipeSpec& spec, int nproc) {
  const Device device = recipe::resolve_device(spec.run.device);
  dist::ProcessEnv last;  // the rank with the highest local rank
  last.world_size = last.local_world_size = nproc;
  last.rank = last.local_rank = nproc - 1;
  last.launcher = "--nproc-per-node";
  dist::resolve_backend(spec.dist.backend, device, last);
  rank_device(device, spec.run.device, last);
}

fs::path default_run_dir(const RecipeSpec& spec) { return fs::path(spec.run.out_dir) / spec.run.name; }

int run_training(const RecipeSpec& spec, const TrainOptions& options) {
  const RecipeSpec::Training& t = spec.training;
  const bool language_model = spec.data.name == "tokens";
  GENESIS_CHECK(language_model == spec.model.is_language_model(), RecipeError, "model ", spec.model.name,
                " is a language model: it trains on data.name = \"tokens\" (token shards)");
  fs::path run_dir = options.run_dir.empty() ? default_run_dir(spec) : options.run_dir;
  recipe::check_amp_device(spec, recipe::resolve_device(spec.run.device));  // before the run directory is touched
  // From here on SIGINT/SIGTERM stop cleanly: data preparation and evaluation throw
  // Interrupted (exit 130), the loop stops at the next step or micro-batch with a checkpoint.
  StopSignal stop;
  // A distributed run: every rank trains its slice of each global batch; rank 0 alone writes
  // the run directory and reports.
  const dist::ProcessEnv env = dist::process_env();
  set_allow_tf32(spec.run.allow_tf32);
  const Device device = rank_device(recipe::resolve_device(spec.run.device), spec.run.device, env);
  // Under a launcher the run is data parallel even with one rank (as torchrun --nproc-per-node 1
  // runs DDP): the communicator's cost can be measured against a plain run.
  std::unique_ptr<dist::ProcessGroup> group =
      env.launcher != "none" ? dist::join_process_group(env, spec.dist.backend, device, spec.dist.timeout_s) : nullptr;
  const bool rank0 = env.rank == 0;
  const int world = env.world_size;
  EvalShare share;
  if (group) {
    share.rank = env.rank;
    share.world = world;
    share.sum = [&group](std::vector<double>& v) { group->sum(v); };
  }

  std::string start_note, resume_note;
  bool resuming = false;
  std::vector<fs::path> stale;
  const std::string recipe_toml = spec.to_toml();
  rank0_first(
      group.get(),
      [&] {
        // Stale temporaries go first: a run killed inside its first checkpoint write holds only a
        // start, which --resume begins again from step 0.
        stale = io::remove_stale_temporaries(run_dir / "checkpoints");
        resuming = prepare_run_dir(run_dir, options, start_note);
        if (resuming) resume_note = check_resume_recipe(spec, run_dir / "checkpoints");
        if (!resuming) io::write_file_atomic(run_dir / "recipe.toml", recipe_toml);
        if (resuming) {
          // Peek at the checkpoint's step first: lines a crashed run logged after it are dropped
          // from metrics.jsonl, so the resumed run does not log those steps twice.
          if (const std::optional<int64_t> step = checkpoint_step(run_dir / "checkpoints"))
            truncate_metrics_after(run_dir / "metrics.jsonl", *step);
        }
      },
      {});
  if (group) resuming = group->any(rank0 && resuming);  // rank 0 decided
  ThreadChoice threads = set_threads(spec.run.threads, device, env.local_world_size);
  const std::optional<DType> amp = recipe::amp_dtype(spec);
  RunLog log(rank0 ? (run_dir / "metrics.jsonl").string() : std::string(), options.quiet || !rank0,
             rank0 && spec.run.tensorboard ? run_dir.string() : std::string());
  if (!start_note.empty()) log.note(start_note);
  if (!resume_note.empty()) log.note(resume_note);
  share.progress = [&log](int64_t done, int64_t total) { log.progress("evaluating", done, total); };
  for (const fs::path& p : stale) log.note("removed " + p.string() + ", left by an interrupted checkpoint write");
  if (group)
    log.note("data parallel: " + std::to_string(world) + " ranks (" + env.launcher + "), gradients over " +
             std::string(group->gradients().backend()) + ", " + std::to_string(spec.training.batch_size) +
             " examples per rank per micro-batch");

  manual_seed(static_cast<uint64_t>(spec.run.seed));
  RunBatches batches;
  // Rank 0 prepares missing token shards before the others look for them.
  auto load_batches = [&] {
    batches = language_model
                  ? token_batches(spec, device, log, share)
                  : sample_batches(spec, device, share);
  };
  rank0_first(group.get(), load_batches, load_batches);
  std::shared_ptr<nn::Module> model = recipe::build_model(spec, device);
  if (auto* lm = dynamic_cast<models::CausalLM*>(model.get()); lm && batches.check_vocab)
    batches.check_vocab(lm->vocab_size());
  std::unique_ptr<dist::DataParallel> data_parallel;
  if (group)
    data_parallel = std::make_unique<dist::DataParallel>(
        model->parameters(), group->gradients(),
        dist::DataParallelOptions{
            .bucket_mb = spec.dist.bucket_mb,
            .zero = static_cast<int>(spec.dist.zero),
            .reduce_dtype = spec.dist.reduce_dtype == "bf16" ? std::optional<DType>(DType::bf16) : std::nullopt});
  const bool zero = data_parallel && data_parallel->sharded();
  // ZeRO-1: the optimizer updates (and keeps state for) this rank's pieces of the parameters.
  std::vector<ParamGroup> groups = recipe::optimizer_groups(spec, *model);
  if (zero) groups = data_parallel->shard_groups(groups);
  std::unique_ptr<Optimizer> optimizer = recipe::build_optimizer(spec, std::move(groups));
  const auto scaler = recipe::build_grad_scaler(spec, device);  // fp16 only
  const int64_t total = recipe::total_steps(spec, batches.per_epoch);
  LrSchedule schedule = recipe::build_schedule(spec, total);
  TrainStep train_step(*model, *optimizer, scaler.get(),
                       {.autocast = amp,
                        .grad_accum_steps = spec.training.grad_accum_steps,
                        .clip_grad_norm = spec.training.clip_grad_norm,
                        .clip_grad_value = spec.training.clip_grad_value},
                       data_parallel.get());

  TrainerState state;
  state.optimizer_name = optimizer->name();
  state.scheduler_name = spec.scheduler.name;
  if (resuming) {
    std::string fallback;
    state = load_for_resume(run_dir / "checkpoints", *model, optimizer.get(),
                            zero ? train::OptimizerStateLoader([&](Optimizer& o, const std::vector<NamedTensor>& saved,
                                                                   int64_t steps) {
                              data_parallel->load_full_optimizer_state(o, saved, steps);
                            })
                                 : train::OptimizerStateLoader(),
                            rank0, fallback);
    if (!fallback.empty()) {
      log.note(fallback);
      // Lines the run logged after the checkpoint it resumes from go, as after a crash.
      if (rank0) {
        truncate_metrics_after(run_dir / "metrics.jsonl", state.step);
        log.reopen_metrics();  // the truncation wrote a new file
      }
    }
    if (state.world_size != world)
      log.note("warning: the checkpoint was written by " + std::to_string(state.world_size) + " rank(s) and " +
               std::to_string(world) +
               " resume it: the weights and optimizer state carry over, but each global batch now holds other "
               "examples, so the run does not continue exactly as it would have");
    if (scaler && state.grad_scaler) scaler->load_state_dict(*state.grad_scaler);
    // An automatic thread count follows the machine's load; a resumed CPU run keeps the count
    // the checkpoint was written with, since CPU reductions split by threads (bit-exact resume).
    if (device.is_cpu() && threads.source == "automatic" && state.cpu_threads > 0 &&
        state.cpu_threads != threads.threads) {
      threads = set_threads(state.cpu_threads, device);
      log.note("resume: " + std::to_string(state.cpu_threads) + " CPU threads, as the checkpoint was written with");
    } else if (device.is_cpu() && state.cpu_threads > 0 && state.cpu_threads != threads.threads) {
      log.note("warning: resuming with " + std::to_string(threads.threads) + " CPU threads (" + threads.source +
               ") where the checkpoint was written with " + std::to_string(state.cpu_threads) +
               ": the losses will differ from an uninterrupted run in the last bits");
    }
    batches.seek(state.cursor);
    default_generator().set_state(state.rng);
    log.note("resumed " + run_dir.string() + " at step " + std::to_string(state.step));
    if (state.step >= total) {
      // A finished run: nothing to train, and its summary, metrics and checkpoints stay as they are.
      log.note("the run finished at step " + std::to_string(state.step) + " of " + std::to_string(total) +
               ": nothing to do (raise training.steps or training.epochs to train it further)");
      return 0;
    }
  }
  // Every rank starts from rank 0's weights (they agree already when built from one seed).
  if (data_parallel) data_parallel->broadcast_parameters();
  // A stop request counts when any rank got it, so that all stop at the same step.
  auto stop_requested = [&] { return group ? group->any(stop.requested()) : stop.requested(); };
  if (language_model && !batches.evaluate) {
    GENESIS_CHECK(t.eval_every == 0, UsageError, "training.eval_every = ", t.eval_every, " but ", spec.data.shards,
                  " has no val.bin to evaluate on (set data.val_fraction > 0 and prepare the shards again, or "
                  "training.eval_every = 0)");
    log.note("warning: " + spec.data.shards + " has no val.bin: the run reports no evaluation");
  }
  if (spec.run.device == "auto") log.note("device auto: using " + device.str());
  if (device.is_cpu()) {
    if (std::string hint = blas_core_note(); !hint.empty()) log.note("note: " + hint);
    if (std::string hint = thread_note(threads); !hint.empty()) log.note(hint);
  }
  log.note("training " + spec.run.name + " on " + device.str() + ": " + std::to_string(model->num_parameters()) +
           " parameters, " + std::to_string(total) + " steps of " +
           std::to_string(t.batch_size * t.grad_accum_steps * world) +
           (language_model ? " windows of " + std::to_string(spec.data.seq_len) + " tokens" : " examples") + " (" +
           std::to_string(batches.per_epoch) + " batches per epoch)");
  double flops_per_token = 0;
  PeakRate peak;
  if (language_model) {
    flops_per_token = training_flops_per_token(dynamic_cast<const models::CausalLM&>(*model), spec.data.seq_len);
    peak = peak_flops(device, spec.run.peak_tflops);
    log.note("MFU: " + std::to_string(flops_per_token / 1e6) + " MFLOP per token against " +
             std::to_string(peak.flops_per_s / 1e12) + " TFLOP/s (" + peak.source + ")");
  }
  auto mfu = [&](double tokens_per_s) {
    return peak.flops_per_s > 0 ? tokens_per_s * flops_per_token / peak.flops_per_s : 0.0;
  };

  // Evaluation runs under the training's autocast, as the forward passes it measures.
  auto evaluate_model = [&] {
    AutocastGuard autocast(amp);
    return batches.evaluate(*model);
  };

  // fp16: the steps the scaler skipped since the last read go to metrics.jsonl (one host read, at
  // log steps and checkpoints); notes the last applied step and the first whose scale underflowed.
  int64_t last_applied_step = state.step, underflow_step = 0;
  auto log_skipped_steps = [&] {
    if (!scaler) return;
    const std::vector<genesis::amp::ScaleStep> history = scaler->read_history();
    int64_t step = state.step - static_cast<int64_t>(history.size());
    for (const genesis::amp::ScaleStep& s : history) {
      ++step;
      if (s.skipped) log.skipped_step(step, s.scale);
      else last_applied_step = step;
      if (underflow_step == 0 && s.next_scale < genesis::amp::kMinLossScale) underflow_step = step;
    }
  };

  // Steps with a non-finite loss or gradient norm (without an fp16 scaler, which handles its
  // own): flagged on the device, their updates skipped by the optimizer there; the host reads the
  // count where it reads anyway (log steps, checkpoints) and stops or notes them
  // (training.on_nonfinite).
  NonfiniteSteps nonfinite(device);
  auto check_nonfinite = [&] {
    if (scaler) return;
    const std::optional<std::string> problem = nonfinite.news(state.step);
    if (!problem) return;
    GENESIS_CHECK(t.on_nonfinite != "stop", Error, *problem,
                  "; no checkpoint was written after it. Lower optimizer.lr, set training.clip_grad_norm, or set "
                  "training.on_nonfinite = \"skip\"");
    log.note("note: " + *problem + "; skipped (training.on_nonfinite = \"skip\")");
  };

  // The logged loss is the mean over the logging window (as llm.c and torchtitan log it),
  // summed on the device: no host read between log steps. A checkpoint keeps the open window.
  Tensor window_loss;  // sum of the window's step losses (f64, on the device)
  int64_t window_steps = state.log_window_steps;
  if (window_steps > 0) window_loss = scalar_tensor(state.log_window_loss, {.dtype = DType::f64, .device = device});

  auto checkpoint = [&] {
    check_nonfinite();
    log_skipped_steps();
    state.log_window_steps = window_steps;
    state.log_window_loss = window_steps > 0 ? window_loss.item() : 0.0;
    if (scaler) state.grad_scaler = scaler->state_dict();
    state.cursor = batches.cursor();
    state.rng = default_generator().state();
    state.optimizer_steps = optimizer->step_count();
    state.cpu_threads = device.is_cpu() ? threads.threads : 0;
    state.world_size = world;
    // DDP ranks hold the same weights and optimizer state; ZeRO-1 ranks gather theirs at rank 0.
    std::vector<NamedTensor> optimizer_state =
        zero ? data_parallel->full_optimizer_state(*optimizer) : rank0 ? optimizer->state() : std::vector<NamedTensor>{};
    if (rank0)
      save_checkpoint(run_dir / "checkpoints", *model, optimizer->name(), optimizer_state, state, recipe_toml,
                      static_cast<size_t>(t.keep_last), spec.data.tokenizer);
  };

  // A dynamic fp16 scale below 2^-24 means every recent step overflowed: stop with the weights of
  // the last applied step in a checkpoint (the skipped steps did not change them).
  auto stop_on_underflow = [&] {
    if (underflow_step == 0) return;
    checkpoint();
    GENESIS_THROW(Error, "the fp16 loss scale fell below 2^-24 at step ", underflow_step,
                  " (every step with inf/nan gradients is skipped and backs the scale off); the last step applied was ",
                  last_applied_step, " and the checkpoint written at step ", state.step,
                  " holds its weights. Set amp.dtype = \"bf16\" or lower optimizer.lr");
  };

  const Clock::time_point start = Clock::now();
  Clock::time_point window_start = start;
  double paused_s = 0;  // evaluations and checkpoints inside the loop
  int64_t window_samples = 0;
  double last_loss = 0.0;
  std::map<std::string, double> last_eval;
  // Evaluates into last_eval; on a stop request during it writes a checkpoint and returns false.
  auto evaluate_or_stop = [&](const std::string& when) {
    try {
      last_eval = evaluate_model();
      return true;
    } catch (const Interrupted&) {
      checkpoint();
      log.note("stopped by signal during " + when + "; checkpoint of step " + std::to_string(state.step) +
               " written, resume with --resume");
      return false;
    }
  };
  const int64_t first_step = state.step;
  model->train();
  while (state.step < total) {
    for (ParamGroup& g : optimizer->param_groups()) g.lr = schedule.lr(g.base_lr, state.step);
    // A stop between micro-batches abandons the step: the checkpoint then holds the last
    // completed one, with the data cursor and generator rewound to where this step began.
    const data::LoaderCursor step_cursor = batches.cursor();
    const GeneratorState step_rng = default_generator().state();
    // Skipped on the device on inf/nan (the scaler's found-inf, or this step's loss and norm).
    const StepResult result = train_step.run(
        batches.next, device,
        [&](const Tensor& loss, const Tensor& norm) { return nonfinite.flag(loss, norm, state.step + 1); }, {},
        stop_requested);
    if (result.interrupted) {
      batches.seek(step_cursor);
      default_generator().set_state(step_rng);
      checkpoint();
      log.note("stopped by signal during step " + std::to_string(state.step + 1) +
               " (between micro-batches; the step is dropped); checkpoint of step " + std::to_string(state.step) +
               " written, resume with --resume");
      return 130;
    }
    const Tensor &step_loss = result.loss, &grad_norm = result.grad_norm;
    window_samples += result.samples * world;
    {
      NoGradGuard no_grad;
      window_loss = window_loss.defined() ? add(window_loss, step_loss.to(DType::f64)) : step_loss.to(DType::f64);
      ++window_steps;
    }
    ++state.step;

    const bool last = state.step == total;
    const bool stopping = stop_requested();
    if (state.step % t.log_every == 0 || last || stopping) {
      // The only host reads of the loop: the loss, gradient norm and loss scale at log steps.
      last_loss = window_loss.item() / static_cast<double>(window_steps);
      window_loss = Tensor();
      window_steps = 0;
      check_nonfinite();
      log_skipped_steps();
      double elapsed = seconds_since(start), window = seconds_since(window_start);
      double per_step = elapsed / static_cast<double>(state.step - first_step);
      const double samples_per_s = window > 0 ? static_cast<double>(window_samples) / window : 0.0;
      const double tokens_per_s = language_model ? samples_per_s * static_cast<double>(spec.data.seq_len) : 0.0;
      const data::LoaderCursor at = batches.cursor();
      log.step({.step = state.step,
                .total_steps = total,
                .epoch = static_cast<double>(at.epoch) +
                         static_cast<double>(at.batch) / static_cast<double>(batches.per_epoch),
                .loss = last_loss,
                .lr = optimizer->param_groups().front().lr,
                .grad_norm = grad_norm.item(),
                .samples_per_s = samples_per_s,
                .tokens_per_s = tokens_per_s,
                .mfu = mfu(tokens_per_s),
                .elapsed_s = elapsed,
                .eta_s = per_step * static_cast<double>(total - state.step),
                .loss_scale = scaler ? scaler->scale().item() : 0.0});
      window_start = Clock::now();
      window_samples = 0;
    }
    // Evaluations and checkpoints inside a logging window do not count as its training time.
    const Clock::time_point pause = Clock::now();
    if (t.eval_every > 0 && state.step % t.eval_every == 0 && !last && batches.evaluate) {
      if (!evaluate_or_stop("the evaluation at step " + std::to_string(state.step))) return 130;
      log.eval(state.step, last_eval);
    }
    if (stopping) {
      checkpoint();
      log.note("stopped by signal at step " + std::to_string(state.step) + "; checkpoint written, resume with --resume");
      return 130;
    }
    if (t.checkpoint_every > 0 && state.step % t.checkpoint_every == 0 && !last) checkpoint();
    stop_on_underflow();
    window_start += Clock::now() - pause;
    paused_s += seconds_since(pause);
  }
  // The training loop without its evaluations and checkpoints: what samples_per_s counts.
  const double train_s = seconds_since(start) - paused_s;
  if (batches.evaluate) {
    log.note("final evaluation on the " + spec.eval.split + " split");
    if (!evaluate_or_stop("the final evaluation")) return 130;
    log.eval(state.step, last_eval);
  }
  checkpoint();
  stop_on_underflow();
  const double wall = seconds_since(start);  // the final evaluation and checkpoint included

  // Every rank's peak memory and optimizer state, gathered at rank 0 (sums of one-hot vectors).
  std::vector<double> peaks(static_cast<size_t>(world), 0.0), optimizer_bytes(peaks);
  peaks[static_cast<size_t>(env.rank)] = static_cast<double>(peak_memory_bytes(device));
  optimizer_bytes[static_cast<size_t>(env.rank)] = static_cast<double>(optimizer_state_bytes(*optimizer));
  if (group) {
    group->sum(peaks);
    group->sum(optimizer_bytes);
  }
  if (!rank0) return 0;
  int64_t examples = (state.step - first_step) * t.batch_size * t.grad_accum_steps * world;
  const double samples_per_s = train_s > 0 ? static_cast<double>(examples) / train_s : 0.0;
  nlohmann::json summary{{"run", spec.run.name},
                         {"final_step", state.step},
                         {"total_steps", total},
                         {"train_loss", last_loss},
                         {"eval", last_eval},
                         {"eval_split", spec.eval.split},
                         {"wall_s", wall},
                         {"train_s", train_s},
                         {"samples_per_s", samples_per_s},
                         {"peak_memory_bytes", static_cast<int64_t>(peaks[0])},
                         {"device", device.str()},
                         {"parameters", model->num_parameters()},
                         {"world_size", world},
                         {"optimizer_state_bytes", static_cast<int64_t>(optimizer_bytes[0])}};
  if (data_parallel) {
    summary["dist_backend"] = group->gradients().backend();
    summary["zero"] = spec.dist.zero;
    summary["gradient_buckets"] = data_parallel->bucket_count();
    summary["peak_memory_bytes_per_rank"] = peaks;
    summary["optimizer_state_bytes_per_rank"] = optimizer_bytes;
    // Time the step waited for the gradient collectives (the part the backward did not hide).
    summary["comm_wait_share"] = train_s > 0 ? data_parallel->wait_seconds() / train_s : 0.0;
  }
  if (state.grad_scaler) summary["skipped_steps"] = state.grad_scaler->skipped_steps;
  if (!scaler) summary["nonfinite_steps"] = nonfinite.count();
  if (language_model) {
    const double tokens_per_s = samples_per_s * static_cast<double>(spec.data.seq_len);
    summary["tokens_per_s"] = tokens_per_s;
    summary["mfu"] = mfu(tokens_per_s);
    summary["flops_per_token"] = flops_per_token;
    summary["peak_flops_per_s"] = peak.flops_per_s;
    summary["peak_flops_source"] = peak.source;
  }
  io::write_file_atomic(run_dir / "summary.json", summary.dump(2) + "\n");
  return 0;
}

}  // namespace genesis::train
