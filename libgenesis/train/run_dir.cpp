#include "libgenesis/train/run_dir.h"

#include <cstdio>
#include <iterator>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "libgenesis/core/error.h"
#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/io/dir_lock.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/recipe/build.h"

namespace genesis::train {

namespace fs = std::filesystem;

namespace {

// The checkpoint `checkpoints/latest` points at; nullopt where the pointer is missing, or a loop,
// or names no directory, with `problem` saying so (--resume then takes the newest step).
std::optional<fs::path> latest_checkpoint(const fs::path& checkpoints, std::string& problem) {
  const fs::path pointer = checkpoints / "latest";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(pointer, ec))) {
    problem = pointer.string() + " is missing";
    return std::nullopt;
  }
  try {
    return io::resolve_checkpoint(pointer);
  } catch (const std::exception& e) {  // filesystem_error too: the pointer may be a symlink loop
    problem = e.what();
    return std::nullopt;
  }
}

// Whether `checkpoints` holds nothing but what remove_stale_temporaries removes.
bool holds_only_stale_temporaries(const fs::path& checkpoints) {
  const std::ptrdiff_t entries = std::distance(fs::directory_iterator(checkpoints), fs::directory_iterator());
  return static_cast<size_t>(entries) == io::stale_temporaries(checkpoints).size();
}

// True when `dir` holds only what a run writes before its first checkpoint (recipe.toml,
// metrics.jsonl, a checkpoints/ empty but for the temporaries of a write that was killed): a
// start that failed, or a run stopped early.
bool holds_only_a_start(const fs::path& dir) {
  if (has_checkpoint(dir)) return false;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const bool ours = io::is_dir_lock_file(e.path()) || name == "recipe.toml" || name == "metrics.jsonl" ||
                      name.starts_with("events.out.tfevents.") ||
                      (name == "checkpoints" && e.is_directory() && holds_only_stale_temporaries(e.path()));
    if (!ours) return false;
  }
  return true;
}

// Whether metrics.jsonl in `dir` logged any training step.
bool logged_steps(const fs::path& dir) {
  const fs::path metrics = dir / "metrics.jsonl";
  return fs::exists(metrics) && io::read_file(metrics).find("\"step\"") != std::string::npos;
}

// Keys a resumed run may change: its length, learning rate and cadence, and how and where it
// runs. Every other key changes the model, the data order or the optimizer's state, and
// resuming with it would mix two runs in one directory.
bool may_change_on_resume(const std::string& key) {
  static const std::set<std::string> keys{
      "training.steps",   "training.epochs",    "optimizer.lr",     "training.log_every",
      "training.eval_every", "training.checkpoint_every", "training.keep_last", "training.on_nonfinite",
      "run.threads",      "run.device",         "run.name",         "run.out_dir",
      "run.allow_tf32",   "run.peak_tflops",    "run.tensorboard",    "eval.batch_size",  "eval.split",
      "data.prefetch",    "data.path",          "data.shards",      "data.tokenizer",   "data.cache_dir",
      "data.source",      "data.fetch",         "dist.backend",     "dist.bucket_mb",
      "dist.timeout_s",   "dist.zero",          "dist.reduce_dtype", "dist.param_dtype",
      // Recomputing activations, or updating on the host, changes memory and speed, never the results.
      "training.activation_checkpointing", "training.activation_checkpointing_every", "dist.offload_optimizer"};
  return keys.count(key) > 0;
}

enum class RunDirUse {
  fresh,    // nothing there yet
  restart,  // only a start (no checkpoint): begin again from step 0
  resume,   // --resume from its checkpoint
  replace,  // --overwrite of a run directory
};

// How a run uses `dir`, from what is in it; refusals throw UsageError. Touches nothing.
RunDirUse run_dir_use(const fs::path& dir, const TrainOptions& o) {
  const bool exists_nonempty = !io::empty_but_for_lock(dir);
  if (exists_nonempty && holds_only_a_start(dir) && (o.resume || !logged_steps(dir))) return RunDirUse::restart;
  if (o.resume) {
    GENESIS_CHECK(exists_nonempty && has_checkpoint(dir), UsageError, "--resume: no checkpoint in ", dir.string(),
                  " (train without --resume first, or pass the run directory with --out)");
    return RunDirUse::resume;
  }
  if (!exists_nonempty) return RunDirUse::fresh;
  GENESIS_CHECK(o.overwrite, UsageError, "run directory ", dir.string(),
                " already exists and is not empty: pass --resume to continue it, --overwrite to replace it, or "
                "--out DIR for a new one");
  GENESIS_CHECK(fs::exists(dir / "recipe.toml") || fs::exists(dir / "metrics.jsonl"), UsageError, "--overwrite: ",
                dir.string(), " does not look like a genesis run directory; refusing to delete it");
  return RunDirUse::replace;
}

