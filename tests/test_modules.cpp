// nn modules, initializers, classifier models and training checkpoints.
#include <cmath>
#include <filesystem>

#include "libgenesis/models/classifier.h"
#include "libgenesis/nn/init.h"
#include "libgenesis/nn/layers.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/safetensors.h"
#include "libgenesis/train/checkpoint.h"
#include "tests/testing.h"

using namespace genesis;

namespace {
double stddev(const Tensor& t) { return std::sqrt(var(t.to(DType::f64), {}, false).item()); }
}  // namespace

TEST_CASE("modules name their parameters like PyTorch and report state-dict mismatches", "[cpu][modules]") {
  models::Mlp mlp({.input_shape = {1, 4, 4}, .hidden = {8, 6}, .num_classes = 3});
  std::vector<std::string> names;
  for (const NamedTensor& p : mlp.named_parameters()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"layers.1.weight", "layers.1.bias", "layers.3.weight", "layers.3.bias",
                                          "layers.5.weight", "layers.5.bias"});
  CHECK(mlp.num_parameters() == 16 * 8 + 8 + 8 * 6 + 6 + 6 * 3 + 3);
  CHECK(mlp(randn({5, 1, 4, 4})).shape() == Shape{5, 3});
  CHECK(mlp.summary().find("Linear(16 -> 8)") != std::string::npos);

  models::Mlp other({.input_shape = {1, 4, 4}, .hidden = {8, 6}, .num_classes = 3});
  other.load_state_dict(mlp.state_dict());
  CHECK(other.named_parameters()[0].tensor.to_vector<float>() == mlp.named_parameters()[0].tensor.to_vector<float>());

  models::Mlp wrong({.input_shape = {1, 4, 4}, .hidden = {8, 7}, .num_classes = 3});
  try {
    wrong.load_state_dict(mlp.state_dict());
    FAIL("expected a mismatch");
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    CHECK(msg.find("layers.3.weight (checkpoint [6, 8], model [7, 8])") != std::string::npos);
  }
  std::vector<NamedTensor> partial = mlp.state_dict();
  partial.pop_back();
  partial.push_back({"extra.weight", zeros({1})});
  CHECK_THROWS_WITH(other.load_state_dict(partial),
                    Catch::Contains("missing [layers.5.bias]") && Catch::Contains("unexpected [extra.weight]"));
}

TEST_CASE("train/eval mode reaches every child, dropout only trains", "[cpu][modules]") {
  nn::Sequential seq({std::make_shared<nn::Dropout>(0.5), std::make_shared<nn::Activation>(nn::ActivationKind::relu)});
  Tensor x = ones({1000});
  CHECK(sum(eq(seq(x), 0.0)).item() > 300);
  seq.eval();
  CHECK(!seq[0].is_training());
  CHECK(seq(x).to_vector<float>() == x.to_vector<float>());
  CHECK_THROWS_AS(nn::Dropout(1.0), UsageError);
  CHECK_THROWS_AS(nn::parse_activation("swish"), UsageError);
}

TEST_CASE("initializers have PyTorch's scales", "[cpu][modules]") {
  Tensor w = empty({256, 512});
  nn::init::kaiming_uniform_(w, std::sqrt(5.0));  // bound = 1 / sqrt(fan_in)
  CHECK(max(w).item() <= 1.0 / std::sqrt(512.0));
  CHECK(stddev(w) == Approx(1.0 / std::sqrt(512.0) / std::sqrt(3.0)).epsilon(0.03));
  nn::init::xavier_normal_(w);
  CHECK(stddev(w) == Approx(std::sqrt(2.0 / 768.0)).epsilon(0.03));
  nn::init::kaiming_normal_(w);
  CHECK(stddev(w) == Approx(std::sqrt(2.0 / 512.0)).epsilon(0.03));
  nn::init::trunc_normal_(w, 0.0, 1.0, -2.0, 2.0);
  CHECK(max(abs(w)).item() <= 2.0);
  CHECK(stddev(w) == Approx(0.8796).epsilon(0.03));  // std of N(0,1) truncated to [-2, 2]
  nn::init::zeros_(w);
  CHECK(max(abs(w)).item() == 0.0);
  Tensor conv = empty({8, 4, 3, 3});
  CHECK(nn::init::compute_fans(conv).in == 36);
  CHECK(nn::init::compute_fans(conv).out == 72);
}

