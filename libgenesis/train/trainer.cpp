#include "libgenesis/train/trainer.h"

#include <omp.h>
#include <sys/resource.h>

#include <chrono>
#include <sstream>
#include <nlohmann/json.hpp>

#include "kernels/cpu/linalg.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/core/generator.h"
#include "libgenesis/data/loader.h"
#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/safetensors.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/loss.h"
#include "libgenesis/ops/reduce.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/checkpoint.h"
#include "libgenesis/train/run_log.h"
#include "libgenesis/train/stop_signal.h"

#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/caching_allocator.h"
#endif

extern "C" void openblas_set_num_threads(int);

namespace genesis::train {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void set_threads(int64_t threads) {
  if (threads <= 0) return;
  omp_set_num_threads(static_cast<int>(threads));
  openblas_set_num_threads(static_cast<int>(threads));
}

// Prepares the run directory: refuses to reuse a non-empty one unless resuming or told to
// overwrite; never deletes anything else.
void prepare_run_dir(const fs::path& dir, const TrainOptions& o) {
  bool exists_nonempty = fs::exists(dir) && !fs::is_empty(dir);
  if (o.resume) {
    GENESIS_CHECK(exists_nonempty && fs::exists(dir / "checkpoints"), UsageError, "--resume: no checkpoint in ",
                  dir.string(), " (train without --resume first, or pass the run directory with --out)");
    return;
  }
  if (exists_nonempty) {
    GENESIS_CHECK(o.overwrite, UsageError, "run directory ", dir.string(),
                  " already exists and is not empty: pass --resume to continue it, --overwrite to replace it, or "
                  "--out DIR for a new one");
    GENESIS_CHECK(fs::exists(dir / "recipe.toml") || fs::exists(dir / "metrics.jsonl"), UsageError, "--overwrite: ",
                  dir.string(), " does not look like a genesis run directory; refusing to delete it");
    fs::remove_all(dir);
  }
  fs::create_directories(dir);
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

// The step of the checkpoint `path` resolves to (read from its trainer.json).
int64_t checkpoint_step(const fs::path& path) {
  fs::path dir = io::resolve_checkpoint(path);
  try {
    return nlohmann::json::parse(io::read_file(dir / "trainer.json")).at("step").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    GENESIS_THROW(FormatError, (dir / "trainer.json").string(), ": ", e.what());
  }
}

// Keeps the lines of metrics.jsonl whose "step" is at most `step`.
void truncate_metrics_after(const fs::path& metrics, int64_t step) {
  if (!fs::exists(metrics)) return;
  std::istringstream in(io::read_file(metrics));
  std::string kept, line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() > step)
      continue;
    kept += line + "\n";
  }
  io::write_file_atomic(metrics, kept);
}

// The per-step hooks that later issues fill in: data-parallel gradient averaging after
// backward, and the autocast scope around the forward pass. Both are no-ops today.
void synchronize_gradients(const std::vector<Tensor>& /*params*/) {}
struct AutocastScope {
  explicit AutocastScope(const RecipeSpec& /*spec*/) {}
};

}  // namespace

fs::path default_run_dir(const RecipeSpec& spec) { return fs::path(spec.run.out_dir) / spec.run.name; }

std::map<std::string, double> evaluate(nn::Module& model, const data::Dataset& dataset, int64_t batch_size,
                                       Device device) {
  GENESIS_CHECK(dataset.size() > 0, ValueError, "evaluate: the evaluation set is empty");
  bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  data::DataLoader loader(dataset, {.batch_size = batch_size, .shuffle = false, .prefetch = 0});
  Tensor loss_sum = scalar_tensor(0.0, {.dtype = DType::f64, .device = device});
  Tensor correct = scalar_tensor(0.0, {.dtype = DType::i64});
  for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
    data::Batch batch = loader.next();
    Tensor x = batch.inputs.to(device), y = batch.targets.to(device);
    Tensor logits = model(x);
    loss_sum = add(loss_sum, cross_entropy(logits, y, {.reduction = Reduction::sum}).to(DType::f64));
    // argmax runs on the host: it has no CUDA kernel yet (a [batch, classes] copy per batch).
    correct = add(correct, sum(eq(argmax(logits.to(kCPU), -1), batch.targets)));
  }
  model.train(was_training);
  auto n = static_cast<double>(dataset.size());
  return {{"loss", loss_sum.item() / n}, {"accuracy", correct.item() / n}};
}

