// Optimizers: updates against hand-computed PyTorch formulas (scalar recursions in double,
// written out independently here), state export/import, gradient clipping.
#include <cmath>

#include "libgenesis/optim/optimizer.h"
#include "tests/testing.h"

using namespace genesis;

namespace {

// Runs `steps` updates on a 3-element parameter with gradients g_t = c * p_t + t (a
// gradient that depends on the parameter, so every formula term matters).
std::vector<double> run(Optimizer& opt, Tensor& p, int steps, double c) {
  std::vector<double> trace;
  for (int t = 1; t <= steps; ++t) {
    {
      NoGradGuard g;
      Tensor grad = add(mul(p.detach(), c), static_cast<double>(t));
      p.set_grad(grad);
    }
    opt.step();
    trace.push_back(p.to_vector<double>()[1]);
  }
  return trace;
}

Tensor param(double value = 0.5) { return full({3}, value, {.dtype = DType::f64, .requires_grad = true}); }

std::vector<ParamGroup> group(const Tensor& p, double lr, double wd) {
  ParamGroup g;
  g.params = {{"w", p}};
  g.lr = g.base_lr = lr;
  g.weight_decay = wd;
  return {g};
}

}  // namespace

TEST_CASE("sgd with momentum, dampening, nesterov and weight decay matches PyTorch's formula", "[cpu][optim]") {
  for (bool nesterov : {false, true}) {
    double lr = 0.1, mom = 0.9, damp = nesterov ? 0.0 : 0.25, wd = 0.01, c = 0.3;
    Tensor p = param();
    auto opt = make_sgd(group(p, lr, wd), {.momentum = mom, .dampening = damp, .nesterov = nesterov});
    std::vector<double> got = run(*opt, p, 6, c);
    double x = 0.5, buf = 0.0;
    for (int t = 1; t <= 6; ++t) {
      double g = c * x + t + wd * x;
      buf = t == 1 ? g : mom * buf + (1 - damp) * g;
      double d = nesterov ? g + mom * buf : buf;
      x -= lr * d;
      REQUIRE(got[static_cast<size_t>(t - 1)] == Approx(x).epsilon(1e-13));
    }
  }
}

TEST_CASE("adam, adamw and amsgrad match PyTorch's formulas", "[cpu][optim]") {
  struct Case {
    bool decoupled, amsgrad;
  };
  for (Case k : {Case{false, false}, Case{true, false}, Case{true, true}}) {
    double lr = 0.01, b1 = 0.8, b2 = 0.95, eps = 1e-6, wd = 0.1, c = -0.7;
    Tensor p = param();
    auto opt = make_adam(group(p, lr, wd), {.beta1 = b1, .beta2 = b2, .eps = eps, .amsgrad = k.amsgrad,
                                            .decoupled_weight_decay = k.decoupled});
    CHECK(opt->name() == (k.decoupled ? "adamw" : "adam"));
    std::vector<double> got = run(*opt, p, 8, c);
    double x = 0.5, m = 0, v = 0, vmax = 0;
    for (int t = 1; t <= 8; ++t) {
      double g = c * x + t;
      if (k.decoupled) x *= 1 - lr * wd;
      else g += wd * x;
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
      vmax = std::max(vmax, v);
      double second = k.amsgrad ? vmax : v;
      double denom = std::sqrt(second) / std::sqrt(1 - std::pow(b2, t)) + eps;
      x -= lr / (1 - std::pow(b1, t)) * m / denom;
      REQUIRE(got[static_cast<size_t>(t - 1)] == Approx(x).epsilon(1e-12));
    }
  }
}

TEST_CASE("lion matches the paper's update with decoupled weight decay", "[cpu][optim]") {
  double lr = 0.01, b1 = 0.9, b2 = 0.99, wd = 0.1, c = -0.7;
  Tensor p = param();
  auto opt = make_lion(group(p, lr, wd), {.beta1 = b1, .beta2 = b2});
  CHECK(opt->name() == "lion");
  std::vector<double> got = run(*opt, p, 8, c);
  double x = 0.5, m = 0;
  for (int t = 1; t <= 8; ++t) {
    double g = c * x + t;
    double interp = b1 * m + (1 - b1) * g;
    x = x * (1 - lr * wd) - lr * ((interp > 0) - (interp < 0));
    m = b2 * m + (1 - b2) * g;
    REQUIRE(got[static_cast<size_t>(t - 1)] == Approx(x).epsilon(1e-13));
  }
  CHECK_THROWS_AS(make_lion(group(param(), 0.1, 0.0), {.beta1 = 1.0}), UsageError);
}