constexpr std::string_view kRunDirInUse =
    "wait for it to finish or stop it, or pass --out DIR for another run directory";

}  // namespace

bool has_checkpoint(const fs::path& dir) {
  const fs::path checkpoints = dir / "checkpoints";
  std::error_code ec;
  // symlink_status: a `latest` that is a loop or points nowhere still says a checkpoint was written.
  if (fs::exists(fs::symlink_status(checkpoints / "latest", ec))) return true;
  return fs::is_directory(checkpoints, ec) && !io::list_checkpoints(checkpoints).empty();
}

io::DirLock lock_run_dir(const fs::path& dir, const TrainOptions& o) {
  // A directory no genesis process ever locked is in no one's use: what would be refused there is
  // refused before the lock file is created in it, so that a wrong --out keeps no trace. Unless a
  // run locked it meanwhile (two started together): then whether it still holds it is the answer.
  if (!io::has_dir_lock(dir)) {
    try {
      run_dir_use(dir, o);
    } catch (const UsageError&) {
      if (!io::has_dir_lock(dir)) throw;
    }
  }
  return io::DirLock(dir, kRunDirInUse);
}

void check_run_dir_free(const fs::path& dir) { io::DirLock::check_free(dir, kRunDirInUse); }

bool prepare_run_dir(const fs::path& dir, const TrainOptions& o, std::string& note) {
  switch (run_dir_use(dir, o)) {
    case RunDirUse::restart: {
      if (o.resume) note = "--resume: " + dir.string() + " has no checkpoint yet; starting from step 0";
      fs::remove(dir / "metrics.jsonl");
      std::vector<fs::path> events;
      for (const fs::directory_entry& e : fs::directory_iterator(dir))
        if (e.path().filename().string().starts_with("events.out.tfevents.")) events.push_back(e.path());
      for (const fs::path& p : events) fs::remove(p);
      return false;
    }
    case RunDirUse::resume:
      return true;
    case RunDirUse::replace:
      // The lock file stays: removing it would let another run lock a new one meanwhile.
      io::clear_locked_dir(dir);
      return false;
    case RunDirUse::fresh:  // the lock created it
      return false;
  }
  return false;
}

std::optional<RecipeSpec> checkpoint_recipe(const fs::path& path) {
  const fs::path file = io::resolve_checkpoint(path) / "recipe.toml";
  if (!fs::is_regular_file(file)) return std::nullopt;
  try {
    return parse_recipe(io::read_file(file), file.string());
  } catch (const RecipeError&) {
    return std::nullopt;
  }
}