TEST_CASE("CNN forward/backward shapes and gradients reach every parameter", "[cpu][modules]") {
  models::Cnn cnn({.input_shape = {1, 28, 28}, .channels = {4, 8}, .fc = 16, .num_classes = 10});
  Tensor x = randn({3, 1, 28, 28});
  Tensor loss = cross_entropy(cnn(x), from_vector(std::vector<int64_t>{1, 5, 9}, {3}));
  loss.backward();
  for (const NamedTensor& p : cnn.named_parameters()) {
    INFO(p.name);
    REQUIRE(p.tensor.grad().defined());
    CHECK(p.tensor.grad().shape() == p.tensor.shape());
  }
  CHECK(cnn.named_parameters()[2].name == "layers.3.weight");
  CHECK(cnn.named_parameters()[2].tensor.shape() == Shape{8, 4, 3, 3});
}

TEST_CASE("optimizer groups exclude no-decay patterns", "[cpu][modules]") {
  RecipeSpec spec = parse_recipe(R"(
[run]
name = "t"
[model]
name = "mlp"
hidden = [4]
[optimizer]
name = "adamw"
lr = 0.01
weight_decay = 0.1
no_decay = ["bias"]
[training]
steps = 1
)",
                                 "inline.toml");
  auto model = recipe::build_model(spec, kCPU);
  auto opt = recipe::build_optimizer(spec, *model);
  REQUIRE(opt->param_groups().size() == 2);
  CHECK(opt->param_groups()[0].weight_decay == 0.1);
  CHECK(opt->param_groups()[0].params[0].name == "layers.1.weight");
  CHECK(opt->param_groups()[1].weight_decay == 0.0);
  CHECK(opt->param_groups()[1].params[0].name == "layers.1.bias");
  CHECK(opt->name() == "adamw");
  CHECK(recipe::total_steps(spec, 100) == 1);
}

TEST_CASE("frozen parameters: no gradient, no optimizer state, kept through to(), their own dtype", "[cpu][modules]") {
  models::Mlp mlp({.input_shape = {1, 4, 4}, .hidden = {8, 6}, .num_classes = 3});
  const std::vector<int64_t> matched = mlp.set_trainable({"layers.1.", "bias", "nothing"}, false);
  CHECK(matched == std::vector<int64_t>{2, 3, 0});  // layers.1.bias counts for both patterns
  auto names = [](const std::vector<NamedTensor>& ps) {
    std::vector<std::string> out;
    for (const NamedTensor& p : ps) out.push_back(p.name);
    return out;
  };
  CHECK(names(mlp.named_parameters(nn::Params::trainable)) == std::vector<std::string>{"layers.3.weight",
                                                                                       "layers.5.weight"});
  CHECK(names(mlp.named_parameters(nn::Params::frozen)) ==
        std::vector<std::string>{"layers.1.weight", "layers.1.bias", "layers.3.bias", "layers.5.bias"});
  CHECK(mlp.num_parameters(nn::Params::trainable) + mlp.num_parameters(nn::Params::frozen) == mlp.num_parameters());
  CHECK(mlp.summary().find("trainable parameters: 66 (") != std::string::npos);

  // Backward reaches the trained weights only; a frozen weight's bytes are what they were.
  const Tensor frozen_before = mlp.named_parameters()[0].tensor.clone();
  mean(mlp(randn({5, 1, 4, 4}))).backward();
  for (const NamedTensor& p : mlp.named_parameters())
    CHECK(p.tensor.grad().defined() == p.tensor.requires_grad());

  // Casting the frozen part leaves the trained part (and trainability) alone.
  mlp.to(DType::bf16, nn::Params::frozen);
  for (const NamedTensor& p : mlp.named_parameters()) {
    CHECK(p.tensor.dtype() == (p.tensor.requires_grad() ? DType::f32 : DType::bf16));
    CHECK(p.tensor.is_leaf());
  }
  mlp.to(DType::f32);
  CHECK(mlp.named_parameters()[0].tensor.to_vector<float>() != frozen_before.to_vector<float>());  // bf16-rounded
  CHECK(names(mlp.named_parameters(nn::Params::trainable)).size() == 2);

  mlp.set_trainable(true);
  CHECK(mlp.num_parameters(nn::Params::frozen) == 0);
}

