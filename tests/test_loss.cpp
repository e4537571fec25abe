// Losses: forward values against float64 references computed here (including PyTorch's
// label-smoothing and ignore_index rules), f32/bf16 tolerances, error types, and
// finite-difference gradient checks over every reduction.
#include <cmath>

#include "tests/testing.h"

using namespace genesis;
using testing::gradcheck;
using testing::rand_leaf;
using testing::require_close;

namespace {

constexpr Reduction kReductions[] = {Reduction::none, Reduction::sum, Reduction::mean};

const char* reduction_name(Reduction r) {
  return r == Reduction::none ? "none" : r == Reduction::sum ? "sum" : "mean";
}

Tensor targets(std::vector<int64_t> v, const Shape& shape) {
  return from_vector(v, shape);
}

// Applies `reduction` to per-element losses; mean divides by `count` (NaN when 0).
Tensor reduce_ref(const std::vector<double>& per, const Shape& shape, Reduction reduction, int64_t count) {
  double total = 0;
  for (double v : per) total += v;
  if (reduction == Reduction::none) return from_vector(per, shape);
  if (reduction == Reduction::sum) return scalar_tensor(total, {.dtype = DType::f64});
  return scalar_tensor(count == 0 ? NAN : total / static_cast<double>(count), {.dtype = DType::f64});
}

// PyTorch's definition: (1 - s) * nll + s * mean_c(-log p_c), ignored targets excluded
// from the sum and from the mean's count. `log_probs_given` skips the log-softmax (nll_loss).
Tensor class_loss_ref(const Tensor& input, const Tensor& target, Reduction reduction, int64_t ignore, double s,
                      bool log_probs_given = false) {
  auto x = input.to_vector<double>();
  auto t = target.to_vector<int64_t>();
  const int64_t n = input.size(0), c = input.size(1), inner = input.numel() / std::max<int64_t>(n * c, 1);
  std::vector<double> per(static_cast<size_t>(n * inner), 0.0);
  int64_t count = 0;
  for (int64_t o = 0; o < n; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const auto r = static_cast<size_t>(o * inner + i);
      if (t[r] == ignore) continue;
      auto at = [&](int64_t k) { return x[static_cast<size_t>((o * c + k) * inner + i)]; };
      double lse = 0;
      if (!log_probs_given) {
        double m = -INFINITY, total = 0;
        for (int64_t k = 0; k < c; ++k) m = std::max(m, at(k));
        for (int64_t k = 0; k < c; ++k) total += std::exp(at(k) - m);
        lse = m + std::log(total);
      }
      double mean_neg_logp = 0;
      for (int64_t k = 0; k < c; ++k) mean_neg_logp += (lse - at(k)) / static_cast<double>(c);
      per[r] = (1 - s) * (lse - at(t[r])) + s * mean_neg_logp;
      ++count;
    }
  }
  return reduce_ref(per, target.shape(), reduction, count);
}

}  // namespace