namespace {

// An integer field of the checkpoint's trainer.json, or nullopt where it cannot be read.
std::optional<int64_t> trainer_json_integer(const fs::path& checkpoint, const char* field) {
  try {
    const nlohmann::json j =
        nlohmann::json::parse(io::read_file(io::resolve_checkpoint(checkpoint) / "trainer.json", io::kMaxConfigFileBytes));
    if (j.is_object() && j.contains(field) && j[field].is_number_integer()) return j[field].get<int64_t>();
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace

data::LoaderCursor convert_cursor(const data::LoaderCursor& cursor, int64_t saved_rows, int64_t rows) {
  if (saved_rows == rows || rows <= 0 || (cursor.batch * saved_rows) % rows != 0) return cursor;
  return {.epoch = cursor.epoch, .batch = cursor.batch * saved_rows / rows};
}

std::string check_resume_recipe(const RecipeSpec& spec, const fs::path& checkpoints, int world) {
  std::string problem;
  std::optional<fs::path> checkpoint = latest_checkpoint(checkpoints, problem);
  if (!checkpoint) {
    const std::vector<io::CheckpointEntry> entries = io::list_checkpoints(checkpoints);
    if (entries.empty()) return "";  // load_for_resume says what is wrong
    checkpoint = entries.back().path;
  }
  const std::optional<RecipeSpec> trained = checkpoint_recipe(*checkpoint);
  if (!trained) return "";
  // The global batch: what a step averages over, whatever the split into ranks and micro-batches.
  const std::optional<int64_t> saved_world = trainer_json_integer(*checkpoint, "world_size");
  const bool same_global_batch =
      saved_world && trained->training.batch_size * trained->training.grad_accum_steps * *saved_world ==
                         spec.training.batch_size * spec.training.grad_accum_steps * world;
  std::string refused, accepted;
  for (const RecipeChange& c : recipe_changes(*trained, spec)) {
    const bool split = c.key == "training.batch_size" || c.key == "training.grad_accum_steps";
    std::string& list = may_change_on_resume(c.key) || (split && same_global_batch) ? accepted : refused;
    list += (list.empty() ? "" : ", ") + c.key + " " + c.before + " -> " + c.after;
  }
  const std::string split_hint =
      saved_world && (refused.find("training.batch_size") != std::string::npos ||
                      refused.find("training.grad_accum_steps") != std::string::npos)
          ? " (training.batch_size and training.grad_accum_steps may change when batch_size x grad_accum_steps x "
            "ranks stays the checkpoint's " +
                std::to_string(trained->training.batch_size * trained->training.grad_accum_steps * *saved_world) +
                ")"
          : std::string();
  GENESIS_CHECK(refused.empty(), UsageError, "--resume: the recipe changes what the checkpoint was trained with (",
                refused, ")", split_hint, "; resume with the run's own recipe (",
                (*checkpoint / "recipe.toml").string(), ") or start a new run with --out");
  return accepted.empty() ? "" : "warning: --resume with changed settings: " + accepted;
}

std::string resume_schedule_note(const RecipeSpec& spec, const fs::path& checkpoint, int64_t batches_per_epoch,
                                 int64_t step) {
  const ScheduleKind kind = parse_schedule_kind(spec.scheduler.name);
  if (kind != ScheduleKind::cosine && kind != ScheduleKind::linear && kind != ScheduleKind::wsd &&
      kind != ScheduleKind::onecycle)
    return "";
  std::optional<RecipeSpec> trained;
  try {
    trained = checkpoint_recipe(checkpoint);
  } catch (const std::exception&) {  // an unreadable checkpoint: load_for_resume has said so
  }
  if (!trained || step < 1) return "";
  const int64_t before = recipe::total_steps(*trained, batches_per_epoch);
  const int64_t after = recipe::total_steps(spec, batches_per_epoch);
  if (before == after) return "";
  // The rate of the last step trained against that of the next one.
  const double last = recipe::build_schedule(*trained, before).lr(trained->optimizer.lr, step - 1);
  const double next = recipe::build_schedule(spec, after).lr(spec.optimizer.lr, step);
  auto rate = [](double lr) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1e", lr);
    return std::string(text);
  };
  const std::string length = spec.training.steps_given()
                                 ? "training.steps " + std::to_string(before) + " -> " + std::to_string(after)
                                 : "training.epochs " + std::to_string(trained->training.epochs) + " -> " +
                                       std::to_string(spec.training.epochs) + " (" + std::to_string(before) + " -> " +
                                       std::to_string(after) + " steps)";
  const std::string at = " at step " + std::to_string(step + 1);
  const std::string change =
      next == last ? "is " + rate(next) + at + " as before, then takes the new shape"
                   : std::string(next > last ? "rises" : "falls") + " from " + rate(last) + " to " + rate(next) + at;
  return "note: " + length + ": the " + spec.scheduler.name + " schedule is " +
         (after > before ? "stretched" : "shortened") + " to the new total, so the learning rate " + change;
}

TrainerState load_for_resume(const fs::path& checkpoints, nn::Module& model, Optimizer* optimizer,
                             const OptimizerStateLoader& load_optimizer, bool rank0, std::string& warning) {
  std::string problem;
  const std::optional<fs::path> latest = latest_checkpoint(checkpoints, problem);
  std::vector<fs::path> order;
  if (latest) order.push_back(*latest);
  const std::vector<io::CheckpointEntry> entries = io::list_checkpoints(checkpoints);
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    if (it->path != latest) order.push_back(it->path);
  GENESIS_CHECK(!order.empty(), IoError, "--resume: no checkpoint in ", checkpoints.string(), " (", problem, ")");
  std::exception_ptr first;
  std::string first_message;
  for (const fs::path& dir : order) {
    try {
      TrainerState state = load_checkpoint(dir, model, optimizer, load_optimizer);
      if (dir != latest) {
        std::string why = latest ? "checkpoint " + latest->string() + " cannot be read" : problem;
        if (!first_message.empty()) why += (latest ? " (" : " and newer steps cannot be read (") + first_message + ")";
        warning = "warning: " + why + "; resumed from " + dir.filename().string() + ", the newest one that can";
        if (rank0) io::update_latest_pointer(checkpoints, dir.filename().string());
      }
      return state;
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      if (!first) {
        first = std::current_exception();
        first_message = e.what();
      }
    }
  }
  std::rethrow_exception(first);
}

std::optional<int64_t> checkpoint_step(const fs::path& path) { return trainer_json_integer(path, "step"); }

void truncate_metrics_after(const fs::path& metrics, int64_t step) {
  if (!fs::exists(metrics)) return;
  const std::string text = io::read_file(metrics);
  std::istringstream in(text);
  std::string kept, line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() > step)
      continue;
    kept += line + "\n";
  }
  if (kept != text) io::write_file_atomic(metrics, kept);  // a run resumed where it stopped is left untouched
}

}  // namespace genesis::train
