// Elementwise ops: forward values against double-precision references, dtype rules,
// and finite-difference gradient checks on broadcast, odd and non-contiguous inputs.
#include <cmath>

#include "tests/testing.h"

using namespace genesis;
using testing::gradcheck;
using testing::rand_leaf;

namespace {

// Forward check of a unary op against a scalar reference over several dtypes.
void check_unary(const std::function<Tensor(const Tensor&)>& op, const std::function<double(double)>& ref, double lo,
                 double hi) {
  Tensor x64 = testing::rand_values({7, 13}, DType::f64, lo, hi);
  auto xs = x64.to_vector<double>();
  std::vector<double> expected;
  for (double v : xs) expected.push_back(ref(v));
  Tensor want = from_vector(expected, {7, 13});
  testing::require_close(op(x64), want, 1e-12, 1e-12);
  testing::require_close(op(x64.to(DType::f32)), want, 1e-5, 1e-6);
  testing::require_close(op(x64.to(DType::bf16)).to(DType::f64), op(x64.to(DType::bf16).to(DType::f64)), 1e-2, 1e-2);
  testing::require_close(op(x64.to(DType::f16)).to(DType::f64), op(x64.to(DType::f16).to(DType::f64)), 2e-3, 2e-3);
  // Non-contiguous input.
  testing::require_close(op(x64.t()), want.t(), 1e-12, 1e-12);
}

// Gradient check of a unary op on a plain, a transposed and a strided input.
void gradcheck_unary(const std::function<Tensor(const Tensor&)>& op, double lo = -1.0, double hi = 1.0) {
  Tensor a = rand_leaf({3, 5}, lo, hi);
  gradcheck([&](const TensorList& in) { return op(in[0]); }, {a});
  gradcheck([&](const TensorList& in) { return op(in[0].t()); }, {a});
  gradcheck([&](const TensorList& in) { return op(in[0].slice(1, 0, 5, 2)); }, {a});
  Tensor s = rand_leaf({}, lo, hi);
  gradcheck([&](const TensorList& in) { return op(in[0]); }, {s});
}

double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

}  // namespace

TEST_CASE("unary forward values", "[cpu][elementwise]") {
  check_unary([](const Tensor& x) { return neg(x); }, [](double v) { return -v; }, -2, 2);
  check_unary([](const Tensor& x) { return abs(x); }, [](double v) { return std::fabs(v); }, -2, 2);
  check_unary([](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }, -2, 2);
  check_unary([](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }, 0.1, 3);
  check_unary([](const Tensor& x) { return log1p(x); }, [](double v) { return std::log1p(v); }, -0.5, 3);
  check_unary([](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, 0.1, 3);
  check_unary([](const Tensor& x) { return rsqrt(x); }, [](double v) { return 1 / std::sqrt(v); }, 0.1, 3);
  check_unary([](const Tensor& x) { return sin(x); }, [](double v) { return std::sin(v); }, -3, 3);
  check_unary([](const Tensor& x) { return cos(x); }, [](double v) { return std::cos(v); }, -3, 3);
  check_unary([](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, -3, 3);
  check_unary([](const Tensor& x) { return sigmoid(x); }, [](double v) { return 1 / (1 + std::exp(-v)); }, -5, 5);
  check_unary([](const Tensor& x) { return relu(x); }, [](double v) { return v > 0 ? v : 0; }, -2, 2);
  check_unary([](const Tensor& x) { return gelu(x); }, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); },
              -3, 3);
  check_unary([](const Tensor& x) { return gelu(x, GeluApproximation::tanh); }, gelu_tanh_ref, -3, 3);
  check_unary([](const Tensor& x) { return silu(x); }, [](double v) { return v / (1 + std::exp(-v)); }, -4, 4);
  check_unary([](const Tensor& x) { return softplus(x, 2.0, 3.0); },
              [](double v) { return 2 * v > 3 ? v : std::log1p(std::exp(2 * v)) / 2; }, -3, 3);
  check_unary([](const Tensor& x) { return pow(x, 2.5); }, [](double v) { return std::pow(v, 2.5); }, 0.1, 2);
  check_unary([](const Tensor& x) { return clamp(x, -0.5, 0.25); }, [](double v) { return std::clamp(v, -0.5, 0.25); },
              -1, 1);
  check_unary([](const Tensor& x) { return clamp(x, std::nullopt, 0.25); }, [](double v) { return std::min(v, 0.25); },
              -1, 1);
  check_unary([](const Tensor& x) { return sign(x); }, [](double v) { return double((v > 0) - (v < 0)); }, -1, 1);
}