TEST_CASE("cross_entropy matches the float64 definition", "[cpu][loss]") {
  struct Case {
    Shape logits;
    std::vector<int64_t> target;
    Shape target_shape;
    int64_t ignore;
    double smoothing;
  };
  const std::vector<Case> cases = {
      {{5, 7}, {3, 0, 6, 2, 5}, {5}, -100, 0.0},
      {{5, 7}, {3, -100, 6, 2, -100}, {5}, -100, 0.0},
      {{5, 7}, {3, -100, 6, 2, 2}, {5}, -100, 0.1},
      {{5, 7}, {3, 2, 6, 2, 1}, {5}, 2, 0.25},  // ignore_index that is also a valid class
      {{2, 4, 3, 2}, {0, 1, 2, 3, 3, 2, 1, 0, -100, 0, 1, 2}, {2, 3, 2}, -100, 0.2},
      {{1, 3}, {2}, {1}, -100, 0.0},
  };
  for (const Case& c : cases) {
    Tensor x = testing::rand_values(c.logits, DType::f64, -3, 3);
    Tensor t = targets(c.target, c.target_shape);
    for (Reduction red : kReductions) {
      INFO("logits " << shape_str(c.logits) << ", ignore " << c.ignore << ", smoothing " << c.smoothing
                     << ", reduction " << reduction_name(red));
      CrossEntropyOptions opt{.reduction = red, .ignore_index = c.ignore, .label_smoothing = c.smoothing};
      Tensor want = class_loss_ref(x, t, red, c.ignore, c.smoothing);
      require_close(cross_entropy(x, t, opt), want, 1e-12, 1e-12);
      require_close(cross_entropy(x, t.to(DType::i32), opt), want, 1e-12, 1e-12);
      Tensor y32 = cross_entropy(x.to(DType::f32), t, opt);
      CHECK(y32.dtype() == DType::f32);
      require_close(y32, want, 1e-5, 1e-5);
      Tensor xb = x.to(DType::bf16);
      Tensor yb = cross_entropy(xb, t, opt);
      CHECK(yb.dtype() == DType::bf16);
      require_close(yb.to(DType::f64), class_loss_ref(xb.to(DType::f64), t, red, c.ignore, c.smoothing), 1e-2, 1e-2);
    }
  }
  // Non-contiguous logits and the single-sample [C] form.
  Tensor xt = testing::rand_values({6, 4}, DType::f64);
  Tensor t4 = targets({5, 0, 2, 1}, {4});
  require_close(cross_entropy(xt.t(), t4), class_loss_ref(xt.t().contiguous(), t4, Reduction::mean, -100, 0), 1e-12,
                1e-12);
  Tensor one = testing::rand_values({4}, DType::f64);
  Tensor t0 = targets({3}, {});
  Tensor single = cross_entropy(one, t0, {.reduction = Reduction::none});
  CHECK(single.shape() == Shape{});
  require_close(single, class_loss_ref(one.view({1, 4}), t0.view({1}), Reduction::sum, -100, 0), 1e-12, 1e-12);
}

TEST_CASE("cross_entropy edge cases: all ignored, large logits, empty batch", "[cpu][loss]") {
  Tensor x = testing::rand_values({3, 4});
  Tensor ignored = targets({-100, -100, -100}, {3});
  CHECK(std::isnan(cross_entropy(x, ignored).item()));
  CHECK(cross_entropy(x, ignored, {.reduction = Reduction::sum}).item() == 0.0);
  CHECK(cross_entropy(x, ignored, {.reduction = Reduction::none}).to_vector<double>() == std::vector<double>(3, 0.0));
  CHECK(std::isnan(cross_entropy(x, ignored, {.label_smoothing = 0.3}).item()));
  Tensor big = tensor({1000, 0, -1000, -1000, 0, 1000}, {2, 3});
  Tensor loss = cross_entropy(big, targets({0, 0}, {2}), {.reduction = Reduction::none});
  require_close(loss, tensor({0, 2000}, {2}), 1e-6, 1e-6);
  require_close(cross_entropy(big.to(DType::bf16), targets({0, 0}, {2}), {.reduction = Reduction::none}).to(DType::f32),
                tensor({0, 2000}, {2}), 1e-2, 1e-2);
  CHECK(std::isnan(cross_entropy(empty({0, 3}), empty({0}, {.dtype = DType::i64})).item()));
}

