// Mixed precision outside the op table: the fp16 loss scaler (unscaling, skipped steps, growth
// and backoff, state and a resume across a skipped step), the optimizers' device-side skip, the
// modules kept out of autocast, and the [amp] builders; CUDA against the CPU.
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libgenesis/amp/grad_scaler.h"
#include "libgenesis/autograd/autocast.h"
#include "libgenesis/models/classifier.h"
#include "libgenesis/nn/module.h"
#include "libgenesis/optim/optimizer.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/checkpoint.h"
#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;

// Parameters of a few shapes, their optimizer and (for the loss-scaled runs) a scaler.
struct Run {
  std::vector<Tensor> params;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<amp::GradScaler> scaler;
};

Run make_run(const std::vector<Tensor>& init, Device device, const MakeOptimizer& make,
             std::optional<amp::GradScalerOptions> scaling) {
  Run run;
  ParamGroup group{.params = {}, .lr = 1e-2, .base_lr = 1e-2, .weight_decay = 0.01};
  for (size_t i = 0; i < init.size(); ++i) {
    run.params.push_back(init[i].to(device).clone().requires_grad_(true));
    std::string name = "p";  // not "p" + to_string(i): GCC 12's -Wrestrict misfires on it
    name += std::to_string(i);
    group.params.push_back({name, run.params.back()});
  }
  run.optimizer = make({group});
  if (scaling) run.scaler = std::make_unique<amp::GradScaler>(device, *scaling);
  return run;
}

// One loss-scaled step of loss = sum_i sum(p_i * w_i): each gradient is w_i times the scale
// before unscale_ (exact: the scales here are powers of two).
void scaled_step(Run& run, const std::vector<Tensor>& w) {
  Tensor loss;
  for (size_t i = 0; i < w.size(); ++i) {
    Tensor term = sum(mul(run.params[i], w[i].to(run.params[i].device())));
    loss = loss.defined() ? add(loss, term) : term;
  }
  run.scaler->scale_loss(loss).backward();
  run.scaler->unscale_(run.params);
  run.optimizer->step(run.scaler->found_inf());
  run.scaler->update();
  run.optimizer->zero_grad();
}

// The same step without scaling: the gradients are w_i.
void plain_step(Run& run, const std::vector<Tensor>& w) {
  for (size_t i = 0; i < w.size(); ++i) run.params[i].set_grad(w[i].to(run.params[i].device()));
  run.optimizer->step();
  run.optimizer->zero_grad();
}

std::vector<Tensor> initial_params() {
  return {rand_values({5}), rand_values({3, 4}), rand_values({1})};
}

// Gradients for `steps` steps; step `inf_step` (1-based, 0 = none) has an inf in its second one.
std::vector<std::vector<Tensor>> gradients(int steps, int inf_step) {
  std::vector<std::vector<Tensor>> out;
  for (int t = 1; t <= steps; ++t) {
    std::vector<Tensor> w;
    for (const Tensor& p : initial_params()) w.push_back(rand_values(p.shape()));
    if (t == inf_step) {
      NoGradGuard no_grad;
      w[1].select(0, 1).select(0, 2).fill_(kInf);
    }
    out.push_back(std::move(w));
  }
  return out;
}

// Values of every parameter and optimizer state entry, in order, on the CPU.
std::vector<std::vector<double>> snapshot(const Run& run) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : run.params) out.push_back(p.to_vector<double>());
  for (const NamedTensor& s : run.optimizer->state()) out.push_back(s.tensor.to_vector<double>());
  return out;
}

const std::vector<std::pair<std::string, MakeOptimizer>>& optimizers() {
  static const std::vector<std::pair<std::string, MakeOptimizer>> all = {
      {"adamw", [](std::vector<ParamGroup> g) { return make_adam(std::move(g)); }},
      {"amsgrad adam",
       [](std::vector<ParamGroup> g) {
         return make_adam(std::move(g), {.amsgrad = true, .decoupled_weight_decay = false});
       }},
      {"sgd with momentum", [](std::vector<ParamGroup> g) { return make_sgd(std::move(g), {.momentum = 0.9}); }},
      {"lion", [](std::vector<ParamGroup> g) { return make_lion(std::move(g)); }},
  };
  return all;
}

}  // namespace

