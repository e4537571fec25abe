// Learning-rate schedules: closed forms checked against PyTorch's recursive (chainable)
// update rules, written independently here, over whole sequences.
#include <cmath>
#include <numbers>

#include "libgenesis/optim/lr_schedule.h"
#include "tests/testing.h"

using namespace genesis;

namespace {
LrSchedule make(ScheduleKind kind, int64_t total, auto&& tweak) {
  LrScheduleConfig c;
  c.kind = kind;
  c.total_steps = total;
  tweak(c);
  return LrSchedule(c);
}
}  // namespace

TEST_CASE("cosine annealing equals PyTorch's recursive CosineAnnealingLR", "[cpu][schedule]") {
  const double base = 0.1, eta_min = 0.001;
  const int64_t T = 50;
  LrSchedule s = make(ScheduleKind::cosine, T, [&](LrScheduleConfig& c) { c.min_lr_factor = eta_min / base; });
  double lr = base;
  for (int64_t t = 1; t <= T; ++t) {
    // torch.optim.lr_scheduler.CosineAnnealingLR.get_lr, the chainable form.
    lr = eta_min + (lr - eta_min) * (1 + std::cos(std::numbers::pi * t / T)) / (1 + std::cos(std::numbers::pi * (t - 1) / T));
    REQUIRE(s.lr(base, t) == Approx(lr).epsilon(1e-12).margin(1e-15));
  }
  CHECK(s.lr(base, 0) == base);
  CHECK(s.lr(base, 1000) == Approx(eta_min));
}

TEST_CASE("step, multistep and exponential decay", "[cpu][schedule]") {
  LrSchedule step = make(ScheduleKind::step, 0, [](LrScheduleConfig& c) {
    c.step_size = 3;
    c.gamma = 0.5;
  });
  double lr = 1.0;
  for (int64_t t = 0; t < 20; ++t) {
    if (t > 0 && t % 3 == 0) lr *= 0.5;  // StepLR: decays when epoch % step_size == 0
    REQUIRE(step.lr(1.0, t) == Approx(lr));
  }
  LrSchedule multi = make(ScheduleKind::multistep, 0, [](LrScheduleConfig& c) {
    c.milestones = {2, 5, 9};
    c.gamma = 0.1;
  });
  std::vector<double> expected{1, 1, 0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.01, 0.001, 0.001};
  for (size_t t = 0; t < expected.size(); ++t) REQUIRE(multi.lr(1.0, static_cast<int64_t>(t)) == Approx(expected[t]));
  LrSchedule expo = make(ScheduleKind::exponential, 0, [](LrScheduleConfig& c) { c.gamma = 0.9; });
  lr = 2.0;
  for (int64_t t = 0; t < 30; ++t) {
    REQUIRE(expo.lr(2.0, t) == Approx(lr));
    lr *= 0.9;
  }
}

TEST_CASE("linear warmup in front of any schedule", "[cpu][schedule]") {
  LrSchedule s = make(ScheduleKind::cosine, 110, [](LrScheduleConfig& c) {
    c.warmup_steps = 10;
    c.warmup_start_factor = 0.1;
  });
  // LinearLR(start_factor=0.1, end_factor=1, total_iters=10) for the first 10 steps.
  for (int64_t t = 0; t < 10; ++t) REQUIRE(s.lr(1.0, t) == Approx(0.1 + 0.9 * t / 10.0));
  CHECK(s.lr(1.0, 10) == Approx(1.0));
  CHECK(s.lr(1.0, 60) == Approx(0.5));  // half-way through the 100 cosine steps
  CHECK(s.lr(1.0, 110) == Approx(0.0).margin(1e-15));
}

TEST_CASE("linear decay and warmup-stable-decay", "[cpu][schedule]") {
  LrSchedule lin = make(ScheduleKind::linear, 100, [](LrScheduleConfig& c) { c.min_lr_factor = 0.0; });
  CHECK(lin.lr(1.0, 0) == 1.0);
  CHECK(lin.lr(1.0, 25) == Approx(0.75));
  CHECK(lin.lr(1.0, 100) == Approx(0.0));
  LrSchedule wsd = make(ScheduleKind::wsd, 100, [](LrScheduleConfig& c) {
    c.warmup_steps = 10;
    c.decay_fraction = 0.2;  // 18 of the 90 post-warmup steps decay
    c.min_lr_factor = 0.1;
  });
  CHECK(wsd.lr(1.0, 5) == Approx(0.5));
  CHECK(wsd.lr(1.0, 10) == 1.0);
  CHECK(wsd.lr(1.0, 81) == 1.0);
  CHECK(wsd.lr(1.0, 82) == 1.0);  // first decay step: pct 0
  CHECK(wsd.lr(1.0, 91) == Approx(1.0 - 0.9 * 9.0 / 18.0));
  CHECK(wsd.lr(1.0, 100) == Approx(0.1));
}

TEST_CASE("one-cycle equals PyTorch's OneCycleLR (cos, two phases)", "[cpu][schedule]") {
  const int64_t total = 100;
  const double max_lr = 0.01;
  LrSchedule s = make(ScheduleKind::onecycle, total, [](LrScheduleConfig&) {});
  double initial = max_lr / 25.0, min_lr = initial / 1e4;
  double peak = 0.3 * total - 1, end = total - 1;
  auto anneal = [](double start, double stop, double pct) { return stop + (start - stop) / 2 * (1 + std::cos(M_PI * pct)); };
  for (int64_t t = 0; t < total; ++t) {
    double expected = t <= peak ? anneal(initial, max_lr, t / peak) : anneal(max_lr, min_lr, (t - peak) / (end - peak));
    REQUIRE(s.lr(max_lr, t) == Approx(expected).epsilon(1e-12));
  }
  CHECK(s.lr(max_lr, 0) == Approx(initial));
  CHECK(s.lr(max_lr, 29) == Approx(max_lr));
  CHECK(s.lr(max_lr, 99) == Approx(min_lr));
}

TEST_CASE("schedule configuration errors", "[cpu][schedule]") {
  CHECK_THROWS_AS(parse_schedule_kind("cosin"), UsageError);
  try {
    parse_schedule_kind("cosin");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()).find("valid: constant, step") != std::string::npos);
  }
  CHECK_THROWS_AS(make(ScheduleKind::cosine, 0, [](LrScheduleConfig&) {}), UsageError);
  CHECK_THROWS_AS(make(ScheduleKind::step, 0, [](LrScheduleConfig& c) { c.step_size = 0; }), UsageError);
  CHECK_THROWS_AS(make(ScheduleKind::multistep, 0, [](LrScheduleConfig& c) { c.milestones = {5, 2}; }), UsageError);
  CHECK(parse_schedule_kind("wsd") == ScheduleKind::wsd);
}