TEST_CASE("cross_entropy and nll_loss reject bad arguments", "[cpu][loss]") {
  Tensor x = testing::rand_values({3, 4});
  Tensor t = targets({0, 1, 2}, {3});
  CHECK_THROWS_AS(cross_entropy(x, targets({0, 4, 1}, {3})), IndexError);
  CHECK_THROWS_WITH(cross_entropy(x, targets({0, 4, 1}, {3})),
                    Catch::Contains("cross_entropy") && Catch::Contains("4") && Catch::Contains("4 classes"));
  CHECK_THROWS_WITH(cross_entropy(x, targets({0, -3, 1}, {3})), Catch::Contains("-3"));
  CHECK_THROWS_AS(cross_entropy(x, targets({0, -3, 1}, {3}), {.ignore_index = -1}), IndexError);
  CHECK_THROWS_AS(cross_entropy(x, tensor({0, 1, 2})), DTypeError);
  CHECK_THROWS_AS(cross_entropy(from_vector(std::vector<int64_t>(12, 0), {3, 4}), t), DTypeError);
  CHECK_THROWS_AS(cross_entropy(x, targets({0, 1}, {2})), ShapeError);
  CHECK_THROWS_AS(cross_entropy(x, targets({0, 1, 2, 0, 1, 2}, {3, 2})), ShapeError);
  CHECK_THROWS_AS(cross_entropy(testing::rand_values({4}), t), ShapeError);
  CHECK_THROWS_AS(cross_entropy(x, t, {.label_smoothing = 1.0}), ValueError);
  CHECK_THROWS_AS(cross_entropy(x, t, {.label_smoothing = -0.1}), ValueError);
  CHECK_THROWS_AS(nll_loss(x, targets({0, 1, 9}, {3})), IndexError);
  CHECK_THROWS_WITH(nll_loss(x, targets({0, 1, 9}, {3})), Catch::Contains("nll_loss") && Catch::Contains("9"));
  CHECK_THROWS_AS(nll_loss(x, tensor({0, 1, 2})), DTypeError);
  CHECK_THROWS_AS(nll_loss(x, targets({0, 1, 2, 3}, {4})), ShapeError);
}

TEST_CASE("nll_loss picks the negative log-probability of the target", "[cpu][loss]") {
  Tensor lp = tensor({-0.5, -1.0, -2.0, -3.0, -0.25, -4.0}, {2, 3}, {.dtype = DType::f64});
  require_close(nll_loss(lp, targets({2, 1}, {2}), Reduction::none), tensor({2.0, 0.25}, {2}, {.dtype = DType::f64}), 0,
                0);
  CHECK(nll_loss(lp, targets({2, 1}, {2}), Reduction::sum).item() == 2.25);
  CHECK(nll_loss(lp, targets({2, 1}, {2}), Reduction::mean, 1).item() == 2.0);
  CHECK(std::isnan(nll_loss(lp, targets({1, 1}, {2}), Reduction::mean, 1).item()));
  // nll_loss(log_softmax(x)) == cross_entropy(x) over every reduction and the [N, C, d] form.
  Tensor x = testing::rand_values({3, 5, 4}, DType::f64, -2, 2);
  Tensor t = targets({0, 4, -100, 2, 1, 1, 3, 0, 4, 4, -100, 2}, {3, 4});
  for (Reduction red : kReductions) {
    require_close(nll_loss(log_softmax(x, 1), t, red), cross_entropy(x, t, {.reduction = red}), 1e-12, 1e-12);
    require_close(nll_loss(x, t, red), class_loss_ref(x, t, red, -100, 0, true), 1e-12, 1e-12);
    require_close(nll_loss(x.to(DType::f32), t.to(DType::i32), red), class_loss_ref(x, t, red, -100, 0, true), 1e-5,
                  1e-5);
    Tensor xb = x.to(DType::bf16);
    require_close(nll_loss(xb, t, red).to(DType::f64), class_loss_ref(xb.to(DType::f64), t, red, -100, 0, true), 1e-2,
                  1e-2);
  }
  CHECK(nll_loss(tensor({-1, -2}), targets({1}, {}), Reduction::none).item() == 2.0);
}