TEST_CASE("grad scaler: an inf gradient skips exactly that step and halves the scale, later steps continue",
          "[cpu][amp]") {
  for (const auto& [name, make] : optimizers()) {
    for (int inf_step : {1, 2}) {  // a skipped first step: adam's t and sgd's first step wait for the next
      INFO(name << ", inf at step " << inf_step);
      const std::vector<Tensor> init = initial_params();
      const auto w = gradients(4, inf_step);
      Run scaled = make_run(init, kCPU, make, amp::GradScalerOptions{});
      Run reference = make_run(init, kCPU, make, std::nullopt);
      for (int t = 1; t <= 4; ++t) {
        const auto before = snapshot(scaled);
        scaled_step(scaled, w[t - 1]);
        if (t == inf_step) {
          CHECK(snapshot(scaled) == before);  // parameters, slots and step counts untouched
          CHECK(scaled.scaler->scale().item() == 32768.0);
          CHECK(scaled.scaler->found_inf().item() == 1.0);
          continue;
        }
        plain_step(reference, w[t - 1]);
        CHECK(snapshot(scaled) == snapshot(reference));  // bit for bit
      }
      const amp::GradScalerState state = scaled.scaler->state_dict();
      CHECK(state == amp::GradScalerState{.scale = 32768.0, .growth_tracker = 4 - inf_step, .skipped_steps = 1});
      for (const NamedTensor& s : scaled.optimizer->state())
        if (s.name.ends_with(".step")) CHECK(s.tensor.item() == 3.0);
    }
  }
}

TEST_CASE("grad scaler: growth after growth_interval clean steps, backoff on inf/nan, the step history", "[cpu][amp]") {
  amp::GradScaler scaler(kCPU, {.init_scale = 4.0, .growth_factor = 3.0, .backoff_factor = 0.25, .growth_interval = 3});
  Tensor p = zeros({4}, {.requires_grad = true});
  auto step = [&](double g) {
    p.set_grad(full({4}, g));
    scaler.unscale_({p});
    scaler.update();
  };
  step(1.0);
  step(1.0);
  CHECK(scaler.scale().item() == 4.0);
  step(1.0);  // the third clean step in a row
  CHECK(scaler.state_dict() == amp::GradScalerState{.scale = 12.0, .growth_tracker = 0, .skipped_steps = 0});
  step(1.0);
  step(std::nan(""));
  CHECK(scaler.state_dict() == amp::GradScalerState{.scale = 3.0, .growth_tracker = 0, .skipped_steps = 1});
  step(-kInf);
  step(1.0);
  CHECK(scaler.state_dict() == amp::GradScalerState{.scale = 0.75, .growth_tracker = 1, .skipped_steps = 2});
  const std::vector<amp::ScaleStep> history = scaler.read_history();
  REQUIRE(history.size() == 7);
  const bool skipped[] = {false, false, false, false, true, true, false};
  const double used[] = {4, 4, 4, 12, 12, 3, 0.75};
  for (size_t i = 0; i < 7; ++i) {
    INFO("step " << i + 1);
    CHECK(history[i].skipped == skipped[i]);
    CHECK(history[i].scale == used[i]);
  }
  CHECK(history[4].next_scale == 3.0);
  CHECK(scaler.read_history().empty());
  // The history outgrows its first buffer without losing a step.
  for (int i = 0; i < 150; ++i) step(i == 100 ? kInf : 1.0);
  const std::vector<amp::ScaleStep> long_history = scaler.read_history();
  REQUIRE(long_history.size() == 150);
  for (int i = 0; i < 150; ++i) CHECK(long_history[static_cast<size_t>(i)].skipped == (i == 100));
}

TEST_CASE("grad scaler: a fixed loss scale never changes, and steps with inf/nan are still skipped", "[cpu][amp]") {
  const std::vector<Tensor> init = initial_params();
  Run run =
      make_run(init, kCPU, optimizers().front().second, amp::GradScalerOptions{.init_scale = 128.0, .dynamic = false});
  const auto w = gradients(3, 2);
  scaled_step(run, w[0]);
  const auto before = snapshot(run);
  scaled_step(run, w[1]);
  CHECK(snapshot(run) == before);
  scaled_step(run, w[2]);
  CHECK(run.scaler->state_dict() == amp::GradScalerState{.scale = 128.0, .growth_tracker = 1, .skipped_steps = 1});
}

