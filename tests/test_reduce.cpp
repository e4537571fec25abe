// Reductions: forward values against double-precision references over axes, keepdim,
// negative axes and dtypes; NaN and infinity handling; thread-count independence of long
// rows; and finite-difference gradient checks.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tests/testing.h"

using namespace genesis;
using testing::gradcheck;
using testing::rand_leaf;
using testing::require_close;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using RowFn = std::function<double(const std::vector<double>&)>;

// Reference reduction: groups the elements of x (read as f64, row-major) by their
// coordinates outside `axes` (empty = all) and applies fn to each group in order.
Tensor reference(const Tensor& x, Axes axes, bool keepdim, const RowFn& fn) {
  const Shape& shape = x.shape();
  const auto nd = static_cast<int64_t>(shape.size());
  for (int64_t& a : axes) a = a < 0 ? a + nd : a;
  if (axes.empty())
    for (int64_t d = 0; d < nd; ++d) axes.push_back(d);
  auto reduced = [&](int64_t d) { return std::find(axes.begin(), axes.end(), d) != axes.end(); };
  Shape out_shape;
  for (int64_t d = 0; d < nd; ++d) {
    if (!reduced(d)) out_shape.push_back(shape[static_cast<size_t>(d)]);
    else if (keepdim) out_shape.push_back(1);
  }
  std::vector<std::vector<double>> groups(static_cast<size_t>(std::max<int64_t>(1, numel_of(out_shape))));
  if (numel_of(out_shape) == 0) groups.clear();
  std::vector<double> values = x.to_vector<double>();
  for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
    int64_t rem = i, group = 0, scale = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
      int64_t size = shape[static_cast<size_t>(d)], coord = rem % size;
      rem /= size;
      if (!reduced(d)) {
        group += coord * scale;
        scale *= size;
      }
    }
    groups[static_cast<size_t>(group)].push_back(values[static_cast<size_t>(i)]);
  }
  std::vector<double> out;
  for (const auto& g : groups) out.push_back(fn(g));
  return from_vector(out, out_shape);
}

double ref_prod(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 1.0, std::multiplies<>()); }
double ref_max(const std::vector<double>& v) {
  double m = v[0];
  for (double x : v) {
    if (std::isnan(x)) return x;
    m = std::max(m, x);
  }
  return m;
}
double ref_var(const std::vector<double>& v, int correction) {
  double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()), ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return ss / static_cast<double>(static_cast<int>(v.size()) - correction);
}
double ref_logsumexp(const std::vector<double>& v) {
  double m = -kInf;
  for (double x : v) m = std::max(m, x);
  if (std::isinf(m)) return m;
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}
RowFn ref_norm(double p) {
  return [p](const std::vector<double>& v) {
    if (std::isinf(p)) {
      double m = p > 0 ? 0.0 : kInf;
      for (double x : v) m = p > 0 ? std::max(m, std::fabs(x)) : std::min(m, std::fabs(x));
      return m;
    }
    double s = 0;
    for (double x : v) s += p == 0 ? (x != 0) : std::pow(std::fabs(x), p);
    return p == 0 ? s : std::pow(s, 1.0 / p);
  };
}

// Checks op against ref for several axis sets, keepdim, f64/f32/bf16 inputs and a transposed input.
void check_reduction(const std::function<Tensor(const Tensor&, const Axes&, bool)>& op, const RowFn& ref,
                     double lo = -1.0, double hi = 1.0) {
  Tensor x = testing::rand_values({3, 4, 5}, DType::f64, lo, hi);
  for (const Axes& axes : {Axes{}, Axes{1}, Axes{0, 2}, Axes{-1}, Axes{-3, -2}}) {
    for (bool keepdim : {false, true}) {
      INFO("axes of size " << axes.size() << (axes.empty() ? "" : " first " + std::to_string(axes[0])) << ", keepdim "
                           << keepdim);
      Tensor want = reference(x, axes, keepdim, ref);
      require_close(op(x, axes, keepdim), want, 1e-12, 1e-12);
      Tensor got32 = op(x.to(DType::f32), axes, keepdim);
      CHECK(got32.dtype() == DType::f32);
      require_close(got32, want, 1e-5, 1e-6);
      Tensor xb = x.to(DType::bf16);
      Tensor gotb = op(xb, axes, keepdim);
      CHECK(gotb.dtype() == DType::bf16);
      require_close(gotb, reference(xb, axes, keepdim, ref), 1e-2, 1e-2);
    }
  }
  Tensor xt = x.transpose(0, 2);
  require_close(op(xt, {1}, false), reference(xt.contiguous(), {1}, false, ref), 1e-12, 1e-12);
}

}  // namespace