GENESIS_GRADCHECK("cross_entropy") {
  Tensor x = rand_leaf({4, 5}, -2, 2);
  Tensor t = targets({1, -100, 4, 0}, {4});
  for (Reduction red : kReductions) {
    for (double s : {0.0, 0.2}) {
      CrossEntropyOptions opt{.reduction = red, .label_smoothing = s};
      gradcheck([&](const TensorList& in) { return cross_entropy(in[0], t, opt); }, {x});
    }
  }
  Tensor x3 = rand_leaf({2, 3, 4}, -2, 2);
  Tensor t3 = targets({0, 1, 2, 1, 2, 2, 0, 1}, {2, 4});
  for (Reduction red : kReductions) {
    CrossEntropyOptions opt{.reduction = red, .ignore_index = 1, .label_smoothing = 0.1};
    gradcheck([&](const TensorList& in) { return cross_entropy(in[0], t3.to(DType::i32), opt); }, {x3});
  }
  Tensor xt = rand_leaf({5, 4}, -2, 2);
  gradcheck([&](const TensorList& in) { return cross_entropy(in[0].t(), t, {.label_smoothing = 0.3}); }, {xt});
  Tensor single = rand_leaf({3});
  gradcheck([](const TensorList& in) { return cross_entropy(in[0], targets({2}, {})); }, {single});
}

GENESIS_GRADCHECK("linear_cross_entropy") {
  Tensor x = rand_leaf({4, 3}, -1, 1);
  Tensor w = rand_leaf({5, 3}, -1, 1);
  Tensor t = targets({1, -100, 4, 0}, {4});
  for (Reduction red : kReductions) {
    CrossEntropyOptions opt{.reduction = red, .label_smoothing = 0.1};
    gradcheck([&](const TensorList& in) { return linear_cross_entropy(in[0], in[1], t, opt); }, {x, w});
  }
}

TEST_CASE("linear_cross_entropy is cross_entropy of the linear map, in f32 for 16-bit inputs", "[cpu][loss]") {
  Tensor x = testing::rand_values({6, 4}, DType::f64, -1, 1);
  Tensor w = testing::rand_values({7, 4}, DType::f64, -1, 1);
  Tensor t = targets({6, 0, -100, 3, 3, 1}, {6});
  for (Reduction red : kReductions) {
    CrossEntropyOptions opt{.reduction = red, .label_smoothing = 0.2};
    require_close(linear_cross_entropy(x, w, t, opt), cross_entropy(linear(x, w), t, opt), 1e-14, 1e-14);
  }
  Tensor half_loss = linear_cross_entropy(x.to(DType::bf16), w.to(DType::bf16), t);
  CHECK(half_loss.dtype() == DType::f32);
  require_close(half_loss.to(DType::f64), cross_entropy(linear(x.to(DType::bf16), w.to(DType::bf16)).to(DType::f64), t),
                1e-6, 1e-6);
  CHECK_THROWS_AS(linear_cross_entropy(x, w.t(), t), ShapeError);
  CHECK_THROWS_AS(linear_cross_entropy(x, w, targets({1, 2}, {2})), ShapeError);
  CHECK_THROWS_AS(linear_cross_entropy(x, w.to(DType::f32), t), DTypeError);
  CHECK_THROWS_AS(linear_cross_entropy(x, w, t.to(DType::f64)), DTypeError);
  CHECK_THROWS_WITH(linear_cross_entropy(x, w, targets({6, 0, 7, 3, 3, 1}, {6})), Catch::Contains("7"));
}

GENESIS_GRADCHECK("nll_loss") {
  Tensor x = rand_leaf({4, 5}, -3, 0);
  Tensor t = targets({1, -100, 4, 4}, {4});
  for (Reduction red : kReductions) gradcheck([&](const TensorList& in) { return nll_loss(in[0], t, red); }, {x});
  Tensor x3 = rand_leaf({2, 3, 4}, -3, 0);
  Tensor t3 = targets({0, 1, 2, 1, 2, 2, 0, 1}, {2, 4});
  for (Reduction red : kReductions)
    gradcheck([&](const TensorList& in) { return nll_loss(in[0].transpose(1, 2).transpose(1, 2), t3, red, 2); }, {x3});
}

