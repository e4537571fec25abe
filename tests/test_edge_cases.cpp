// Edge cases found in review: each once gave a wrong result, a crash or a silent error.
#include <cmath>
#include <limits>

#include "libgenesis/data/dataset.h"
#include "libgenesis/optim/optimizer.h"
#include "tests/testing.h"

using namespace genesis;

TEST_CASE("a long graph whose nodes use one input twice is freed without recursion", "[cpu][autograd]") {
  Tensor x = zeros({1}, {.requires_grad = true});
  {
    Tensor y = x;
    for (int i = 0; i < 200000; ++i) y = add(y, y);
  }
  SUCCEED();
}

TEST_CASE("modifying a tensor saved for backward is an error, not a wrong gradient", "[cpu][autograd]") {
  Tensor w = full({3}, 2.0, {.requires_grad = true});
  Tensor x = ones({3});
  Tensor y = mul(w, x);
  mul_(x, 3.0);
  CHECK_THROWS_WITH(sum(y).backward(), Catch::Contains("modified in place"));
  // Saved outputs too: exp saves its input.
  Tensor a = ones({2}, {.requires_grad = true});
  Tensor b = a.clone();
  Tensor e = exp(mul(b, 1.0));
  Tensor z = ones({2});
  Tensor p = mul(e, z);
  z.fill_(5.0);
  CHECK_THROWS_AS(sum(p).backward(), AutogradError);
  // An optimizer step between forward and backward invalidates the graph.
  Tensor w2 = ones({2}, {.requires_grad = true});
  Tensor loss = sum(mul(w2, w2));
  ParamGroup g;
  g.params = {{"w", w2}};
  auto opt = make_sgd({g});
  w2.set_grad(ones({2}));
  opt->step();
  CHECK_THROWS_AS(loss.backward(), AutogradError);
}

TEST_CASE("in-place ops refuse sources that need grad and self-overlapping destinations", "[cpu][elementwise]") {
  Tensor w = full({3}, 2.0, {.requires_grad = true});
  Tensor a = zeros({3});
  CHECK_THROWS_AS(add_(a, w), AutogradError);
  Tensor base = zeros({1});
  Tensor expanded = base.expand({3});
  CHECK_THROWS_AS(add_(expanded, tensor({1, 2, 3})), ValueError);
  CHECK_THROWS_AS(expanded.copy_(tensor({1, 2, 3})), ValueError);
}

TEST_CASE("scalars keep their range with half tensors, bool + number counts", "[cpu][elementwise]") {
  Tensor h = full({1}, 0.001, {.dtype = DType::f16});
  Tensor r = mul(h, 70000.0);
  CHECK(r.dtype() == DType::f16);
  CHECK(r.item() == Approx(70.0).epsilon(1e-3));
  Tensor t = from_vector(std::vector<int32_t>{1, 0}, {2}).to(DType::boolean);
  Tensor s = add(t, 1.0);
  CHECK(s.dtype() == DType::i64);
  CHECK(s.to_vector<int64_t>() == std::vector<int64_t>{2, 1});
  Tensor mask = gt(tensor({1, -1}), 0.0);
  CHECK_THROWS_AS(masked_fill(zeros({2}, {.dtype = DType::f16}), mask, -1e9), ValueError);
  CHECK(masked_fill(zeros({2}, {.dtype = DType::f16}), mask, -INFINITY).to_vector<float>()[0] == -INFINITY);
}

TEST_CASE("relu keeps NaN, pow's gradient at 0^0 is 0", "[cpu][elementwise]") {
  CHECK(std::isnan(relu(tensor({NAN})).item()));
  Tensor a = zeros({1}, {.dtype = DType::f64, .requires_grad = true});
  Tensor b = zeros({1}, {.dtype = DType::f64, .requires_grad = true});
  sum(pow(a, b)).backward();
  CHECK(a.grad().item() == 0.0);
  CHECK(b.grad().item() == 0.0);
}

TEST_CASE("gradient norm of half-precision gradients is computed in f32", "[cpu][optim]") {
  Tensor p = zeros({4}, {.dtype = DType::f16, .requires_grad = true});
  p.set_grad(full({4}, 300.0, {.dtype = DType::f16}));
  CHECK(clip_grad_norm({p}, 1000.0).item() == Approx(600.0));
  CHECK(p.grad().to_vector<float>()[0] == 300.0f);
}

TEST_CASE("views reject invalid sizes and overflowing ranges", "[cpu][core]") {
  CHECK_THROWS_AS(ones({1}).expand({-2}), ShapeError);
  CHECK(arange(0.0, 5.0).slice(0, 0, 5, std::numeric_limits<int64_t>::max()).shape() == Shape{1});
  CHECK_THROWS_AS(arange(0.0, 5.0).narrow(0, 1, std::numeric_limits<int64_t>::max()), IndexError);
}

TEST_CASE("datasets with mismatched or strided parts are refused before any copy", "[cpu][data]") {
  data::Dataset short_targets{zeros({1000, 2}), full({1}, 7.0, {.dtype = DType::i64})};
  CHECK_THROWS_WITH(data::take(short_targets, {999}), Catch::Contains("1000 inputs but 1 targets"));
  data::Dataset strided{zeros({3, 2}).t(), zeros({2}, {.dtype = DType::i64})};
  CHECK_THROWS_WITH(data::take(strided, {1}), Catch::Contains("contiguous"));
}