TEST_CASE("prod forward", "[cpu][reduce]") {
  check_reduction([](const Tensor& x, const Axes& a, bool k) { return prod(x, a, k); }, ref_prod, 0.5, 1.5);
  Tensor with_zero = tensor({1, 0, 3, 2, 4, 5}, {2, 3}, {.dtype = DType::f64});
  CHECK(prod(with_zero, {1}).to_vector<double>() == std::vector<double>{0, 40});
  Tensor ints = from_vector(std::vector<int32_t>{2, -3, 4, 5}, {2, 2});
  CHECK(prod(ints).dtype() == DType::i64);
  CHECK(prod(ints).item() == -120.0);
  CHECK(prod(ints, {0}).to_vector<int64_t>() == std::vector<int64_t>{8, -15});
  CHECK(prod(gt(ints, 0.0)).to_vector<int64_t>() == std::vector<int64_t>{0});
  CHECK(prod(empty({2, 0}), {1}).to_vector<float>() == std::vector<float>{1, 1});
  CHECK(prod(scalar_tensor(3.0), {0}).item() == 3.0);
}

TEST_CASE("max and min over an axis", "[cpu][reduce]") {
  Tensor x = tensor({1, 3, 3, 2, 2, 1}, {2, 3});
  ValuesIndices mx = max(x, 1);
  CHECK(mx.values.to_vector<float>() == std::vector<float>{3, 2});
  CHECK(mx.indices.dtype() == DType::i64);
  CHECK(mx.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 0});  // ties: first index
  ValuesIndices mn = min(x, -1, true);
  CHECK(mn.values.shape() == Shape{2, 1});
  CHECK(mn.values.to_vector<float>() == std::vector<float>{1, 1});
  CHECK(mn.indices.to_vector<int64_t>() == std::vector<int64_t>{0, 2});
  CHECK(max(x, 0).indices.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0});
  CHECK(argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(argmin(x, 0, true).shape() == Shape{1, 3});
  CHECK(argmin(x, 0).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1});

  Tensor r = testing::rand_values({4, 5, 6}, DType::f64);
  auto ref_min = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  for (int64_t axis : {0, 1, 2, -2}) {
    require_close(max(r, axis).values, reference(r, {axis}, false, ref_max), 0, 0);
    require_close(min(r, axis, true).values, reference(r, {axis}, true, ref_min), 0, 0);
    require_close(max(r.transpose(0, 2), axis).values,
                  reference(r.transpose(0, 2).contiguous(), {axis}, false, ref_max), 0, 0);
  }
  // Integer and half inputs keep their dtype.
  Tensor ints = from_vector(std::vector<int32_t>{5, -7, 9, 9}, {2, 2});
  CHECK(max(ints, 1).values.dtype() == DType::i32);
  CHECK(max(ints, 1).values.to_vector<int32_t>() == std::vector<int32_t>{5, 9});
  CHECK(min(ints).to_vector<int32_t>() == std::vector<int32_t>{-7});
  // i64 compares exactly (not through double).
  const int64_t big = int64_t{1} << 60;
  CHECK(max(from_vector(std::vector<int64_t>{big + 1, big}, {2})).to_vector<int64_t>() ==
        std::vector<int64_t>{big + 1});
  CHECK(max(r.to(DType::f16), 0).values.dtype() == DType::f16);
  require_close(max(r.to(DType::bf16), 1).values, max(r.to(DType::bf16).to(DType::f64), 1).values, 0, 0);
  CHECK(max(gt(x, 2.0), 1).values.dtype() == DType::boolean);
  // A 0-d input reduces over its single element.
  CHECK(max(scalar_tensor(4.0), 0).indices.item() == 0.0);
}