TEST_CASE("mse_loss and l1_loss match their definitions", "[cpu][loss]") {
  Tensor a = testing::rand_values({4, 5}, DType::f64, -2, 2), b = testing::rand_values({4, 5}, DType::f64, -2, 2);
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> sq, ab;
  for (size_t i = 0; i < av.size(); ++i) {
    sq.push_back((av[i] - bv[i]) * (av[i] - bv[i]));
    ab.push_back(std::fabs(av[i] - bv[i]));
  }
  for (Reduction red : kReductions) {
    INFO("reduction " << reduction_name(red));
    Tensor want_sq = reduce_ref(sq, {4, 5}, red, 20), want_ab = reduce_ref(ab, {4, 5}, red, 20);
    require_close(mse_loss(a, b, red), want_sq, 1e-12, 1e-12);
    require_close(l1_loss(a, b, red), want_ab, 1e-12, 1e-12);
    require_close(mse_loss(a.to(DType::f32), b.to(DType::f32), red), want_sq, 1e-5, 1e-5);
    require_close(l1_loss(a.to(DType::f32), b.to(DType::f32), red), want_ab, 1e-5, 1e-5);
    Tensor ab16 = a.to(DType::bf16), bb16 = b.to(DType::bf16);
    CHECK(mse_loss(ab16, bb16, red).dtype() == DType::bf16);
    require_close(mse_loss(ab16, bb16, red).to(DType::f64), mse_loss(ab16.to(DType::f64), bb16.to(DType::f64), red),
                  1e-2, 1e-2);
    require_close(l1_loss(ab16, bb16, red).to(DType::f64), l1_loss(ab16.to(DType::f64), bb16.to(DType::f64), red), 1e-2,
                  1e-2);
  }
  require_close(mse_loss(a.t(), b.t(), Reduction::none), reduce_ref(sq, {4, 5}, Reduction::none, 20).t(), 1e-12, 1e-12);
  CHECK_THROWS_AS(mse_loss(a, b.t()), ShapeError);
  CHECK_THROWS_AS(l1_loss(a, b.view({20})), ShapeError);
  CHECK_THROWS_AS(mse_loss(a, b.to(DType::f32)), DTypeError);
  CHECK_THROWS_AS(l1_loss(a.to(DType::i64), b.to(DType::i64)), DTypeError);
}

TEST_CASE("l1_loss has a zero subgradient where input equals target", "[cpu][loss]") {
  Tensor x = tensor({1, 2, 3}, {}, {.dtype = DType::f64}).requires_grad_();
  Tensor y = tensor({1, 0, 5}, {}, {.dtype = DType::f64}).requires_grad_();
  l1_loss(x, y, Reduction::sum).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, -1});
  CHECK(y.grad().to_vector<double>() == std::vector<double>{0, -1, 1});
}

GENESIS_GRADCHECK("mse_loss") {
  Tensor a = rand_leaf({3, 4}), b = rand_leaf({3, 4});
  for (Reduction red : kReductions)
    gradcheck([red](const TensorList& in) { return mse_loss(in[0], in[1], red); }, {a, b});
  Tensor bt = rand_leaf({4, 3});
  gradcheck([](const TensorList& in) { return mse_loss(in[0], in[1].t()); }, {a, bt});
}

GENESIS_GRADCHECK("l1_loss") {
  Tensor a = rand_leaf({3, 4}), b = rand_leaf({3, 4});
  for (Reduction red : kReductions)
    gradcheck([red](const TensorList& in) { return l1_loss(in[0], in[1], red); }, {a, b});
  Tensor bt = rand_leaf({4, 3});
  gradcheck([](const TensorList& in) { return l1_loss(in[0], in[1].t(), Reduction::sum); }, {a, bt});
}

namespace {
// -[pw * t * log(sigmoid(x)) + (1 - t) * log(1 - sigmoid(x))] straight from the definition.
std::vector<double> bce_ref(const Tensor& x, const Tensor& t, const std::vector<double>& pos_weight) {
  auto xv = x.to_vector<double>(), tv = t.to_vector<double>();
  std::vector<double> out;
  for (size_t i = 0; i < xv.size(); ++i) {
    double p = 1 / (1 + std::exp(-xv[i]));
    double pw = pos_weight.empty() ? 1.0 : pos_weight[i % pos_weight.size()];
    out.push_back(-(pw * tv[i] * std::log(p) + (1 - tv[i]) * std::log(1 - p)));
  }
  return out;
}
}  // namespace