TEST_CASE("f32 gelu keeps its relative accuracy in the lower tail", "[cpu][elementwise]") {
  // x Phi(x) for x << 0 is tiny: computing Phi as (1 + erf) / 2 would lose every digit there.
  // Rounding x / sqrt 2 and its square in float moves the result by about x^2 * 6e-8 relative
  // (1e-5 at -12).
  std::vector<double> xs, want;
  for (double v = -12.0; v <= -2.0; v += 0.0137) {
    xs.push_back(static_cast<double>(static_cast<float>(v)));
    want.push_back(0.5 * xs.back() * std::erfc(-xs.back() / std::sqrt(2.0)));
  }
  const auto n = static_cast<int64_t>(xs.size());
  Tensor x = from_vector(xs, {n}).to(DType::f32);
  const std::vector<double> value = gelu(x).to_vector<double>();
  x.requires_grad_(true);
  sum(gelu(x)).backward();
  const std::vector<double> grad = x.grad().to_vector<double>();
  for (int64_t i = 0; i < n; ++i) {
    const double v = xs[static_cast<size_t>(i)];
    const double cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
    const double dwant = cdf + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    INFO("x = " << v);
    CHECK(std::fabs(value[static_cast<size_t>(i)] / want[static_cast<size_t>(i)] - 1.0) < 3e-5);
    CHECK(std::fabs(grad[static_cast<size_t>(i)] / dwant - 1.0) < 3e-5);
  }
}

TEST_CASE("f64 gelu keeps its relative accuracy in the lower tail", "[cpu][elementwise]") {
  // Phi(-10) = 7.6198530241605260e-24 and Phi(-20) = 2.7536241186062336e-89 (tables of the
  // normal integral); (1 + erf(x / sqrt 2)) / 2 gives 0 at both.
  Tensor x = from_vector(std::vector<double>{-10.0, -20.0}, {2});
  const std::vector<double> value = gelu(x).to_vector<double>();
  CHECK(std::fabs(value[0] / (-10.0 * 7.6198530241605260e-24) - 1.0) < 1e-12);
  CHECK(std::fabs(value[1] / (-20.0 * 2.7536241186062336e-89) - 1.0) < 1e-12);
  x.requires_grad_(true);
  sum(gelu(x)).backward();
  const std::vector<double> grad = x.grad().to_vector<double>();
  // d/dx x Phi(x) = Phi(x) + x phi(x); at x = -10 the density term dominates: phi(-10) = 7.6945986267064194e-23.
  CHECK(std::fabs(grad[0] / (7.6198530241605260e-24 - 10.0 * 7.6945986267064194e-23) - 1.0) < 1e-12);
}

TEST_CASE("unary dtype rules", "[cpu][elementwise]") {
  Tensor i = from_vector(std::vector<int32_t>{-2, 0, 3}, {3});
  CHECK(neg(i).dtype() == DType::i32);
  CHECK(abs(i).to_vector<int32_t>() == std::vector<int32_t>{2, 0, 3});
  CHECK(clamp(i, -1.0, 2.0).to_vector<int32_t>() == std::vector<int32_t>{-1, 0, 2});
  CHECK(exp(i).dtype() == DType::f32);
  CHECK(sqrt(i.to(DType::f64)).dtype() == DType::f64);
  CHECK(std::isnan(log(tensor({-1.0})).item()));
}

TEST_CASE("binary ops broadcast and promote", "[cpu][elementwise]") {
  Tensor a = tensor({1, 2, 3}, {3, 1});
  Tensor b = tensor({10, 20}, {1, 2});
  CHECK(add(a, b).to_vector<float>() == std::vector<float>{11, 21, 12, 22, 13, 23});
  CHECK(sub(a, b).shape() == Shape{3, 2});
  CHECK(mul(a, 2.0).to_vector<float>() == std::vector<float>{2, 4, 6});
  CHECK(div(1.0, tensor({2, 4})).to_vector<float>() == std::vector<float>{0.5f, 0.25f});
  Tensor ints = from_vector(std::vector<int64_t>{7, -7}, {2});
  CHECK(div(ints, 2.0).dtype() == DType::f32);
  CHECK(div(ints, from_vector(std::vector<int64_t>{2, 2}, {2})).to_vector<float>() == std::vector<float>{3.5f, -3.5f});
  CHECK(add(ints, 1.0).dtype() == DType::i64);
  CHECK(add(ints, 0.5).dtype() == DType::f32);
  CHECK(add(ints, tensor({0.5, 0.5})).dtype() == DType::f32);
  CHECK(add(tensor({1.0}).to(DType::f16), tensor({1.0}).to(DType::bf16)).dtype() == DType::f32);
  CHECK(mul(tensor({1.0}).to(DType::bf16), 3.0).dtype() == DType::bf16);
  CHECK(pow(tensor({2, 3}), tensor({3, 2})).to_vector<float>() == std::vector<float>{8, 9});
  CHECK(pow(from_vector(std::vector<int32_t>{2, 3}, {2}), from_vector(std::vector<int32_t>{3, 2}, {2}))
            .to_vector<int32_t>() == std::vector<int32_t>{8, 9});
  CHECK(maximum(tensor({1, 5}), tensor({3, 2})).to_vector<float>() == std::vector<float>{3, 5});
  CHECK(std::isnan(maximum(tensor({NAN}), tensor({1})).item()));
  CHECK(minimum(tensor({1, 5}), 2.0).to_vector<float>() == std::vector<float>{1, 2});
  CHECK(eq(tensor({1, 2}), tensor({1, 3})).to_vector<bool>() == std::vector<bool>{true, false});
  CHECK(lt(tensor({1, 2}), 2.0).dtype() == DType::boolean);
  CHECK(ge(tensor({1, 2}), 2.0).to_vector<bool>() == std::vector<bool>{false, true});
  CHECK(ne(tensor({1, 2}), 2.0).to_vector<bool>() == std::vector<bool>{true, false});
  CHECK(le(tensor({1, 2}), 1.0).to_vector<bool>() == std::vector<bool>{true, false});
  CHECK(gt(tensor({1, 2}), 1.0).to_vector<bool>() == std::vector<bool>{false, true});
}