TEST_CASE("training.freeze: the optimizer and clipping see the trained parameters, bad patterns are recipe errors",
          "[cpu][modules]") {
  const std::string base = R"(
[run]
name = "t"
[model]
name = "mlp"
hidden = [4]
[optimizer]
name = "adamw"
lr = 0.01
[training]
steps = 1
)";
  RecipeSpec spec = parse_recipe(base + "freeze = [\"layers.1.\"]\n", "inline.toml");
  auto model = recipe::build_model(spec, kCPU);
  auto opt = recipe::build_optimizer(spec, *model);
  for (const ParamGroup& g : opt->param_groups())
    for (const NamedTensor& p : g.params) CHECK(p.name.starts_with("layers.3."));
  const Tensor w = model->named_parameters()[0].tensor;
  const std::vector<float> before = w.to_vector<float>();
  mean(mul((*model)(randn({3, 1, 28, 28})), 3.0)).backward();
  opt->step();
  CHECK(w.to_vector<float>() == before);
  CHECK(opt->state().size() == 2 * 3);  // exp_avg, exp_avg_sq, step for layers.3.weight and .bias

  auto error_of = [&](const std::string& freeze) {
    try {
      recipe::build_model(parse_recipe(base + "freeze = " + freeze + "\n", "inline.toml"), kCPU);
    } catch (const RecipeError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string none = error_of(R"(["layers.1.", "embed"])");
  CHECK(none.find("training.freeze: 'embed' matches no parameter") != std::string::npos);
  CHECK(none.find("layers.N.weight, layers.N.bias") != std::string::npos);
  CHECK(error_of(R"(["layers"])").find("freezes every parameter") != std::string::npos);
}

TEST_CASE("training checkpoints round-trip model, optimizer and trainer state", "[cpu][modules]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("genesis_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  models::Mlp a({.input_shape = {4}, .hidden = {3}, .num_classes = 2});
  ParamGroup g;
  for (NamedTensor& p : a.named_parameters()) g.params.push_back(p);
  auto opt = make_adam({g});
  sum(a(randn({2, 4}))).backward();
  opt->step();
  train::TrainerState s;
  s.step = 7;
  s.cursor = {2, 5};
  s.rng = {11, 99};
  s.optimizer_steps = opt->step_count();
  s.optimizer_name = "adamw";
  s.scheduler_name = "cosine";
  s.log_window_steps = 3;
  s.log_window_loss = 0.1 + 0.2 + 1.0 / 3.0;  // kept to the last bit
  fs::path saved = train::save_checkpoint(dir, a, *opt, s, "[run]\nname = \"t\"\n", 2);
  CHECK(saved.filename() == "step_00000007");
  CHECK(fs::exists(dir / "latest"));

  models::Mlp b({.input_shape = {4}, .hidden = {3}, .num_classes = 2});
  ParamGroup gb;
  for (NamedTensor& p : b.named_parameters()) gb.params.push_back(p);
  auto opt_b = make_adam({gb});
  train::TrainerState r = train::load_checkpoint(dir, b, opt_b.get());
  CHECK(r.step == 7);
  CHECK(r.cursor == data::LoaderCursor{2, 5});
  CHECK(r.rng == GeneratorState{11, 99});
  CHECK(r.log_window_steps == 3);
  CHECK(r.log_window_loss == s.log_window_loss);
  CHECK(opt_b->step_count() == 1);
  CHECK(b.named_parameters()[0].tensor.to_vector<float>() == a.named_parameters()[0].tensor.to_vector<float>());
  CHECK(opt_b->state().size() == opt->state().size());
  // A different model is refused with the names listed.
  models::Mlp c({.input_shape = {4}, .hidden = {5}, .num_classes = 2});
  CHECK_THROWS_WITH(train::load_checkpoint(dir, c, nullptr), Catch::Contains("layers.1.weight"));

  // trainer.json is validated field by field (issue 14 item 12): each damaged variant is a
  // FormatError naming the file and the field; nothing is truncated or taken for zero.
  const fs::path json = saved / "trainer.json";
  const std::string good = io::read_file(json);
  const std::vector<std::pair<std::string, std::string>> damage = {
      {"\"step\": 7", "\"step\": null"},          {"\"step\": 7", "\"step\": \"7\""},
      {"\"step\": 7", "\"step\": 7.5"},           {"\"step\": 7", "\"step\": -7"},
      {"\"step\": 7", "\"step\": 18446744073709551615"}, {"\"seed\": 11", "\"seed\": -1"},
      {"\"world_size\": 1", "\"world_size\": 0"}, {"\"optimizer\": \"adamw\"", "\"optimizer\": 3"},
      {"\"format_version\": 1", "\"format_version\": 2"}, {"\"steps\": 3", "\"steps\": -3"},
      {"\"loss_sum\": ", "\"loss_sum\": \"x\", \"y\": "}};
  for (const auto& [from, to] : damage) {
    INFO(to);
    const size_t at = good.find(from);
    REQUIRE(at != std::string::npos);
    std::string bad = good;
    bad.replace(at, from.size(), to);
    io::write_file_atomic(json, bad);
    CHECK_THROWS_AS(train::load_checkpoint(dir, b, opt_b.get()), FormatError);
    CHECK_THROWS_WITH(train::load_checkpoint(dir, b, opt_b.get()), Catch::Contains("trainer.json"));
  }
  io::write_file_atomic(json, good);
  CHECK(train::load_checkpoint(dir, b, opt_b.get()).step == 7);
  fs::remove_all(dir);
}