TEST_CASE("max and min over all elements", "[cpu][reduce]") {
  Tensor x = testing::rand_values({7, 9}, DType::f64, -3, 3);
  require_close(max(x), reference(x, {}, false, ref_max), 0, 0);
  CHECK(max(x).shape() == Shape{});
  std::vector<double> values = x.to_vector<double>();
  CHECK(min(x).item() == *std::min_element(values.begin(), values.end()));
  CHECK(max(x.to(DType::f32)).dtype() == DType::f32);
  CHECK(min(tensor({3})).item() == 3.0);
}

TEST_CASE("max and min propagate NaN", "[cpu][reduce]") {
  Tensor x = tensor({1, kNaN, 3, kNaN, 2, 0}, {2, 3});
  ValuesIndices mx = max(x, 1), mn = min(x, 1);
  CHECK(std::isnan(mx.values.to_vector<double>()[0]));
  CHECK(std::isnan(mx.values.to_vector<double>()[1]));
  CHECK(mx.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(mn.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(argmax(tensor({5, kNaN, kNaN}), 0).item() == 1.0);
  CHECK(std::isnan(max(x).item()));
  CHECK(std::isnan(min(x).item()));
  CHECK(min(tensor({2, 1}, {2})).item() == 1.0);
}

TEST_CASE("max and min reject empty reductions", "[cpu][reduce]") {
  CHECK_THROWS_AS(max(empty({2, 0}), 1), ValueError);
  CHECK_THROWS_AS(argmin(zeros({0, 3}), 0), ValueError);
  CHECK_THROWS_AS(max(zeros({0})), ValueError);
  CHECK(max(zeros({0, 3}), 1).values.shape() == Shape{0});
  CHECK_THROWS_AS(max(zeros({2, 3}), 2), IndexError);
  CHECK_THROWS_AS(argmax(zeros({2, 3}), -3), IndexError);
}

TEST_CASE("var and std forward", "[cpu][reduce]") {
  for (int correction : {0, 1}) {
    bool unbiased = correction == 1;
    auto ref = [correction](const std::vector<double>& v) { return ref_var(v, correction); };
    check_reduction([unbiased](const Tensor& x, const Axes& a, bool k) { return var(x, a, unbiased, k); }, ref);
    check_reduction([unbiased](const Tensor& x, const Axes& a, bool k) { return genesis::std(x, a, unbiased, k); },
                    [ref](const std::vector<double>& v) { return std::sqrt(ref(v)); });
  }
  Tensor ints = from_vector(std::vector<int64_t>{1, 2, 3, 4}, {4});
  CHECK(var(ints).dtype() == DType::f32);
  CHECK(var(ints).item() == Approx(5.0 / 3.0));
  CHECK(genesis::std(ints, {0}, false).item() == Approx(std::sqrt(1.25)));
  CHECK(std::isnan(var(tensor({2.0})).item()));  // one sample, unbiased: 0 / 0
  CHECK(var(tensor({2.0}), {}, false).item() == 0.0);
  // Large offsets: the two-pass algorithm keeps precision.
  Tensor shifted = add(tensor({1, 2, 3, 4}, {}, {.dtype = DType::f64}), 1e9);
  CHECK(var(shifted).item() == Approx(5.0 / 3.0).epsilon(1e-9));
}

TEST_CASE("sum over the dims around a kept block reads the tensor in place", "[cpu][reduce]") {
  // {0, 2, 3} of N, C, H, W (a bias gradient) goes through sum_channels when H * W >= 16; the
  // other sets through the row copy. Both against the float64 reference.
  auto ref_sum = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); };
  Tensor x = testing::rand_values({3, 5, 4, 7}, DType::f64, -1.0, 1.0);
  for (const Axes& axes : {Axes{0, 2, 3}, Axes{0, 3}, Axes{0, 1, 3}, Axes{0, 2}}) {
    for (bool keepdim : {false, true}) {
      INFO("axes of size " << axes.size() << ", keepdim " << keepdim);
      Tensor want = reference(x, axes, keepdim, ref_sum);
      require_close(sum(x, axes, keepdim), want, 1e-12, 1e-12);
      require_close(sum(x.to(DType::f32), axes, keepdim), want, 1e-5, 1e-6);
      Tensor xb = x.to(DType::bf16);
      require_close(sum(xb, axes, keepdim), reference(xb, axes, keepdim, ref_sum), 1e-2, 1e-2);
    }
  }
}