TEST_CASE("grad scaler: unscale_ takes f32, f64, bf16 and f16 gradients, and strided ones", "[cpu][amp]") {
  amp::GradScaler scaler(kCPU, {.init_scale = 1024.0});
  std::vector<Tensor> params, expected;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Tensor p = zeros({3, 2}, {.dtype = dtype, .requires_grad = true});
    Tensor g = tensor({0.5, -1.5, 2.0, 0.0, 0.25, -3.0}, {2, 3}, {.dtype = dtype});
    p.set_grad(mul(g, 1024.0).t());  // non-contiguous: unscale_ replaces it with a dense copy
    params.push_back(p);
    expected.push_back(g.t());
  }
  scaler.unscale_(params);
  CHECK(scaler.found_inf().item() == 0.0);
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(dtype_name(params[i].dtype()));
    CHECK(params[i].grad().is_contiguous());
    CHECK(params[i].grad().to_vector<double>() == expected[i].to_vector<double>());
  }
  scaler.update();
  {
    NoGradGuard no_grad;
    params[3].grad().select(0, 1).select(0, 0).fill_(std::nan(""));  // an f16 NaN
  }
  scaler.unscale_(params);
  CHECK(scaler.found_inf().item() == 1.0);
}

TEST_CASE("grad scaler: misuse is refused with a clear error", "[cpu][amp]") {
  CHECK_THROWS_AS(amp::GradScaler(kCPU, {.init_scale = -1.0}), ValueError);
  CHECK_THROWS_AS(amp::GradScaler(kCPU, {.growth_factor = 1.0}), ValueError);
  CHECK_THROWS_AS(amp::GradScaler(kCPU, {.backoff_factor = 1.0}), ValueError);
  CHECK_THROWS_AS(amp::GradScaler(kCPU, {.growth_interval = 0}), ValueError);
  amp::GradScaler scaler(kCPU);
  CHECK_THROWS_WITH(scaler.update(), Catch::Contains("call unscale_ first"));
  Tensor p = zeros({2}, {.requires_grad = true});
  p.set_grad(ones({2}));
  scaler.unscale_({p});
  CHECK_THROWS_WITH(scaler.unscale_({p}), Catch::Contains("already called"));
  auto opt = make_sgd({ParamGroup{.params = {{"p", p}}}});
  CHECK_THROWS_WITH(opt->step(zeros({2})), Catch::Contains("skip_if must be one f32 element"));
  CHECK_THROWS_AS(scaler.load_state_dict({.scale = 0.0}), ValueError);
}

TEST_CASE("grad scaler: resuming from a checkpoint written right after a skipped step is bit-exact", "[cpu][amp]") {
  const models::MlpConfig config{.input_shape = {4}, .hidden = {5}, .num_classes = 3};
  manual_seed(3);
  models::Mlp uninterrupted(config), first_half(config), resumed(config);
  first_half.load_state_dict(uninterrupted.state_dict());
  std::vector<Tensor> inputs;
  for (int t = 0; t < 6; ++t) inputs.push_back(rand_values({2, 4}));
  auto adamw = [](const nn::Module& m) {
    ParamGroup g{.params = m.named_parameters(), .lr = 1e-2, .base_lr = 1e-2, .weight_decay = 0.1};
    return make_adam({g});
  };
  // Steps `from`..`to` (1-based); step 3's gradients get an inf after backward.
  auto train = [&](nn::Module& model, Optimizer& opt, amp::GradScaler& scaler, int from, int to) {
    for (int t = from; t <= to; ++t) {
      scaler.scale_loss(sum(model(inputs[static_cast<size_t>(t - 1)]))).backward();
      if (t == 3) {
        NoGradGuard no_grad;
        model.parameters()[2].grad().select(0, 1).fill_(kInf);
      }
      scaler.unscale_(model.parameters());
      opt.step(scaler.found_inf());
      scaler.update();
      opt.zero_grad();
    }
  };
  auto opt_a = adamw(uninterrupted);
  amp::GradScaler scaler_a(kCPU, {.growth_interval = 2});
  train(uninterrupted, *opt_a, scaler_a, 1, 6);

  auto opt_b = adamw(first_half);
  amp::GradScaler scaler_b(kCPU, {.growth_interval = 2});
  train(first_half, *opt_b, scaler_b, 1, 3);
  TempDir dir("genesis_amp_resume");
  train::TrainerState saved;
  saved.step = 3;
  saved.optimizer_steps = opt_b->step_count();
  saved.optimizer_name = "adamw";
  saved.scheduler_name = "constant";
  saved.grad_scaler = scaler_b.state_dict();
  train::save_checkpoint(dir.path(), first_half, *opt_b, saved, "", 2);

  auto opt_c = adamw(resumed);
  amp::GradScaler scaler_c(kCPU, {.growth_interval = 2});
  train::TrainerState loaded = train::load_checkpoint(dir.path(), resumed, opt_c.get());
  REQUIRE(loaded.grad_scaler == saved.grad_scaler);
  CHECK(loaded.grad_scaler->skipped_steps == 1);
  scaler_c.load_state_dict(*loaded.grad_scaler);
  train(resumed, *opt_c, scaler_c, 4, 6);

  const auto a = uninterrupted.state_dict(), c = resumed.state_dict();
  for (size_t i = 0; i < a.size(); ++i) CHECK(c[i].tensor.to_vector<float>() == a[i].tensor.to_vector<float>());
  const auto sa = opt_a->state(), sc = opt_c->state();
  REQUIRE(sa.size() == sc.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    INFO(sa[i].name);
    CHECK(sc[i].tensor.to_vector<double>() == sa[i].tensor.to_vector<double>());
  }
  CHECK(scaler_c.state_dict() == scaler_a.state_dict());
}