TEST_CASE("where and masked_fill", "[cpu][elementwise]") {
  Tensor c = gt(tensor({1, -1, 2}), 0.0);
  CHECK(where(c, tensor({1, 2, 3}), tensor({10})).to_vector<float>() == std::vector<float>{1, 10, 3});
  CHECK(masked_fill(tensor({1, 2, 3, 4}, {2, 2}), gt(tensor({1, -1}), 0.0), -9.0).to_vector<float>() ==
        std::vector<float>{-9, 2, -9, 4});
  CHECK_THROWS_AS(where(tensor({1}), tensor({1}), tensor({1})), DTypeError);
  CHECK_THROWS_AS(masked_fill(tensor({1, 2}), gt(tensor({1, 2, 3}), 0.0), 0.0), ShapeError);
}

TEST_CASE("large tensors take the parallel path with the same results", "[cpu][elementwise]") {
  Tensor x = testing::rand_values({513, 257}, DType::f64);
  Tensor y = testing::rand_values({257}, DType::f64);
  auto xs = x.to_vector<double>(), ys = y.to_vector<double>();
  std::vector<double> expected(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) expected[i] = xs[i] * ys[i % 257];
  testing::require_close(mul(x, y), from_vector(expected, {513, 257}), 0, 0);
  testing::require_close(exp(x.t()).t(), exp(x), 0, 0);
}

GENESIS_GRADCHECK("neg") { gradcheck_unary([](const Tensor& x) { return neg(x); }); }
GENESIS_GRADCHECK("abs") { gradcheck_unary([](const Tensor& x) { return abs(x); }, 0.1, 1.0); gradcheck_unary([](const Tensor& x) { return abs(x); }, -1.0, -0.1); }
GENESIS_GRADCHECK("exp") { gradcheck_unary([](const Tensor& x) { return exp(x); }); }
GENESIS_GRADCHECK("log") { gradcheck_unary([](const Tensor& x) { return log(x); }, 0.2, 2.0); }
GENESIS_GRADCHECK("log1p") { gradcheck_unary([](const Tensor& x) { return log1p(x); }, -0.5, 2.0); }
GENESIS_GRADCHECK("sqrt") { gradcheck_unary([](const Tensor& x) { return sqrt(x); }, 0.2, 2.0); }
GENESIS_GRADCHECK("rsqrt") { gradcheck_unary([](const Tensor& x) { return rsqrt(x); }, 0.2, 2.0); }
GENESIS_GRADCHECK("sin") { gradcheck_unary([](const Tensor& x) { return sin(x); }, -3, 3); }
GENESIS_GRADCHECK("cos") { gradcheck_unary([](const Tensor& x) { return cos(x); }, -3, 3); }
GENESIS_GRADCHECK("tanh") { gradcheck_unary([](const Tensor& x) { return tanh(x); }, -2, 2); }
GENESIS_GRADCHECK("sigmoid") { gradcheck_unary([](const Tensor& x) { return sigmoid(x); }, -4, 4); }
GENESIS_GRADCHECK("relu") { gradcheck_unary([](const Tensor& x) { return relu(x); }, 0.05, 1); gradcheck_unary([](const Tensor& x) { return relu(x); }, -1, -0.05); }
GENESIS_GRADCHECK("gelu") { gradcheck_unary([](const Tensor& x) { return gelu(x); }, -3, 3); }
GENESIS_GRADCHECK("gelu_tanh") { gradcheck_unary([](const Tensor& x) { return gelu(x, GeluApproximation::tanh); }, -3, 3); }
GENESIS_GRADCHECK("silu") { gradcheck_unary([](const Tensor& x) { return silu(x); }, -3, 3); }
GENESIS_GRADCHECK("softplus") {
  gradcheck_unary([](const Tensor& x) { return softplus(x); }, -3, 3);
  gradcheck_unary([](const Tensor& x) { return softplus(x, 3.0, 2.0); }, -2, 2);
}
GENESIS_GRADCHECK("pow_scalar") {
  gradcheck_unary([](const Tensor& x) { return pow(x, 3.0); }, -2, 2);
  gradcheck_unary([](const Tensor& x) { return pow(x, -1.5); }, 0.3, 2);
}
GENESIS_GRADCHECK("clamp") {
  // Keep samples away from the kinks at the bounds.
  Tensor a = tensor({-0.9, -0.7, -0.2, 0.1, 0.3, 0.8}, {2, 3}, {.dtype = DType::f64}).requires_grad_();
  gradcheck([](const TensorList& in) { return clamp(in[0], -0.5, 0.5); }, {a});
  gradcheck([](const TensorList& in) { return clamp(in[0].t(), std::nullopt, 0.0); }, {a});
}
GENESIS_GRADCHECK("sign") { gradcheck_unary([](const Tensor& x) { return sign(x); }, 0.1, 1.0); }