int run_training(const RecipeSpec& spec, const TrainOptions& options) {
  const RecipeSpec::Training& t = spec.training;
  fs::path run_dir = options.run_dir.empty() ? default_run_dir(spec) : options.run_dir;
  prepare_run_dir(run_dir, options);
  set_threads(spec.run.threads);
  set_allow_tf32(spec.run.allow_tf32);
  Device device = recipe::resolve_device(spec.run.device);
  std::string recipe_toml = spec.to_toml();
  if (!options.resume) io::write_file_atomic(run_dir / "recipe.toml", recipe_toml);

  manual_seed(static_cast<uint64_t>(spec.run.seed));
  recipe::RunData run_data = recipe::build_data(spec);
  std::shared_ptr<nn::Module> model = recipe::build_model(spec, device);
  std::unique_ptr<Optimizer> optimizer = recipe::build_optimizer(spec, *model);
  data::DataLoader loader(run_data.train,
                          {.batch_size = t.batch_size, .shuffle = spec.data.shuffle, .drop_last = false,
                           .seed = static_cast<uint64_t>(spec.run.seed), .prefetch = static_cast<int>(spec.data.prefetch)});
  const int64_t total = recipe::total_steps(spec, loader.batches_per_epoch());
  LrSchedule schedule = recipe::build_schedule(spec, total);
  std::vector<Tensor> params = model->parameters();

  TrainerState state;
  if (options.resume) {
    // Peek at the checkpoint's step first: lines a crashed run logged after it are dropped
    // from metrics.jsonl, so the resumed run does not log those steps twice.
    truncate_metrics_after(run_dir / "metrics.jsonl", checkpoint_step(run_dir / "checkpoints"));
  }
  RunLog log((run_dir / "metrics.jsonl").string(), options.quiet);
  state.optimizer_name = optimizer->name();
  state.scheduler_name = spec.scheduler.name;
  if (options.resume) {
    state = load_checkpoint(run_dir / "checkpoints", *model, optimizer.get());
    loader.seek(state.cursor);
    default_generator().set_state(state.rng);
    log.note("resumed " + run_dir.string() + " at step " + std::to_string(state.step));
  }
  if (spec.run.device == "auto") log.note("device auto: using " + device.str());
  if (device.is_cpu()) {
    if (std::string hint = kernels::cpu::blas_kernel_warning(); !hint.empty()) log.note("note: " + hint);
  }
  log.note("training " + spec.run.name + " on " + device.str() + ": " + std::to_string(model->num_parameters()) +
           " parameters, " + std::to_string(total) + " steps of " + std::to_string(t.batch_size * t.grad_accum_steps) +
           " examples (" + std::to_string(loader.batches_per_epoch()) + " batches per epoch)");

  StopSignal stop;
  auto checkpoint = [&] {
    state.cursor = loader.cursor();
    state.rng = default_generator().state();
    state.optimizer_steps = optimizer->step_count();
    save_checkpoint(run_dir / "checkpoints", *model, *optimizer, state, recipe_toml, static_cast<size_t>(t.keep_last));
  };

  const Clock::time_point start = Clock::now();
  Clock::time_point window_start = start;
  int64_t window_samples = 0;
  double last_loss = 0.0;
  std::map<std::string, double> last_eval;
  const int64_t first_step = state.step;
  model->train();
  while (state.step < total) {
    for (ParamGroup& g : optimizer->param_groups()) g.lr = schedule.lr(g.base_lr, state.step);
    Tensor step_loss;
    for (int64_t micro = 0; micro < t.grad_accum_steps; ++micro) {
      data::Batch batch = loader.next();
      Tensor x = batch.inputs.to(device), y = batch.targets.to(device);
      Tensor loss;
      {
        AutocastScope autocast(spec);
        loss = cross_entropy((*model)(x), y);
      }
      Tensor scaled = t.grad_accum_steps > 1 ? div(loss, static_cast<double>(t.grad_accum_steps)) : loss;
      scaled.backward();
      step_loss = step_loss.defined() ? add(step_loss, scaled.detach()) : scaled.detach();
      window_samples += batch.targets.size(0);
    }
    synchronize_gradients(params);
    Tensor grad_norm = clip_grad_norm(params, t.clip_grad_norm);
    if (t.clip_grad_value > 0.0) clip_grad_value(params, t.clip_grad_value);
    optimizer->step();
    optimizer->zero_grad();
    ++state.step;

    bool last = state.step == total;
    if (state.step % t.log_every == 0 || last || stop.requested()) {
      // The only host reads of the loop: the loss and gradient norm at log steps.
      last_loss = step_loss.item();
      double elapsed = seconds_since(start), window = seconds_since(window_start);
      double per_step = elapsed / static_cast<double>(state.step - first_step);
      log.step({.step = state.step,
                .total_steps = total,
                .epoch = static_cast<double>(loader.cursor().epoch) +
                         static_cast<double>(loader.cursor().batch) / static_cast<double>(loader.batches_per_epoch()),
                .loss = last_loss,
                .lr = optimizer->param_groups().front().lr,
                .grad_norm = grad_norm.item(),
                .samples_per_s = window > 0 ? static_cast<double>(window_samples) / window : 0.0,
                .elapsed_s = elapsed,
                .eta_s = per_step * static_cast<double>(total - state.step)});
      window_start = Clock::now();
      window_samples = 0;
    }
    if (t.eval_every > 0 && state.step % t.eval_every == 0 && !last) {
      last_eval = evaluate(*model, run_data.eval, spec.eval.batch_size, device);
      log.eval(state.step, last_eval);
    }
    if (stop.requested()) {
      checkpoint();
      log.note("stopped by signal at step " + std::to_string(state.step) + "; checkpoint written, resume with --resume");
      return 130;
    }
    if (t.checkpoint_every > 0 && state.step % t.checkpoint_every == 0 && !last) checkpoint();
  }
  double wall = seconds_since(start);
  if (run_data.eval.size() > 0) {
    last_eval = evaluate(*model, run_data.eval, spec.eval.batch_size, device);
    log.eval(state.step, last_eval);
  }
  checkpoint();

  int64_t examples = (state.step - first_step) * t.batch_size * t.grad_accum_steps;
  nlohmann::json summary{{"run", spec.run.name},
                         {"final_step", state.step},
                         {"total_steps", total},
                         {"train_loss", last_loss},
                         {"eval", last_eval},
                         {"eval_split", spec.eval.split},
                         {"wall_s", wall},
                         {"samples_per_s", wall > 0 ? static_cast<double>(examples) / wall : 0.0},
                         {"peak_memory_bytes", peak_memory_bytes(device)},
                         {"device", device.str()},
                         {"parameters", model->num_parameters()}};
  io::write_file_atomic(run_dir / "summary.json", summary.dump(2) + "\n");
  return 0;
}

std::map<std::string, double> run_evaluation(const RecipeSpec& spec, const fs::path& checkpoint,
                                             const std::string& split) {
  RecipeSpec s = spec;
  if (!split.empty()) s.eval.split = split;
  GENESIS_CHECK(s.eval.split != "val" || s.data.val_fraction > 0.0, UsageError,
                "--split val needs data.val_fraction > 0 in the recipe");
  set_threads(s.run.threads);
  set_allow_tf32(s.run.allow_tf32);
  Device device = recipe::resolve_device(s.run.device);
  recipe::RunData run_data = recipe::build_data(s);
  std::shared_ptr<nn::Module> model = recipe::build_model(s, device);
  load_checkpoint(checkpoint, *model, nullptr);
  return evaluate(*model, run_data.eval, s.eval.batch_size, device);
}

}  // namespace genesis::train