namespace {

// Records the autocast state and input dtype its forward sees.
class AutocastProbe : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override {
    seen_autocast = autocast_dtype();
    seen_input = x.dtype();
    return x;
  }
  std::string describe() const override { return "AutocastProbe"; }
  std::optional<DType> seen_autocast;
  DType seen_input = DType::f32;
};

}  // namespace

TEST_CASE("modules: a module with autocast disabled runs its forward in f32", "[cpu][amp]") {
  AutocastProbe probe;
  Tensor x = rand_values({2, 3}, DType::bf16);
  AutocastGuard autocast(DType::bf16);
  probe(x);
  CHECK(probe.seen_autocast == DType::bf16);
  CHECK(probe.seen_input == DType::bf16);
  probe.set_autocast_enabled(false);
  probe(x);
  CHECK_FALSE(probe.seen_autocast.has_value());
  CHECK(probe.seen_input == DType::f32);
  CHECK(autocast_dtype() == DType::bf16);  // restored after the forward
  AutocastGuard off(std::nullopt);
  probe(x);  // without autocast the flag changes nothing
  CHECK(probe.seen_input == DType::bf16);
}

TEST_CASE("recipe builders: amp dtype, fp16 refused on the CPU, the loss scaler, keep_f32", "[cpu][amp]") {
  const std::string mlp = R"([run]
name = "t"
[model]
name = "mlp"
input_shape = [4]
hidden = [3]
num_classes = 2
[optimizer]
name = "sgd"
lr = 0.1
[training]
steps = 1
)";
  auto spec = [&](const std::vector<std::string>& overrides) { return parse_recipe(mlp, "inline.toml", overrides); };
  CHECK(recipe::amp_dtype(spec({})) == std::nullopt);
  CHECK(recipe::amp_dtype(spec({"amp.dtype=bf16"})) == DType::bf16);
  CHECK(recipe::amp_dtype(spec({"amp.dtype=fp16"})) == DType::f16);

  CHECK_NOTHROW(recipe::check_amp_device(spec({"amp.dtype=bf16"}), kCPU));
  CHECK_NOTHROW(recipe::check_amp_device(spec({"amp.dtype=fp16"}), kCuda0));
  CHECK_THROWS_AS(recipe::check_amp_device(spec({"amp.dtype=fp16"}), kCPU), RecipeError);
  CHECK_THROWS_WITH(
      recipe::check_amp_device(spec({"amp.dtype=fp16"}), kCPU),
      Catch::Contains("amp.dtype = \"fp16\" needs a CUDA device") && Catch::Contains("use amp.dtype = \"bf16\""));

  CHECK(recipe::build_grad_scaler(spec({"amp.dtype=bf16"}), kCPU) == nullptr);
  auto dynamic = recipe::build_grad_scaler(spec({"amp.dtype=fp16", "amp.growth_interval=7"}), kCPU);
  REQUIRE(dynamic);
  CHECK(dynamic->options().dynamic);
  CHECK(dynamic->options().init_scale == 65536.0);
  CHECK(dynamic->options().growth_interval == 7);
  auto fixed = recipe::build_grad_scaler(spec({"amp.dtype=fp16", "amp.loss_scale=1024"}), kCPU);
  REQUIRE(fixed);
  CHECK_FALSE(fixed->options().dynamic);
  CHECK(fixed->scale().item() == 1024.0);

  auto model = recipe::build_model(spec({"amp.keep_f32=[layers.3]"}), kCPU);
  for (const auto& [name, module] : model->named_modules()) {
    INFO(name);
    CHECK(module->autocast_enabled() == (name != "layers.3"));
  }
  CHECK_THROWS_AS(recipe::build_model(spec({"amp.keep_f32=[lm_head]"}), kCPU), RecipeError);
  CHECK_THROWS_WITH(recipe::build_model(spec({"amp.keep_f32=[layers.3, lm_head]"}), kCPU),
                    Catch::Contains("amp.keep_f32: 'lm_head' matches no module of model mlp (its modules: layers, "
                                    "layers.0, layers.1"));
}