TEST_CASE("float row sums over lane chunks, blocks and tails match the float64 reference", "[cpu][reduce]") {
  // f32 / bf16 rows are summed in 64 float lanes per block of 1024 elements, then in double:
  // lengths around the lane width, the block and the column chunk (16384), with a non-zero mean
  // so that the relative error means something. sum over {0, 2} reads the same path in place.
  auto ref_sum = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); };
  for (int64_t cols : {1, 63, 64, 65, 1023, 1024, 1025, 2085, 16389}) {
    INFO("cols " << cols);
    Tensor x = testing::rand_values({3, cols}, DType::f64, -1.0, 2.0);
    Tensor want = reference(x, {1}, false, ref_sum);
    require_close(sum(x.to(DType::f32), {1}), want, 2e-6, 1e-6);
    require_close(mean(x.to(DType::f32), {1}), div(want, static_cast<double>(cols)), 2e-6, 1e-6);
    Tensor xb = x.to(DType::bf16);
    require_close(sum(xb, {1}).to(DType::f64), reference(xb, {1}, false, ref_sum), 8e-3, 1e-6);
    Tensor x3 = x.reshape({3, 1, cols}).expand({3, 2, cols}).contiguous();
    require_close(sum(x3.to(DType::f32), {0, 2}), reference(x3, {0, 2}, false, ref_sum), 2e-6, 1e-6);
  }
  // Terms near FLT_MAX overflow a float lane; such rows are summed in double again.
  Tensor big = full({2, 100}, 3e38, {.dtype = DType::f32});
  for (int64_t i = 0; i < 100; i += 2) big.data<float>()[100 + i] = -3e38f;
  require_close(mean(big, {1}), from_vector(std::vector<double>{3e38, 0.0}, {2}), 1e-6, 0);
  CHECK(std::isinf(sum(big, {1}).to_vector<double>()[0]));  // 3e40 is past f32's range
  CHECK(sum(big, {1}).to_vector<double>()[1] == 0.0);
}

TEST_CASE("logsumexp forward", "[cpu][reduce]") {
  check_reduction([](const Tensor& x, const Axes& a, bool k) { return logsumexp(x, a, k); }, ref_logsumexp, -3, 3);
  // Stable for large inputs.
  CHECK(logsumexp(tensor({1000, 1000}, {}, {.dtype = DType::f64}), {0}).item() ==
        Approx(1000 + std::log(2.0)).epsilon(1e-15));
  CHECK(logsumexp(tensor({-1000, -1000}), {0}).item() == Approx(-1000 + std::log(2.0)));
  // Rows of -inf give -inf; a +inf gives +inf; NaN propagates.
  Tensor special = tensor({-kInf, -kInf, 0, kInf, 1, kNaN}, {3, 2});
  std::vector<double> got = logsumexp(special, {1}).to_vector<double>();
  CHECK(got[0] == -kInf);
  CHECK(got[1] == kInf);
  CHECK(std::isnan(got[2]));
  CHECK(logsumexp(empty({2, 0}), {1}).to_vector<double>() == std::vector<double>{-kInf, -kInf});
  CHECK(logsumexp(from_vector(std::vector<int32_t>{0, 0}, {2}), {}).dtype() == DType::f32);
}

