#include "libgenesis/optim/lr_schedule.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>

#include "libgenesis/core/error.h"

namespace genesis {

namespace {
constexpr std::array<std::pair<ScheduleKind, std::string_view>, 8> kNames{{
    {ScheduleKind::constant, "constant"},
    {ScheduleKind::step, "step"},
    {ScheduleKind::multistep, "multistep"},
    {ScheduleKind::exponential, "exponential"},
    {ScheduleKind::cosine, "cosine"},
    {ScheduleKind::linear, "linear"},
    {ScheduleKind::wsd, "wsd"},
    {ScheduleKind::onecycle, "onecycle"},
}};

// Cosine interpolation from `from` (pct = 0) to `to` (pct = 1), as OneCycleLR's anneal.
double cosine_between(double from, double to, double pct) {
  return to + (from - to) / 2.0 * (1.0 + std::cos(std::numbers::pi * pct));
}
}  // namespace

ScheduleKind parse_schedule_kind(std::string_view name) {
  for (const auto& [kind, n] : kNames)
    if (n == name) return kind;
  std::string valid;
  for (const auto& [kind, n] : kNames) valid += (valid.empty() ? "" : ", ") + std::string(n);
  GENESIS_THROW(UsageError, "unknown scheduler '", name, "' (valid: ", valid, ")");
}

std::string_view schedule_kind_name(ScheduleKind kind) {
  for (const auto& [k, n] : kNames)
    if (k == kind) return n;
  return "?";
}

std::vector<std::string_view> schedule_kind_names() {
  std::vector<std::string_view> out;
  for (const auto& [k, n] : kNames) out.push_back(n);
  return out;
}

LrSchedule::LrSchedule(LrScheduleConfig c) : config_(std::move(c)) {
  const LrScheduleConfig& k = config_;
  GENESIS_CHECK(k.warmup_steps >= 0, UsageError, "scheduler.warmup_steps must be >= 0 (got ", k.warmup_steps, ")");
  GENESIS_CHECK(k.warmup_start_factor >= 0.0 && k.warmup_start_factor <= 1.0, UsageError,
                "scheduler.warmup_start_factor must be in [0, 1] (got ", k.warmup_start_factor, ")");
  GENESIS_CHECK(k.step_size >= 1, UsageError, "scheduler.step_size must be >= 1 (got ", k.step_size, ")");
  GENESIS_CHECK(k.gamma > 0.0, UsageError, "scheduler.gamma must be > 0 (got ", k.gamma, ")");
  GENESIS_CHECK(k.min_lr_factor >= 0.0 && k.min_lr_factor <= 1.0, UsageError,
                "scheduler.min_lr_factor must be in [0, 1] (got ", k.min_lr_factor, ")");
  GENESIS_CHECK(k.decay_fraction >= 0.0 && k.decay_fraction <= 1.0, UsageError,
                "scheduler.decay_fraction must be in [0, 1] (got ", k.decay_fraction, ")");
  GENESIS_CHECK(std::is_sorted(k.milestones.begin(), k.milestones.end()), UsageError,
                "scheduler.milestones must be increasing");
  bool needs_total = k.kind == ScheduleKind::cosine || k.kind == ScheduleKind::linear || k.kind == ScheduleKind::wsd ||
                     k.kind == ScheduleKind::onecycle;
  GENESIS_CHECK(!needs_total || k.total_steps > 0, UsageError, "scheduler '", schedule_kind_name(k.kind),
                "' needs the run's total number of steps (training.steps or training.epochs)");
  if (k.kind == ScheduleKind::onecycle) {
    GENESIS_CHECK(k.pct_start > 0.0 && k.pct_start < 1.0, UsageError, "scheduler.pct_start must be in (0, 1) (got ",
                  k.pct_start, ")");
    GENESIS_CHECK(k.div_factor > 0.0 && k.final_div_factor > 0.0, UsageError,
                  "scheduler.div_factor and final_div_factor must be > 0");
  }
}

// Factor applied to base_lr, t steps after the warmup, for a schedule spanning `span` steps.
double LrSchedule::after_warmup_factor(int64_t t, int64_t span) const {
  const LrScheduleConfig& k = config_;
  auto tt = static_cast<double>(t);
  switch (k.kind) {
    case ScheduleKind::constant: return 1.0;
    case ScheduleKind::step: return std::pow(k.gamma, static_cast<double>(t / k.step_size));
    case ScheduleKind::multistep: {
      auto passed = std::upper_bound(k.milestones.begin(), k.milestones.end(), t) - k.milestones.begin();
      return std::pow(k.gamma, static_cast<double>(passed));
    }
    case ScheduleKind::exponential: return std::pow(k.gamma, tt);
    case ScheduleKind::cosine: {
      double pct = span > 0 ? std::min(tt, static_cast<double>(span)) / static_cast<double>(span) : 1.0;
      return k.min_lr_factor + (1.0 - k.min_lr_factor) * (1.0 + std::cos(std::numbers::pi * pct)) / 2.0;
    }
    case ScheduleKind::linear: {
      double pct = span > 0 ? std::min(tt, static_cast<double>(span)) / static_cast<double>(span) : 1.0;
      return 1.0 + (k.min_lr_factor - 1.0) * pct;
    }
    case ScheduleKind::wsd: {
      auto decay = static_cast<int64_t>(std::llround(k.decay_fraction * static_cast<double>(span)));
      int64_t stable = span - decay;
      if (t < stable || decay == 0) return 1.0;
      double pct = std::min(1.0, static_cast<double>(t - stable) / static_cast<double>(decay));
      return 1.0 + (k.min_lr_factor - 1.0) * pct;
    }
    case ScheduleKind::onecycle: {
      // OneCycleLR (anneal_strategy="cos", three_phase=False) as factors of the peak lr.
      double initial = 1.0 / k.div_factor;
      double final_lr = initial / k.final_div_factor;
      double peak_step = k.pct_start * static_cast<double>(k.total_steps) - 1.0;
      double end_step = static_cast<double>(k.total_steps) - 1.0;
      if (tt <= peak_step) return cosine_between(initial, 1.0, peak_step > 0 ? tt / peak_step : 1.0);
      return cosine_between(1.0, final_lr, std::min(1.0, (tt - peak_step) / (end_step - peak_step)));
    }
  }
  return 1.0;
}

double LrSchedule::lr(double base_lr, int64_t step) const {
  const LrScheduleConfig& k = config_;
  GENESIS_CHECK(step >= 0, ValueError, "LrSchedule::lr: negative step ", step);
  if (k.kind == ScheduleKind::onecycle) return base_lr * after_warmup_factor(step, k.total_steps);
  if (step < k.warmup_steps) {
    double pct = static_cast<double>(step) / static_cast<double>(k.warmup_steps);
    return base_lr * (k.warmup_start_factor + (1.0 - k.warmup_start_factor) * pct);
  }
  int64_t span = std::max<int64_t>(0, k.total_steps - k.warmup_steps);
  return base_lr * after_warmup_factor(step - k.warmup_steps, span);
}

}  // namespace genesis