TEST_CASE("cuda grad scaler: unscale_, update and the skipped optimizer step equal the CPU's", "[cuda][amp]") {
  if (!cuda_ready()) return;
  // 40 gradients (two launches) of every floating dtype, sizes across 4096-element chunks.
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64};
  const int64_t sizes[] = {1, 37, 4097, 9001, 3};
  std::vector<Tensor> cpu_params, gpu_params;
  for (int i = 0; i < 40; ++i) {
    const DType dtype = dtypes[i % 4];
    cpu_params.push_back(zeros({sizes[i % 5]}, {.dtype = dtype, .requires_grad = true}));
    gpu_params.push_back(zeros({sizes[i % 5]}, {.dtype = dtype, .device = kCuda0, .requires_grad = true}));
  }
  const amp::GradScalerOptions options{.init_scale = 3.0, .growth_interval = 2};
  amp::GradScaler cpu(kCPU, options), gpu(kCuda0, options);
  for (int step = 0; step < 5; ++step) {
    INFO("step " << step);
    for (size_t i = 0; i < cpu_params.size(); ++i) {
      Tensor g = random_input(cpu_params[i].shape(), cpu_params[i].dtype(), -1e4, 1e4);
      if (step == 2 && i == 38) {
        NoGradGuard no_grad;
        g.select(0, 1).fill_(std::nan(""));  // in the second launch
      }
      cpu_params[i].set_grad(g);
      gpu_params[i].set_grad(g.to(kCuda0));
    }
    cpu.unscale_(cpu_params);
    gpu.unscale_(gpu_params);
    CHECK(gpu.found_inf().item() == cpu.found_inf().item());
    for (size_t i = 0; i < cpu_params.size(); ++i) {
      INFO("gradient " << i << " " << dtype_name(cpu_params[i].dtype()));
      require_close(gpu_params[i].grad(), cpu_params[i].grad(), 0.0, 0.0);
    }
    cpu.update();
    gpu.update();
    CHECK(gpu.state_dict() == cpu.state_dict());
  }
  const auto cpu_history = cpu.read_history(), gpu_history = gpu.read_history();
  REQUIRE(gpu_history.size() == cpu_history.size());
  for (size_t i = 0; i < cpu_history.size(); ++i) {
    CHECK(gpu_history[i].skipped == cpu_history[i].skipped);
    CHECK(gpu_history[i].scale == cpu_history[i].scale);
    CHECK(gpu_history[i].next_scale == cpu_history[i].next_scale);
  }
  CHECK(gpu.state_dict().skipped_steps == 1);

  // Loss-scaled optimizer steps with a skipped one, on both devices.
  for (const auto& [name, make] : optimizers()) {
    INFO(name);
    const std::vector<Tensor> init = initial_params();
    const auto w = gradients(4, 2);
    Run on_cpu = make_run(init, kCPU, make, amp::GradScalerOptions{});
    Run on_gpu = make_run(init, kCuda0, make, amp::GradScalerOptions{});
    for (int t = 1; t <= 4; ++t) {
      const auto before = snapshot(on_gpu);
      scaled_step(on_cpu, w[t - 1]);
      scaled_step(on_gpu, w[t - 1]);
      if (t == 2) CHECK(snapshot(on_gpu) == before);
      for (size_t i = 0; i < init.size(); ++i) require_close(on_gpu.params[i], on_cpu.params[i], 1e-6, 1e-6);
      const auto cpu_state = on_cpu.optimizer->state(), gpu_state = on_gpu.optimizer->state();
      REQUIRE(gpu_state.size() == cpu_state.size());
      for (size_t i = 0; i < cpu_state.size(); ++i) require_close(gpu_state[i].tensor, cpu_state[i].tensor, 1e-6, 1e-6);
    }
  }
}

TEST_CASE("cuda grad scaler: a loss-scaled step never reads from the device", "[cuda][amp]") {
  if (!cuda_ready()) return;
  Run run = make_run(initial_params(), kCuda0, optimizers().front().second, amp::GradScalerOptions{});
  const auto w = gradients(1, 1);
  check_no_host_read([&] {
    scaled_step(run, w[0]);
    return run.params[0];
  });
}
