#pragma once
// One `genesis train` run (train/trainer.h's run_training drives it), split by concern:
//   training_run.cpp   start-up: the ranks, the run directory, data, model, data parallel,
//                      optimizer and schedule, and the resume from a checkpoint
//   training_loop.cpp  the step loop: its logging window, evaluations, checkpoints, non-finite
//                      steps, fp16 scale underflow and clean stops
//   run_summary.cpp    summary.json at the end (every rank's peak memory gathered at rank 0)
// Internal to libgenesis/train.
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "libgenesis/amp/grad_scaler.h"
#include "libgenesis/core/threads.h"
#include "libgenesis/dist/data_parallel.h"
#include "libgenesis/dist/process_group.h"
#include "libgenesis/io/dir_lock.h"
#include "libgenesis/optim/lr_schedule.h"
#include "libgenesis/optim/optimizer.h"
#include "libgenesis/train/checkpoint.h"
#include "libgenesis/train/data_source.h"
#include "libgenesis/train/lm_metrics.h"
#include "libgenesis/train/run_log.h"
#include "libgenesis/train/step.h"
#include "libgenesis/train/stop_signal.h"
#include "libgenesis/train/trainer.h"

namespace genesis::train {

class TrainingRun {
 public:
  // Start-up, resume included. A resumed run that had already finished is finished() at once.
  TrainingRun(const RecipeSpec& spec, const TrainOptions& options, const StopSignal& stop);
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  bool finished() const { return state_.step >= total_; }
  // The steps, the final evaluation and checkpoint, and the summary. Returns the exit code: 0, or
  // 130 after a stop by signal (with a checkpoint written).
  int train();

 private:
  using Clock = std::chrono::steady_clock;

  // training_run.cpp
  void prepare_run_directory();
  void load_data_and_model();
  void resume();
  void announce();

  // training_loop.cpp
  bool stop_requested() const;
  void log_step(const Tensor& grad_norm, Clock::time_point start, Clock::time_point window_start, int64_t first_step);
  void checkpoint();
  // The end of a stop's note: which checkpoint it wrote, or that the run writes none.
  std::string checkpoint_note() const;
  // Evaluates into last_eval_; on a stop request during it writes a checkpoint and returns false.
  bool evaluate_or_stop(const std::string& when);
  void check_nonfinite();
  void log_skipped_steps();
  void stop_on_underflow();

  // run_summary.cpp
  void write_summary(double train_s, double wall_s);

  // tokens_per_s counts every rank's tokens; peak_ is one device's rate, so the work is shared
  // out over world_ devices (each rank runs the same model on its own share of the batch).
  double mfu(double tokens_per_s) const {
    return peak_.flops_per_s > 0 ? tokens_per_s * flops_per_token_ / (peak_.flops_per_s * world_) : 0.0;
  }

  const RecipeSpec& spec_;
  const RecipeSpec::Training& t_;
  const TrainOptions options_;
  const StopSignal& stop_;
  const bool language_model_;  // the data feeds a language model: tokens/s and MFU are reported
  std::filesystem::path run_dir_;
  // Rank 0's; declared before everything the run writes, so that it is released after it all.
  std::optional<io::DirLock> run_lock_;
  const std::string recipe_toml_;

  // The ranks: rank 0 alone writes the run directory and reports.
  dist::ProcessEnv env_;
  Device device_;
  std::unique_ptr<dist::ProcessGroup> group_;
  bool rank0_ = true;
  int world_ = 1;
  EvalShare share_;

  bool resuming_ = false;
  std::string start_note_, resume_note_;
  std::vector<std::filesystem::path> stale_;
  ThreadChoice threads_;
  std::optional<DType> amp_;
  std::unique_ptr<RunLog> log_;

  std::unique_ptr<DataSource> data_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<dist::DataParallel> data_parallel_;
  bool zero_ = false;  // ZeRO-1: the optimizer holds this rank's pieces of the parameters
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<amp::GradScaler> scaler_;  // fp16 only
  int64_t total_ = 0;
  std::optional<LrSchedule> schedule_;
  std::unique_ptr<TrainStep> train_step_;
  TrainerState state_;
  double flops_per_token_ = 0;
  PeakRate peak_;

  // The loop's bookkeeping.
  std::optional<NonfiniteSteps> nonfinite_;
  Tensor window_loss_;  // sum of the logging window's step losses (f64, on the device)
  int64_t window_steps_ = 0;
  // What the steps processed, over all ranks: in the logging window, and since the run (or its
  // resume) started.
  struct Processed {
    int64_t samples = 0, tokens = 0, loss_terms = 0;
    void add(const Processed& p) {
      samples += p.samples;
      tokens += p.tokens;
      loss_terms += p.loss_terms;
    }
  };
  Processed window_, since_start_;
  int64_t last_applied_step_ = 0, underflow_step_ = 0;  // fp16
  double last_loss_ = 0.0;
  std::map<std::string, double> last_eval_;
};

// Shared by the pieces above (trainer.cpp).
namespace detail {
// CPU threads of the run (core/threads.h); the ranks of one host share its cores.
ThreadChoice set_threads(int64_t threads, Device device, int ranks_per_host = 1);
// Start-up work rank 0 does before the others (the run directory, token shards); a failure
// there stops every rank.
void rank0_first(dist::ProcessGroup* group, const std::function<void()>& on_rank0,
                 const std::function<void()>& on_others);
// A distributed rank's device: cuda:LOCAL_RANK for a CUDA run.
Device rank_device(Device device, const std::string& requested, const dist::ProcessEnv& env);
int64_t optimizer_state_bytes(const Optimizer& optimizer);
int64_t peak_memory_bytes(Device device);
}  // namespace detail

}  // namespace genesis::train