TEST_CASE("norm forward", "[cpu][reduce]") {
  for (double p : {2.0, 1.0, kInf, -kInf, 0.0, 3.0, 0.5}) {
    INFO("p = " << p);
    check_reduction([p](const Tensor& x, const Axes& a, bool k) { return norm(x, p, a, k); }, ref_norm(p));
  }
  CHECK(norm(tensor({3, -4})).item() == 5.0);
  CHECK(norm(tensor({3, -4}), 1).item() == 7.0);
  CHECK(norm(tensor({3, -4}), kInf).item() == 4.0);
  CHECK(norm(tensor({0, 2, 0}), 0).item() == 1.0);
  CHECK(norm(from_vector(std::vector<int32_t>{3, 4}, {2})).dtype() == DType::f32);
  CHECK(norm(zeros({3})).item() == 0.0);
  CHECK_THROWS_AS(norm(tensor({1}), kNaN), ValueError);
}

TEST_CASE("reductions validate axes", "[cpu][reduce]") {
  Tensor x = zeros({2, 3});
  CHECK_THROWS_AS(prod(x, {2}), IndexError);
  CHECK_THROWS_AS(var(x, {1, -1}), ValueError);
  CHECK_THROWS_AS(logsumexp(x, {-3}), IndexError);
  CHECK_THROWS_AS(norm(Tensor()), ValueError);
  CHECK(sum(scalar_tensor(2.0), {-1}).item() == 2.0);
}

TEST_CASE("long rows are split across threads deterministically", "[cpu][reduce]") {
  // One row of a million elements, and a few rows spanning several column chunks.
  Tensor row = testing::rand_values({1, 1000003}, DType::f64, -1, 2);
  Tensor rows = testing::rand_values({3, 50001}, DType::f32, -1, 2);
  for (int64_t spike : {int64_t{20000}, int64_t{999999}}) row.data<double>()[spike] = 5.0;
  auto run_all = [&]() {
    return TensorList{sum(row, {1}),       sum(rows, {1}),       prod(add(mul(rows, 1e-3), 1.0), {1}),
                      max(row, 1).values,  max(row, 1).indices,  min(rows, 1).indices,
                      var(row, {1}),       logsumexp(rows, {1}), norm(row, 3.0, {1}),
                      norm(rows, kInf, {1}), mean(rows)};
  };
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  TensorList serial = run_all();
  omp_set_num_threads(3);
  TensorList parallel = run_all();
  omp_set_num_threads(threads);
  for (size_t i = 0; i < serial.size(); ++i) {
    INFO("result " << i);
    require_close(parallel[i], serial[i], 0, 0);
  }
  CHECK(max(row, 1).indices.item() == 20000.0);  // the tie across chunks keeps the first
  require_close(sum(row, {1}), reference(row, {1}, false,
                                         [](const std::vector<double>& v) {
                                           return std::accumulate(v.begin(), v.end(), 0.0);
                                         }),
                1e-12, 0);
  require_close(var(row), reference(row, {}, false, [](const std::vector<double>& v) { return ref_var(v, 1); }),
                1e-10, 0);
}

GENESIS_GRADCHECK("prod") {
  gradcheck([](const TensorList& in) { return prod(in[0], {1}); }, {rand_leaf({3, 4}, 0.5, 1.5)});
  gradcheck([](const TensorList& in) { return prod(in[0].transpose(0, 2), {0, 2}, true); },
            {rand_leaf({2, 3, 4}, 0.5, 1.5)});
  gradcheck([](const TensorList& in) { return prod(in[0]); }, {rand_leaf({5}, -1.5, 1.5)});
  // Rows with one zero and with two zeros: the product of the others, not out / x.
  Tensor zs = rand_leaf({3, 4}, 0.5, 1.5);
  zs.data<double>()[1] = 0.0;
  zs.data<double>()[4] = 0.0;
  zs.data<double>()[6] = 0.0;
  gradcheck([](const TensorList& in) { return prod(in[0], {-1}); }, {zs});
  Tensor x = tensor({2, 0, 3}, {}, {.dtype = DType::f64}).requires_grad_();
  prod(x).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 6, 0});
}