namespace {
// Gradient checks of a binary op over broadcasting, scalars, odd sizes and strided views.
void gradcheck_binary(const std::function<Tensor(const Tensor&, const Tensor&)>& op, double lo = -1.0,
                      double hi = 1.0) {
  Tensor a = rand_leaf({3, 5}, lo, hi), b = rand_leaf({3, 5}, lo, hi);
  gradcheck([&](const TensorList& in) { return op(in[0], in[1]); }, {a, b});
  Tensor col = rand_leaf({3, 1}, lo, hi), row = rand_leaf({5}, lo, hi);
  gradcheck([&](const TensorList& in) { return op(in[0], in[1]); }, {col, row});
  Tensor s = rand_leaf({}, lo, hi);
  gradcheck([&](const TensorList& in) { return op(in[0], in[1]); }, {a, s});
  Tensor bt = rand_leaf({5, 3}, lo, hi);
  gradcheck([&](const TensorList& in) { return op(in[0], in[1].t()); }, {a, bt});
}
}  // namespace

GENESIS_GRADCHECK("add") { gradcheck_binary([](const Tensor& a, const Tensor& b) { return add(a, b); }); }
GENESIS_GRADCHECK("sub") { gradcheck_binary([](const Tensor& a, const Tensor& b) { return sub(a, b); }); }
GENESIS_GRADCHECK("mul") { gradcheck_binary([](const Tensor& a, const Tensor& b) { return mul(a, b); }); }
GENESIS_GRADCHECK("div") { gradcheck_binary([](const Tensor& a, const Tensor& b) { return div(a, b); }, 0.5, 2.0); }
GENESIS_GRADCHECK("pow") { gradcheck_binary([](const Tensor& a, const Tensor& b) { return pow(a, b); }, 0.5, 2.0); }
GENESIS_GRADCHECK("maximum") {
  gradcheck_binary([](const Tensor& a, const Tensor& b) { return maximum(a, b); });
  // Ties split the gradient evenly.
  Tensor a = tensor({1.0, 2.0}, {}, {.dtype = DType::f64}).requires_grad_();
  Tensor b = tensor({1.0, 3.0}, {}, {.dtype = DType::f64}).requires_grad_();
  sum(maximum(a, b)).backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{0.5, 0.0});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{0.5, 1.0});
}
GENESIS_GRADCHECK("minimum") { gradcheck_binary([](const Tensor& a, const Tensor& b) { return minimum(a, b); }); }
GENESIS_GRADCHECK("where") {
  Tensor c = gt(testing::rand_values({3, 5}, DType::f64), 0.0);
  gradcheck_binary([c](const Tensor& a, const Tensor& b) { return where(c, a, b); });
}
GENESIS_GRADCHECK("masked_fill") {
  Tensor m = gt(testing::rand_values({5}, DType::f64), 0.0);
  Tensor a = rand_leaf({3, 5});
  gradcheck([m](const TensorList& in) { return masked_fill(in[0], m, 2.0); }, {a});
  gradcheck([m](const TensorList& in) { return masked_fill(in[0].t().t(), m, -1.0); }, {a});
}
