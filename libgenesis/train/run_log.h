#pragma once
// What a run reports while it trains: one fixed-format line per logged step on stderr (a
// live progress bar instead when stderr is a terminal), the same fields as one JSON object
// per line in metrics.jsonl, and summary.json at the end.
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace genesis::train {

class TensorBoardWriter;

struct StepRecord {
  int64_t step = 0;  // optimizer steps done
  int64_t total_steps = 0;
  double epoch = 0.0;  // fractional epochs done
  double loss = 0.0;
  double lr = 0.0;
  double grad_norm = 0.0;
  double samples_per_s = 0.0;
  double tokens_per_s = 0.0;  // language models; 0 = not reported
  double mfu = 0.0;           // model-FLOPs utilization in [0, 1]; 0 = not reported
  double elapsed_s = 0.0;
  double eta_s = 0.0;
  double loss_scale = 0.0;  // fp16: the loss scale after the step; 0 = not reported
};

class RunLog {
 public:
  // metrics_path: metrics.jsonl (appended to, so resumed runs continue the file); empty: none
  // (the ranks other than 0 of a distributed run).
  // quiet: no terminal output (metrics.jsonl is still written).
  // tensorboard_dir: where a TensorBoard event file of the same curves goes; empty: none.
  RunLog(const std::string& metrics_path, bool quiet, const std::string& tensorboard_dir = {});
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  void step(const StepRecord& r);
  // An evaluation result: a line on stderr and {"step": .., "eval": {...}} in metrics.jsonl.
  void eval(int64_t step, const std::map<std::string, double>& metrics);
  // A step whose fp16 gradients held inf/nan, so the optimizer skipped it:
  // {"step": .., "skipped": true, "loss_scale": <the scale it ran with>} in metrics.jsonl.
  void skipped_step(int64_t step, double loss_scale);
  // A free-form note on stderr (rank 0 only; suppressed when quiet, unless it starts with
  // "warning:" and this is rank 0's log).
  void note(const std::string& message);
  // Progress of long work that is not training (an evaluation): a bar with ETA redrawn in
  // place on a terminal, a plain line every 10 s otherwise; nothing when quiet.
  void progress(const std::string& what, int64_t done, int64_t total);
  // Erases an unfinished progress bar from the terminal (before other output goes there).
  void clear_progress();
  // Opens metrics.jsonl again (after it was replaced, e.g. truncated to an older checkpoint).
  void reopen_metrics();

 private:
  void end_progress_line();
  void write_metrics(const nlohmann::json& line);
  TensorBoardWriter* tensorboard();
  std::string metrics_path_;
  std::FILE* metrics_ = nullptr;
  std::string tensorboard_dir_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  bool quiet_;
  bool tty_;
  bool progress_open_ = false;
  std::string progress_what_;
  double progress_start_ = 0, progress_last_line_ = 0;  // seconds on a steady clock
};

// Formats seconds as "1h02m", "3m05s" or "12.3s".
std::string format_duration(double seconds);

}  // namespace genesis::train