GENESIS_GRADCHECK("max") {
  gradcheck([](const TensorList& in) { return max(in[0], 1).values; }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return max(in[0].t(), -1, true).values; }, {rand_leaf({4, 3})});
  gradcheck([](const TensorList& in) { return max(in[0], 0).values; }, {rand_leaf({2, 3, 4})});
  gradcheck([](const TensorList& in) { return max(in[0]); }, {rand_leaf({3, 4})});
  // Over all elements, tied maxima share the gradient (the central difference sees 1/2 each).
  Tensor ties = tensor({1, 3, 3, 2}, {}, {.dtype = DType::f64}).requires_grad_();
  gradcheck([](const TensorList& in) { return max(in[0]); }, {ties});
  ties.set_grad(Tensor());
  max(ties).backward();
  CHECK(ties.grad().to_vector<double>() == std::vector<double>{0, 0.5, 0.5, 0});
  // Over an axis, the gradient goes to the first of the tied positions.
  Tensor row = tensor({3, 1, 3}, {}, {.dtype = DType::f64}).requires_grad_();
  max(row, 0).values.backward();
  CHECK(row.grad().to_vector<double>() == std::vector<double>{1, 0, 0});
}

GENESIS_GRADCHECK("min") {
  gradcheck([](const TensorList& in) { return min(in[0], 0).values; }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return min(in[0].slice(1, 0, 5, 2), -1).values; }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return min(in[0]); }, {rand_leaf({2, 3, 2})});
  Tensor ties = tensor({1, 0, 2, 0}, {}, {.dtype = DType::f64}).requires_grad_();
  gradcheck([](const TensorList& in) { return min(in[0]); }, {ties});
}

GENESIS_GRADCHECK("var") {
  gradcheck([](const TensorList& in) { return var(in[0]); }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return var(in[0], {1}, false); }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return var(in[0].transpose(0, 1), {0, -1}, true, true); },
            {rand_leaf({2, 3, 4})});
}

GENESIS_GRADCHECK("std") {
  gradcheck([](const TensorList& in) { return genesis::std(in[0]); }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return genesis::std(in[0].t(), {0}, false, true); }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return genesis::std(in[0], {0, 2}); }, {rand_leaf({2, 3, 4})});
  // A constant row has std 0 and gets a zero gradient rather than NaN.
  Tensor flat = full({3}, 2.0, {.dtype = DType::f64}).requires_grad_();
  genesis::std(flat).backward();
  CHECK(flat.grad().to_vector<double>() == std::vector<double>{0, 0, 0});
}

GENESIS_GRADCHECK("logsumexp") {
  gradcheck([](const TensorList& in) { return logsumexp(in[0], {1}); }, {rand_leaf({3, 5}, -3, 3)});
  gradcheck([](const TensorList& in) { return logsumexp(in[0].t(), {}, true); }, {rand_leaf({3, 5}, -3, 3)});
  gradcheck([](const TensorList& in) { return logsumexp(in[0], {0, 2}); }, {rand_leaf({2, 3, 4}, -3, 3)});
  // A row of -inf gets a zero gradient; the other row gets its softmax.
  Tensor x = tensor({-kInf, -kInf, 0, 0}, {2, 2}, {.dtype = DType::f64}).requires_grad_();
  sum(logsumexp(x, {1})).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0, 0.5, 0.5});
}

GENESIS_GRADCHECK("norm") {
  gradcheck([](const TensorList& in) { return norm(in[0]); }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return norm(in[0].t(), 2.0, {0}, true); }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return norm(in[0], 1.0, {1}); }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return norm(in[0], kInf, {-1}); }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return norm(in[0], -kInf, {0}); }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return norm(in[0], 3.0, {0, 2}); }, {rand_leaf({2, 3, 4})});
  gradcheck([](const TensorList& in) { return norm(in[0], 0.5); }, {rand_leaf({4}, 0.2, 1.0)});
  // Zero vector: p = 2 gives a zero gradient; p = 1 uses the subgradient sign(0) = 0.
  Tensor z = zeros({3}, {.dtype = DType::f64}).requires_grad_();
  norm(z).backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0, 0, 0});
  Tensor y = tensor({0, -2, 3}, {}, {.dtype = DType::f64}).requires_grad_();
  norm(y, 1.0).backward();
  CHECK(y.grad().to_vector<double>() == std::vector<double>{0, -1, 1});
}
