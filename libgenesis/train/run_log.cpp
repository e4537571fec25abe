#include "libgenesis/train/run_log.h"

#include <unistd.h>

#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

#include "libgenesis/core/error.h"
#include "libgenesis/train/tensorboard.h"

namespace genesis::train {

std::string format_duration(double s) {
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof(buf), "%dh%02dm", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
  else if (s >= 60) std::snprintf(buf, sizeof(buf), "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof(buf), "%.1fs", s);
  return buf;
}

RunLog::RunLog(const std::string& metrics_path, bool quiet, const std::string& tensorboard_dir)
    : metrics_path_(metrics_path), tensorboard_dir_(tensorboard_dir), quiet_(quiet), tty_(isatty(STDERR_FILENO) == 1) {
  reopen_metrics();
}

TensorBoardWriter* RunLog::tensorboard() {
  // Made at the first point, so that a run that logs nothing (a finished run resumed) leaves
  // no empty event file behind.
  if (!tensorboard_ && !tensorboard_dir_.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir_);
  return tensorboard_.get();
}

void RunLog::progress(const std::string& what, int64_t done, int64_t total) {
  if (quiet_ || total <= 0) return;
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if (what != progress_what_ || done <= 1) {
    progress_what_ = what;
    progress_start_ = progress_last_line_ = now;
  }
  const double elapsed = now - progress_start_;
  const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total - done) : 0.0;
  const double frac = static_cast<double>(done) / static_cast<double>(total);
  char line[200];
  std::snprintf(line, sizeof line, "%s %lld/%lld | %s | eta %s", what.c_str(), static_cast<long long>(done),
                static_cast<long long>(total), format_duration(elapsed).c_str(), done > 0 ? format_duration(eta).c_str() : "?");
  if (tty_) {
    constexpr int kWidth = 24;
    std::string bar(static_cast<size_t>(frac * kWidth), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r[%s] %3.0f%% %s\x1b[K", bar.c_str(), frac * 100.0, line);
    progress_open_ = true;
    if (done >= total) end_progress_line();
  } else if (now - progress_last_line_ >= 10.0 && done < total) {
    std::fprintf(stderr, "%s\n", line);
    progress_last_line_ = now;
  }
  std::fflush(stderr);
}

void RunLog::clear_progress() {
  if (!progress_open_) return;
  std::fputs("\r\x1b[K", stderr);
  std::fflush(stderr);
  progress_open_ = false;
}

void RunLog::reopen_metrics() {
  if (metrics_path_.empty()) return;  // a rank other than 0 of a distributed run
  if (metrics_) std::fclose(metrics_);
  metrics_ = std::fopen(metrics_path_.c_str(), "a");
  GENESIS_CHECK(metrics_ != nullptr, Error, "cannot open ", metrics_path_, " for writing");
}

RunLog::~RunLog() {
  end_progress_line();
  if (metrics_) std::fclose(metrics_);
}

void RunLog::write_metrics(const nlohmann::json& line) {
  if (!metrics_) return;
  std::fprintf(metrics_, "%s\n", line.dump().c_str());
  std::fflush(metrics_);
}

void RunLog::end_progress_line() {
  if (progress_open_) std::fputc('\n', stderr);
  progress_open_ = false;
}

void RunLog::step(const StepRecord& r) {
  nlohmann::json j{{"step", r.step},       {"epoch", r.epoch},         {"loss", r.loss},
                   {"lr", r.lr},           {"grad_norm", r.grad_norm}, {"samples_per_s", r.samples_per_s},
                   {"elapsed_s", r.elapsed_s}};
  if (r.tokens_per_s > 0) j["tokens_per_s"] = r.tokens_per_s;
  if (r.mfu > 0) j["mfu"] = r.mfu;
  if (r.loss_scale > 0) j["loss_scale"] = r.loss_scale;
  write_metrics(j);
  if (TensorBoardWriter* tb = tensorboard()) {
    tb->scalar("train/loss", r.loss, r.step);
    tb->scalar("train/lr", r.lr, r.step);
    tb->scalar("train/grad_norm", r.grad_norm, r.step);
    tb->scalar("train/samples_per_s", r.samples_per_s, r.step);
    if (r.tokens_per_s > 0) tb->scalar("train/tokens_per_s", r.tokens_per_s, r.step);
    if (r.mfu > 0) tb->scalar("train/mfu", r.mfu, r.step);
    if (r.loss_scale > 0) tb->scalar("train/loss_scale", r.loss_scale, r.step);
    tb->flush();
  }
  if (quiet_) return;
  char rate[64];
  if (r.tokens_per_s > 0)
    std::snprintf(rate, sizeof(rate), "%8.0f tok/s | MFU %5.2f%%", r.tokens_per_s, 100.0 * r.mfu);
  else
    std::snprintf(rate, sizeof(rate), "%8.0f samples/s", r.samples_per_s);
  char line[320];
  std::snprintf(line, sizeof(line), "step %6lld/%lld | epoch %6.2f | loss %.4f | lr %.3e | norm %7.4f | %s | %s | eta %s",
                static_cast<long long>(r.step), static_cast<long long>(r.total_steps), r.epoch, r.loss, r.lr,
                r.grad_norm, rate, format_duration(r.elapsed_s).c_str(), format_duration(r.eta_s).c_str());
  if (tty_) {
    // A progress bar that redraws in place.
    constexpr int kWidth = 24;
    double frac = r.total_steps > 0 ? static_cast<double>(r.step) / static_cast<double>(r.total_steps) : 0.0;
    int filled = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r[%s] %3.0f%% %s\x1b[K", bar.c_str(), frac * 100.0, line);
    progress_open_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line);
  }
  std::fflush(stderr);
}

void RunLog::eval(int64_t step, const std::map<std::string, double>& metrics) {
  nlohmann::json values(metrics);
  write_metrics({{"step", step}, {"eval", values}});
  if (TensorBoardWriter* tb = tensorboard()) {
    for (const auto& [k, v] : metrics) tb->scalar("eval/" + k, v, step);
    tb->flush();
  }
  if (quiet_) return;
  end_progress_line();
  std::string line = "eval  step " + std::to_string(step);
  for (const auto& [k, v] : metrics) {
    char buf[64];
    // Counts (tokens, bytes) as integers, measures with four decimals.
    if (v == std::round(v) && std::abs(v) >= 1 && std::abs(v) < 1e15) std::snprintf(buf, sizeof(buf), " | %s %.0f", k.c_str(), v);
    else std::snprintf(buf, sizeof(buf), " | %s %.4f", k.c_str(), v);
    line += buf;
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

void RunLog::skipped_step(int64_t step, double loss_scale) {
  nlohmann::json j{{"step", step}, {"skipped", true}, {"loss_scale", loss_scale}};
  write_metrics(j);
  char line[128];
  std::snprintf(line, sizeof(line), "step %6lld skipped: inf/nan gradients at loss scale %g",
                static_cast<long long>(step), loss_scale);
  note(line);
}

void RunLog::note(const std::string& message) {
  // Quiet keeps the terminal clear of progress and information, not of warnings; the ranks
  // other than 0 of a distributed run (no metrics file) print nothing.
  if (quiet_ && (!message.starts_with("warning:") || metrics_path_.empty())) return;
  end_progress_line();
  std::fprintf(stderr, "%s\n", message.c_str());
}

}  // namespace genesis::train
