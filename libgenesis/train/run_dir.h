#pragma once
// The run directory (runs/NAME/: recipe.toml, metrics.jsonl, checkpoints/, summary.json):
// preparing it for a run, and what --resume reads back from it. Used by the trainer.
#include <filesystem>
#include <optional>
#include <string>

#include "libgenesis/io/dir_lock.h"
#include "libgenesis/recipe/recipe.h"
#include "libgenesis/train/checkpoint.h"
#include "libgenesis/train/trainer.h"

namespace genesis::train {

// Whether dir/checkpoints has a `latest` pointer (readable or not) or a step directory.
bool has_checkpoint(const std::filesystem::path& dir);

// Locks the run directory for the life of the run (io::DirLock, created with the directory when
// missing): a second run, --resume or --overwrite of it meanwhile is refused (UsageError naming
// this process). What prepare_run_dir would refuse in a directory never locked is refused first.
io::DirLock lock_run_dir(const std::filesystem::path& dir, const TrainOptions& o);
// Throws lock_run_dir's UsageError when another process holds `dir`; locks nothing.
void check_run_dir_free(const std::filesystem::path& dir);

// Prepares the locked run directory and says whether the run resumes from a checkpoint. Refuses
// to reuse a non-empty directory unless resuming or told to overwrite (which empties it but for
// its lock file); never deletes anything else. A directory where no checkpoint was written yet
// (a start that failed, a run stopped before its first checkpoint) starts over from step 0:
// silently when no step was logged, with `note` set under --resume.
bool prepare_run_dir(const std::filesystem::path& dir, const TrainOptions& o, std::string& note);

// The recipe the checkpoint at `path` was trained with (its recipe.toml); nullopt where it has
// none or it no longer parses (a checkpoint of an older genesis): then nothing is compared.
std::optional<RecipeSpec> checkpoint_recipe(const std::filesystem::path& path);

// --resume against the checkpoint's recipe: refused (UsageError, every offending key listed)
// when a key that defines the run changed; the keys that may change are returned as a warning.
// training.batch_size and training.grad_accum_steps may change when, with `world` ranks, they
// make the checkpoint's global batch (batch_size x grad_accum_steps x its world size): a run
// saved on 2 ranks resumes on 1 with twice the accumulation and continues as it would have.
std::string check_resume_recipe(const RecipeSpec& spec, const std::filesystem::path& checkpoints, int world);

// The data cursor of a checkpoint written with `saved_rows` rows per loader batch (batch_size x
// ranks) for a run reading `rows` per batch: the same place in the epoch's order. Where that
// place falls inside a batch of the new size, the cursor as it was.
data::LoaderCursor convert_cursor(const data::LoaderCursor& cursor, int64_t saved_rows, int64_t rows);

// The note of a --resume that changes the run's length (training.steps or training.epochs) under a
// schedule shaped by it (cosine, linear, wsd, onecycle): the learning rate does not go on from
// where it was but follows the schedule fitted to the new total, from step `step` + 1 on (often
// back up from the floor a finished run reached). "" when the length or the schedule kind leaves
// it be, or the checkpoint's recipe cannot be read.
std::string resume_schedule_note(const RecipeSpec& spec, const std::filesystem::path& checkpoint,
                                 int64_t batches_per_epoch, int64_t step);

// --resume's load: the checkpoint `latest` points at, or where it cannot be read (a damaged
// trainer.json or weights file; `latest` missing, a loop or pointing elsewhere), the newest one
// that can, with `warning` set; `latest` then points at it (written by rank 0). A recipe mismatch (UsageError) is raised at once; when no
// checkpoint loads, the latest one's error is.
TrainerState load_for_resume(const std::filesystem::path& checkpoints, nn::Module& model, Optimizer* optimizer,
                             const OptimizerStateLoader& load_optimizer, bool rank0, std::string& warning);

// The step of the checkpoint `path` resolves to (read from its trainer.json); nullopt when it
// cannot be read.
std::optional<int64_t> checkpoint_step(const std::filesystem::path& path);

// Keeps the lines of metrics.jsonl whose "step" is at most `step`.
void truncate_metrics_after(const std::filesystem::path& metrics, int64_t step);

}  // namespace genesis::train