TEST_CASE("optimizer state round-trips and resumes identically", "[cpu][optim]") {
  Tensor p1 = param(), p2 = param();
  auto a = make_adam(group(p1, 0.01, 0.0));
  auto b = make_adam(group(p2, 0.01, 0.0));
  run(*a, p1, 3, 0.5);
  {
    NoGradGuard g;
    p2.copy_(p1);
  }
  b->load_state(a->state(), a->step_count());
  CHECK(b->step_count() == 3);
  std::vector<double> ra = run(*a, p1, 4, 0.5), rb = run(*b, p2, 4, 0.5);
  CHECK(ra == rb);
  // Mismatches are named.
  auto c = make_adam(group(param(), 0.01, 0.0));
  std::vector<NamedTensor> bad = a->state();
  bad[0].tensor = zeros({4}, {.dtype = DType::f64});
  CHECK_THROWS_AS(c->load_state(bad, 3), ShapeError);
  bad = a->state();
  bad.push_back({"nope.exp_avg", zeros({3})});
  CHECK_THROWS_AS(c->load_state(bad, 3), ValueError);
}

TEST_CASE("parameters without gradients are skipped, zero_grad zeroes gradients or drops them", "[cpu][optim]") {
  Tensor p = param(), q = param();
  ParamGroup g;
  g.params = {{"p", p}, {"q", q}};
  g.lr = g.base_lr = 0.1;
  auto opt = make_sgd({g});
  {
    NoGradGuard ng;
    p.set_grad(ones({3}, {.dtype = DType::f64}));
  }
  opt->step();
  CHECK(p.to_vector<double>()[0] == Approx(0.4));
  CHECK(q.to_vector<double>()[0] == 0.5);
  const void* storage = p.grad().data_ptr();
  opt->zero_grad();
  REQUIRE(p.grad().defined());
  CHECK(p.grad().data_ptr() == storage);
  CHECK(p.grad().to_vector<double>() == std::vector<double>{0, 0, 0});
  CHECK(!q.grad().defined());
  // A zeroed buffer is overwritten by the next backward (same storage), and later ones add.
  opt->zero_grad();
  Tensor w = tensor({1.0, 2.0, 3.0}, {3}, {.dtype = DType::f64});
  sum(mul(p, w)).backward();
  CHECK(p.grad().data_ptr() == storage);
  CHECK(p.grad().to_vector<double>() == std::vector<double>{1, 2, 3});
  sum(mul(p, w)).backward();
  CHECK(p.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  opt->zero_grad();
  sum(mul(p, w)).backward();
  CHECK(p.grad().to_vector<double>() == std::vector<double>{1, 2, 3});
  opt->zero_grad(/*set_to_none=*/true);
  CHECK(!p.grad().defined());
  CHECK_THROWS_AS(make_sgd(group(param(), -1.0, 0.0)), UsageError);
  CHECK_THROWS_AS(make_adam(group(param(), 0.1, 0.0), {.beta1 = 1.0}), UsageError);
}

TEST_CASE("gradient clipping by global norm and by value", "[cpu][optim]") {
  Tensor a = zeros({2}, {.dtype = DType::f64, .requires_grad = true});
  Tensor b = zeros({1}, {.dtype = DType::f64, .requires_grad = true});
  {
    NoGradGuard g;
    a.set_grad(tensor({3.0, 0.0}, {}, {.dtype = DType::f64}));
    b.set_grad(tensor({4.0}, {}, {.dtype = DType::f64}));
  }
  Tensor norm = clip_grad_norm({a, b}, 1.0);
  CHECK(norm.item() == Approx(5.0));
  CHECK(a.grad().to_vector<double>()[0] == Approx(3.0 / (5.0 + 1e-6)));
  CHECK(b.grad().to_vector<double>()[0] == Approx(4.0 / (5.0 + 1e-6)));
  // Below the threshold nothing changes.
  Tensor n2 = clip_grad_norm({a, b}, 10.0);
  CHECK(n2.item() == Approx(1.0).epsilon(1e-5));
  CHECK(b.grad().to_vector<double>()[0] == Approx(4.0 / (5.0 + 1e-6)));
  clip_grad_value({a, b}, 0.5);
  CHECK(a.grad().to_vector<double>() == std::vector<double>{0.5, 0.0});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{0.5});
}