TEST_CASE("binary_cross_entropy_with_logits matches the definition and stays stable", "[cpu][loss]") {
  Tensor x = testing::rand_values({4, 3}, DType::f64, -4, 4), t = testing::rand_values({4, 3}, DType::f64, 0, 1);
  Tensor pw = tensor({0.5, 1.0, 3.0}, {3}, {.dtype = DType::f64});
  for (Reduction red : kReductions) {
    INFO("reduction " << reduction_name(red));
    Tensor want = reduce_ref(bce_ref(x, t, {}), {4, 3}, red, 12);
    Tensor want_pw = reduce_ref(bce_ref(x, t, {0.5, 1.0, 3.0}), {4, 3}, red, 12);
    require_close(binary_cross_entropy_with_logits(x, t, red), want, 1e-10, 1e-12);
    require_close(binary_cross_entropy_with_logits(x, t, red, pw), want_pw, 1e-10, 1e-12);
    require_close(binary_cross_entropy_with_logits(x.to(DType::f32), t.to(DType::f32), red, pw.to(DType::f32)), want_pw,
                  1e-5, 1e-5);
    Tensor xb = x.to(DType::bf16), tb = t.to(DType::bf16);
    Tensor yb = binary_cross_entropy_with_logits(xb, tb, red);
    CHECK(yb.dtype() == DType::bf16);
    require_close(yb.to(DType::f64), binary_cross_entropy_with_logits(xb.to(DType::f64), tb.to(DType::f64), red), 1e-2,
                  1e-2);
  }
  // Large logits: no overflow, the exact linear tails.
  Tensor big = tensor({100, -100, 50, -800}, {4});
  Tensor tt = tensor({0, 1, 0.5, 0}, {4});
  require_close(binary_cross_entropy_with_logits(big, tt, Reduction::none), tensor({100, 100, 25, 0}, {4}), 1e-6, 1e-6);
  require_close(binary_cross_entropy_with_logits(big, tt, Reduction::none, full({4}, 2.0)),
                tensor({100, 200, 25, 0}, {4}), 1e-6, 1e-6);
  CHECK_THROWS_AS(binary_cross_entropy_with_logits(x, t.t()), ShapeError);
  CHECK_THROWS_AS(binary_cross_entropy_with_logits(x, t.to(DType::f32)), DTypeError);
  CHECK_THROWS_AS(binary_cross_entropy_with_logits(x, t, Reduction::mean, tensor({1, 2})), DTypeError);
  CHECK_THROWS_AS(binary_cross_entropy_with_logits(x, t, Reduction::mean, tensor({1, 2}, {}, {.dtype = DType::f64})),
                  ShapeError);
  CHECK_THROWS_AS(binary_cross_entropy_with_logits(x, t, Reduction::mean, testing::rand_values({2, 4, 3}, DType::f64)),
                  ShapeError);
}

GENESIS_GRADCHECK("binary_cross_entropy_with_logits") {
  Tensor x = rand_leaf({4, 3}, -3, 3), t = rand_leaf({4, 3}, 0, 1), pw = rand_leaf({3}, 0.5, 2);
  for (Reduction red : kReductions) {
    gradcheck([red](const TensorList& in) { return binary_cross_entropy_with_logits(in[0], in[1], red); }, {x, t});
    gradcheck([red](const TensorList& in) { return binary_cross_entropy_with_logits(in[0], in[1], red, in[2]); },
              {x, t, pw});
  }
  Tensor xt = rand_leaf({3, 4}, -3, 3);
  gradcheck([](const TensorList& in) { return binary_cross_entropy_with_logits(in[0].t(), in[1]); }, {xt, t});
}
