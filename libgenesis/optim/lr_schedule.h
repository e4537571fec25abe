#pragma once
// Learning-rate schedules as closed forms of the step number: lr(base_lr, step) needs no
// state besides the step, so resuming a run reproduces the schedule exactly. The formulas
// equal PyTorch's schedulers (StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR,
// LinearLR, OneCycleLR) evaluated at the same step; warmup (linear, like LinearLR) can be
// put in front of any of them, and WSD is warmup-stable-decay.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace genesis {

enum class ScheduleKind { constant, step, multistep, exponential, cosine, linear, wsd, onecycle };

// Parses a schedule name ("cosine", ...); throws UsageError listing the valid names.
ScheduleKind parse_schedule_kind(std::string_view name);
std::string_view schedule_kind_name(ScheduleKind kind);
std::vector<std::string_view> schedule_kind_names();

struct LrScheduleConfig {
  ScheduleKind kind = ScheduleKind::constant;
  int64_t total_steps = 0;             // optimizer steps in the run (cosine, linear, wsd, onecycle)
  int64_t warmup_steps = 0;            // linear warmup in front (not used by onecycle, which has its own)
  double warmup_start_factor = 0.0;    // lr factor at step 0 of the warmup
  int64_t step_size = 1;               // step: decay every step_size steps
  double gamma = 0.1;                  // step, multistep, exponential: decay factor
  std::vector<int64_t> milestones;     // multistep: steps (after warmup) at which lr *= gamma
  double min_lr_factor = 0.0;          // cosine/linear/wsd: final lr = base * min_lr_factor
  double decay_fraction = 0.2;         // wsd: the last fraction of steps decays linearly
  double pct_start = 0.3;              // onecycle: fraction of steps rising to the peak
  double div_factor = 25.0;            // onecycle: initial lr = base / div_factor
  double final_div_factor = 1e4;       // onecycle: final lr = initial / final_div_factor
};

class LrSchedule {
 public:
  // Validates the configuration (throws UsageError naming the bad field).
  explicit LrSchedule(LrScheduleConfig config);
  // Learning rate for a parameter group with base learning rate base_lr, at optimizer
  // step `step` (0 for the first step).
  double lr(double base_lr, int64_t step) const;
  const LrScheduleConfig& config() const { return config_; }

 private:
  double after_warmup_factor(int64_t t, int64_t span) const;
  LrScheduleConfig config_;
};

}  // namespace genesis
