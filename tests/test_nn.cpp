// Neural-network functions: forward values against float64 references computed here,
// f32/bf16 tolerances, error types, determinism, and finite-difference gradient checks.
#include <cmath>
#include <optional>

#include "libgenesis/autograd/autocast.h"
#include "tests/testing.h"

using namespace genesis;
using testing::gradcheck;
using testing::rand_leaf;
using testing::require_close;

namespace {

// Sizes of a shape seen as [outer, shape[axis], inner].
struct Split {
  int64_t outer = 1, dim = 1, inner = 1;
};
Split split_at(const Shape& shape, int64_t axis) {
  Split s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
    (d < axis ? s.outer : d == axis ? s.dim : s.inner) *= shape[static_cast<size_t>(d)];
  return s;
}

// (log_)softmax along `axis` in double, straight from the definition.
Tensor softmax_ref(const Tensor& x, int64_t axis, bool log) {
  std::vector<double> v = x.to_vector<double>(), out(v.size());
  Split s = split_at(x.shape(), axis);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      auto at = [&](int64_t d) { return static_cast<size_t>((o * s.dim + d) * s.inner + i); };
      double m = -INFINITY, total = 0;
      for (int64_t d = 0; d < s.dim; ++d) m = std::max(m, v[at(d)]);
      for (int64_t d = 0; d < s.dim; ++d) total += std::exp(v[at(d)] - m);
      for (int64_t d = 0; d < s.dim; ++d)
        out[at(d)] = log ? v[at(d)] - m - std::log(total) : std::exp(v[at(d)] - m) / total;
    }
  }
  return from_vector(out, x.shape());
}

// Layer norm (centered) or RMS norm over the last `cols` elements of each row, in double.
Tensor norm_ref(const Tensor& x, int64_t cols, const Tensor& w, const Tensor& b, double eps, bool centered) {
  std::vector<double> v = x.to_vector<double>(), out(v.size());
  std::vector<double> wv = w.defined() ? w.to_vector<double>() : std::vector<double>();
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  for (size_t r = 0; r < v.size() / static_cast<size_t>(cols); ++r) {
    double* row = v.data() + r * static_cast<size_t>(cols);
    double mu = 0, sq = 0;
    if (centered) {
      for (int64_t c = 0; c < cols; ++c) mu += row[c];
      mu /= static_cast<double>(cols);
    }
    for (int64_t c = 0; c < cols; ++c) sq += (row[c] - mu) * (row[c] - mu);
    double rs = 1 / std::sqrt(sq / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) {
      double y = (row[c] - mu) * rs;
      if (!wv.empty()) y *= wv[static_cast<size_t>(c)];
      if (!bv.empty()) y += bv[static_cast<size_t>(c)];
      out[r * static_cast<size_t>(cols) + static_cast<size_t>(c)] = y;
    }
  }
  return from_vector(out, x.shape());
}

Tensor indices64(std::vector<int64_t> v, const Shape& shape) {
  return from_vector(v, shape);
}

}  // namespace

TEST_CASE("softmax and log_softmax match the float64 definition", "[cpu][nn]") {
  struct Case {
    Shape shape;
    int64_t axis;
  };
  // Last axis (short, and long with a tail past the 16 lanes), first axis, a middle axis, a middle
  // axis wider than one column block, size-1 axis.
  for (const Case& c : {Case{{3, 5}, 1}, Case{{3, 1037}, -1}, Case{{3, 5}, 0}, Case{{2, 3, 4}, 1}, Case{{2, 7, 37}, -2},
                        Case{{4, 1, 3}, 1}, Case{{5}, 0}}) {
    Tensor x = testing::rand_values(c.shape, DType::f64, -3, 3);
    const int64_t axis = c.axis < 0 ? c.axis + x.dim() : c.axis;
    for (bool log : {false, true}) {
      INFO("shape " << shape_str(c.shape) << " axis " << c.axis << (log ? " log_softmax" : " softmax"));
      auto op = [&](const Tensor& t) { return log ? log_softmax(t, c.axis) : softmax(t, c.axis); };
      Tensor want = softmax_ref(x, axis, log);
      require_close(op(x), want, 1e-12, 1e-12);
      require_close(op(x.to(DType::f32)), want, 1e-5, 1e-6);
      Tensor xb = x.to(DType::bf16);
      Tensor yb = op(xb);
      CHECK(yb.dtype() == DType::bf16);
      require_close(yb.to(DType::f64), softmax_ref(xb.to(DType::f64), axis, log), 1e-2, 1e-2);
      require_close(op(x.to(DType::f16)).to(DType::f64), softmax_ref(x.to(DType::f16).to(DType::f64), axis, log), 2e-3,
                    2e-3);
    }
  }
  // Non-contiguous input.
  Tensor x = testing::rand_values({6, 4}, DType::f64, -2, 2);
  require_close(softmax(x.t(), 1), softmax_ref(x.t().contiguous(), 1, false), 1e-12, 1e-12);
  require_close(log_softmax(x.slice(0, 0, 6, 2), 0), softmax_ref(x.slice(0, 0, 6, 2).contiguous(), 0, true), 1e-12,
                1e-12);
  // A 0-d input normalizes over its single element.
  CHECK(softmax(scalar_tensor(3.0), 0).item() == 1.0);
  CHECK(log_softmax(scalar_tensor(3.0), -1).item() == 0.0);
}

TEST_CASE("softmax stays finite for large inputs", "[cpu][nn]") {
  Tensor x = tensor({1000, 999, -1000, 1000}, {1, 4});
  Tensor y = softmax(x, 1);
  const double e = std::exp(-1.0);
  require_close(y, tensor({1 / (2 + e), e / (2 + e), 0, 1 / (2 + e)}, {1, 4}), 1e-6, 1e-7);
  Tensor ly = log_softmax(x, 1);
  for (double v : ly.to_vector<double>()) CHECK(std::isfinite(v));
  CHECK(ly.to_vector<double>()[0] == Approx(-std::log(2 + e)).margin(1e-4));
  for (double v : softmax(x.to(DType::bf16), 1).to_vector<double>()) CHECK(std::isfinite(v));
}

TEST_CASE("softmax rejects bad arguments", "[cpu][nn]") {
  CHECK_THROWS_AS(softmax(from_vector(std::vector<int64_t>{1, 2}, {2}), 0), DTypeError);
  CHECK_THROWS_AS(softmax(tensor({1, 2}), 1), IndexError);
  CHECK_THROWS_AS(log_softmax(tensor({1, 2, 3, 4}, {2, 2}), -3), IndexError);
  CHECK_THROWS_AS(softmax(Tensor(), 0), ValueError);
}

TEST_CASE("softmax backward of a large batch runs in parallel with per-row results", "[cpu][nn]") {
  Tensor x = testing::rand_values({300, 257}, DType::f64).requires_grad_();
  Tensor w = testing::rand_values({300, 257}, DType::f64);
  sum(mul(softmax(x, 1), w)).backward();
  // d/dx sum(softmax(x) * w) = y * (w - sum(w * y)) row by row.
  Tensor y = softmax_ref(x.detach(), 1, false);
  auto yv = y.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> want(yv.size());
  for (size_t r = 0; r < 300; ++r) {
    double dot = 0;
    for (size_t c = 0; c < 257; ++c) dot += yv[r * 257 + c] * wv[r * 257 + c];
    for (size_t c = 0; c < 257; ++c) want[r * 257 + c] = yv[r * 257 + c] * (wv[r * 257 + c] - dot);
  }
  require_close(x.grad(), from_vector(want, {300, 257}), 1e-10, 1e-12);
}

GENESIS_GRADCHECK("softmax") {
  Tensor a = rand_leaf({3, 5}, -2, 2);
  gradcheck([](const TensorList& in) { return softmax(in[0], 1); }, {a});
  gradcheck([](const TensorList& in) { return softmax(in[0], 0); }, {a});
  gradcheck([](const TensorList& in) { return softmax(in[0].t(), -1); }, {a});
  Tensor b = rand_leaf({2, 3, 4}, -2, 2);
  gradcheck([](const TensorList& in) { return softmax(in[0], 1); }, {b});
  gradcheck([](const TensorList& in) { return softmax(in[0].slice(2, 0, 4, 2), 2); }, {b});
  Tensor c = rand_leaf({2, 1, 3});
  gradcheck([](const TensorList& in) { return softmax(in[0], 1); }, {c});
}

GENESIS_GRADCHECK("log_softmax") {
  Tensor a = rand_leaf({3, 5}, -2, 2);
  gradcheck([](const TensorList& in) { return log_softmax(in[0], 1); }, {a});
  gradcheck([](const TensorList& in) { return log_softmax(in[0], 0); }, {a});
  gradcheck([](const TensorList& in) { return log_softmax(in[0].t(), 1); }, {a});
  Tensor b = rand_leaf({2, 3, 4}, -2, 2);
  gradcheck([](const TensorList& in) { return log_softmax(in[0], -2); }, {b});
  Tensor c = rand_leaf({2, 1, 3});
  gradcheck([](const TensorList& in) { return log_softmax(in[0], 1); }, {c});
}

TEST_CASE("layer_norm and rms_norm match the float64 definition", "[cpu][nn]") {
  for (bool centered : {true, false}) {
    INFO((centered ? "layer_norm" : "rms_norm"));
    auto op = [&](const Tensor& x, const Shape& ns, const Tensor& w, const Tensor& b, double eps) {
      return centered ? layer_norm(x, ns, w, b, eps) : rms_norm(x, ns, w, eps);
    };
    Tensor x = testing::rand_values({4, 6}, DType::f64, -2, 3);
    Tensor w = testing::rand_values({6}, DType::f64, 0.5, 1.5);
    Tensor b = centered ? testing::rand_values({6}, DType::f64) : Tensor();
    Tensor want = norm_ref(x, 6, w, b, 1e-5, centered);
    require_close(op(x, {6}, w, b, 1e-5), want, 1e-12, 1e-12);
    require_close(op(x.to(DType::f32), {6}, w.to(DType::f32), b.defined() ? b.to(DType::f32) : b, 1e-5), want, 1e-5,
                  1e-5);
    Tensor xb = x.to(DType::bf16), wb = w.to(DType::bf16), bb = b.defined() ? b.to(DType::bf16) : b;
    Tensor yb = op(xb, {6}, wb, bb, 1e-5);
    CHECK(yb.dtype() == DType::bf16);
    Tensor bb64 = bb.defined() ? bb.to(DType::f64) : bb;
    require_close(yb.to(DType::f64), norm_ref(xb.to(DType::f64), 6, wb.to(DType::f64), bb64, 1e-5, centered), 2e-2,
                  2e-2);
    // Two normalized dimensions, no affine parameters, a large eps, a transposed input.
    Tensor x3 = testing::rand_values({2, 3, 4}, DType::f64);
    require_close(op(x3, {3, 4}, Tensor(), Tensor(), 0.5), norm_ref(x3, 12, Tensor(), Tensor(), 0.5, centered), 1e-12,
                  1e-12);
    Tensor xt = x.t();
    require_close(op(xt, {4}, Tensor(), Tensor(), 1e-5),
                  norm_ref(xt.contiguous(), 4, Tensor(), Tensor(), 1e-5, centered), 1e-12, 1e-12);
  }
  // Rows of a constant stay finite: (x - mean) = 0 times rsqrt(eps).
  Tensor c = full({2, 5}, 3.0);
  for (double v : layer_norm(c, {5}).to_vector<double>()) CHECK(v == 0.0);
}

TEST_CASE("layer_norm and rms_norm reject bad arguments", "[cpu][nn]") {
  Tensor x = testing::rand_values({2, 3, 4});
  CHECK_THROWS_AS(layer_norm(x, {3}), ShapeError);
  CHECK_THROWS_AS(layer_norm(x, {}), ShapeError);
  CHECK_THROWS_AS(layer_norm(x, {1, 2, 3, 4}), ShapeError);
  CHECK_THROWS_AS(layer_norm(x, {4}, ones({3})), ShapeError);
  CHECK_THROWS_AS(layer_norm(x, {4}, ones({4}), zeros({4, 1})), ShapeError);
  CHECK_THROWS_AS(layer_norm(x, {4}, ones({4}, {.dtype = DType::f64})), DTypeError);
  CHECK_THROWS_AS(rms_norm(x, {3, 5}), ShapeError);
  CHECK_THROWS_AS(rms_norm(x, {4}, ones({4}, {.dtype = DType::bf16})), DTypeError);
  CHECK_THROWS_AS(layer_norm(x, {4}, ones({4}), ones({4}, {.dtype = DType::bf16})), DTypeError);
  CHECK_THROWS_AS(rms_norm(from_vector(std::vector<int32_t>{1, 2}, {2}), {2}), DTypeError);
  CHECK_THROWS_AS(layer_norm(x, {4}, Tensor(), Tensor(), -1.0), ValueError);
}

TEST_CASE("norm backward sums weight gradients deterministically over many rows", "[cpu][nn]") {
  // 300 rows spread over the fixed row chunks; the weight/bias gradients must match a
  // float64 reference and be bitwise repeatable.
  Tensor x = testing::rand_values({300, 33}, DType::f32);
  Tensor w = testing::rand_values({33}, DType::f32, 0.5, 1.5).requires_grad_();
  Tensor b = zeros({33}).requires_grad_();
  Tensor g = testing::rand_values({300, 33}, DType::f32);
  auto grads = [&]() {
    w.set_grad(Tensor());
    b.set_grad(Tensor());
    layer_norm(x, {33}, w, b).backward(g);
    return std::pair{w.grad().to_vector<float>(), b.grad().to_vector<float>()};
  };
  auto first = grads();
  auto second = grads();
  CHECK(first.first == second.first);
  CHECK(first.second == second.second);
  Tensor xhat = norm_ref(x.to(DType::f64), 33, Tensor(), Tensor(), 1e-5, true);
  require_close(w.grad(), sum(mul(xhat, g.to(DType::f64)), {0}).to(DType::f32), 1e-4, 1e-4);
  require_close(b.grad(), sum(g, {0}), 1e-5, 1e-5);
  // The bf16 backward accumulates in f32: close to the f64 gradient of the rounded inputs.
  Tensor xb = x.to(DType::bf16).requires_grad_();
  Tensor x64 = xb.detach().to(DType::f64).requires_grad_();
  rms_norm(xb, {33}).backward(g.to(DType::bf16));
  rms_norm(x64, {33}).backward(g.to(DType::bf16).to(DType::f64));
  require_close(xb.grad().to(DType::f64), x64.grad(), 3e-2, 3e-2);
}

TEST_CASE("layer_norm and rms_norm read f32 parameters with any x and write the autocast dtype", "[cpu][nn]") {
  // Tolerance of a result rounded to `dtype` against its float64 value.
  auto tolerance = [](DType dtype) { return dtype == DType::bf16 ? 3e-2 : dtype == DType::f16 ? 4e-3 : 1e-4; };
  for (bool centered : {true, false}) {
    for (DType x_dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (std::optional<DType> autocast :
           {std::optional<DType>(), std::optional(DType::bf16), std::optional(DType::f16)}) {
        for (bool transposed : {false, true}) {
          const DType y_dtype = autocast.value_or(x_dtype);
          INFO((centered ? "layer_norm" : "rms_norm")
               << ", x " << dtype_name(x_dtype) << ", autocast " << (autocast ? dtype_name(*autocast) : "off")
               << (transposed ? ", transposed x" : ""));
          // Odd sizes; the transposed input [7, 37] is read through strides.
          Tensor x = testing::rand_values(transposed ? Shape{37, 7} : Shape{7, 37}, x_dtype, -2, 3).requires_grad_();
          Tensor w = testing::rand_values({37}, DType::f32, 0.5, 1.5).requires_grad_();
          Tensor b = centered ? testing::rand_values({37}, DType::f32, -1, 1).requires_grad_() : Tensor();
          auto op = [&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
            const Tensor input = transposed ? xi.t() : xi;
            return centered ? layer_norm(input, {37}, wi, bi, 1e-5) : rms_norm(input, {37}, wi, 1e-5);
          };
          Tensor y;
          {
            AutocastGuard guard(autocast);
            y = op(x, w, b);
          }
          REQUIRE(y.dtype() == y_dtype);
          // No cast of x or the parameters: the norm's inputs are the leaves (or x's transpose).
          for (const Edge& edge : y.grad_fn()->next_edges) CHECK((!edge.node || edge.node->name() != "to_dtype"));
          // The float64 definition on the same (rounded) values, forward and backward.
          Tensor x64 = x.detach().to(DType::f64).requires_grad_(), w64 = w.detach().to(DType::f64).requires_grad_();
          Tensor b64 = centered ? b.detach().to(DType::f64).requires_grad_() : Tensor();
          Tensor y64 = op(x64, w64, b64);
          require_close(y.to(DType::f64), y64, tolerance(y_dtype), tolerance(y_dtype));
          Tensor g = testing::rand_values(y.shape(), y_dtype);
          y.backward(g);
          y64.backward(g.to(DType::f64));
          REQUIRE(x.grad().dtype() == x_dtype);
          REQUIRE(w.grad().dtype() == DType::f32);
          require_close(x.grad().to(DType::f64), x64.grad(), tolerance(x_dtype), tolerance(x_dtype));
          require_close(w.grad().to(DType::f64), w64.grad(), 1e-4, 1e-4);
          if (centered) {
            REQUIRE(b.grad().dtype() == DType::f32);
            require_close(b.grad().to(DType::f64), b64.grad(), 1e-4, 1e-4);
          }
        }
      }
    }
  }
}

TEST_CASE("under autocast a norm casts parameters the kernels cannot pair with x, never x", "[cpu][nn]") {
  AutocastGuard autocast(DType::bf16);
  Tensor x = testing::rand_values({3, 8}, DType::f32), w = testing::rand_values({8}, DType::bf16, 0.5, 1.5);
  Tensor y = rms_norm(x, {8}, w);
  CHECK(y.dtype() == DType::bf16);
  require_close(y, rms_norm(x, {8}, w.to(DType::f32)), 0.0, 0.0);
  // f64 stays f64 under autocast; its parameters must be f64 too.
  CHECK(layer_norm(x.to(DType::f64), {8}).dtype() == DType::f64);
  CHECK_THROWS_AS(layer_norm(x.to(DType::f64), {8}, w.to(DType::f32)), DTypeError);
}

GENESIS_GRADCHECK("layer_norm") {
  Tensor x = rand_leaf({4, 6}, -2, 2), w = rand_leaf({6}, 0.5, 1.5), b = rand_leaf({6});
  gradcheck([](const TensorList& in) { return layer_norm(in[0], {6}, in[1], in[2]); }, {x, w, b});
  Tensor x3 = rand_leaf({2, 3, 4}), w2 = rand_leaf({3, 4}, 0.5, 1.5);
  gradcheck([](const TensorList& in) { return layer_norm(in[0], {3, 4}, in[1]); }, {x3, w2});
  gradcheck([](const TensorList& in) { return layer_norm(in[0].transpose(1, 2), {3}, Tensor(), Tensor(), 0.1); }, {x3});
  Tensor many = rand_leaf({70, 3}), w3 = rand_leaf({3}, 0.5, 1.5), b3 = rand_leaf({3});
  gradcheck([](const TensorList& in) { return layer_norm(in[0], {3}, in[1], in[2]); }, {many, w3, b3});
}

GENESIS_GRADCHECK("rms_norm") {
  Tensor x = rand_leaf({4, 6}, -2, 2), w = rand_leaf({6}, 0.5, 1.5);
  gradcheck([](const TensorList& in) { return rms_norm(in[0], {6}, in[1]); }, {x, w});
  Tensor x3 = rand_leaf({2, 3, 4});
  gradcheck([](const TensorList& in) { return rms_norm(in[0], {3, 4}); }, {x3});
  gradcheck([](const TensorList& in) { return rms_norm(in[0].transpose(1, 2), {3}, Tensor(), 0.1); }, {x3});
  Tensor many = rand_leaf({70, 3}), w3 = rand_leaf({3}, 0.5, 1.5);
  gradcheck([](const TensorList& in) { return rms_norm(in[0], {3}, in[1]); }, {many, w3});
}

TEST_CASE("embedding gathers rows and validates indices", "[cpu][nn]") {
  Tensor w = arange(0.0, 12.0, 1.0).view({4, 3});
  Tensor idx = indices64({3, 0, 3, 1, 2, 0}, {2, 3});
  Tensor out = embedding(idx, w);
  CHECK(out.shape() == Shape{2, 3, 3});
  CHECK(out.to_vector<float>() == std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11, 3, 4, 5, 6, 7, 8, 0, 1, 2});
  CHECK(embedding(idx.to(DType::i32), w.to(DType::bf16)).to(DType::f32).to_vector<float>() == out.to_vector<float>());
  CHECK(embedding(indices64({2}, {}), w).to_vector<float>() == std::vector<float>{6, 7, 8});
  CHECK(embedding(idx.t(), w.t().contiguous().t()).shape() == Shape{3, 2, 3});
  CHECK_THROWS_AS(embedding(indices64({0, 4}, {2}), w), IndexError);
  CHECK_THROWS_WITH(embedding(indices64({0, 4}, {2}), w),
                    Catch::Contains("index 4") && Catch::Contains("4 embeddings"));
  CHECK_THROWS_AS(embedding(indices64({-1}, {1}), w), IndexError);
  CHECK_THROWS_AS(embedding(tensor({0, 1}), w), DTypeError);
  CHECK_THROWS_AS(embedding(idx, tensor({1, 2, 3})), ShapeError);
  CHECK_THROWS_AS(embedding(idx, w.to(DType::i64)), DTypeError);
  CHECK_THROWS_AS(embedding(idx, w, 4), ValueError);
  CHECK_THROWS_AS(embedding(idx, w, -5), ValueError);
}

TEST_CASE("embedding backward accumulates repeated indices and skips padding_idx", "[cpu][nn]") {
  Tensor w = testing::rand_values({5, 2}, DType::f64).requires_grad_();
  Tensor idx = indices64({1, 3, 1, 1, 0, 3}, {2, 3});
  Tensor g = arange(0.0, 12.0, 1.0, {.dtype = DType::f64}).view({2, 3, 2});
  embedding(idx, w, 3).backward(g);
  // Row 1 picked at positions 0, 2, 3; row 0 at 4; row 3 is padding; rows 2 and 4 unused.
  CHECK(w.grad().to_vector<double>() == std::vector<double>{8, 9, 0 + 4 + 6, 1 + 5 + 7, 0, 0, 0, 0, 0, 0});
  w.set_grad(Tensor());
  embedding(idx, w, -2).backward(g);  // -2 is row 3 as well
  CHECK(w.grad().to_vector<double>()[6] == 0.0);
  // Many repeats across a large batch: same sums as a float64 reference, every run.
  Tensor big_w = testing::rand_values({7, 5}, DType::f32).requires_grad_();
  Tensor big_idx = randint(0, 7, {4000});
  Tensor big_g = testing::rand_values({4000, 5}, DType::f32);
  embedding(big_idx, big_w).backward(big_g);
  std::vector<float> first = big_w.grad().to_vector<float>();
  big_w.set_grad(Tensor());
  embedding(big_idx, big_w).backward(big_g);
  CHECK(big_w.grad().to_vector<float>() == first);
  std::vector<double> want(35, 0.0);
  auto iv = big_idx.to_vector<int64_t>();
  auto gv = big_g.to_vector<double>();
  for (size_t i = 0; i < iv.size(); ++i)
    for (size_t c = 0; c < 5; ++c) want[static_cast<size_t>(iv[i]) * 5 + c] += gv[i * 5 + c];
  require_close(big_w.grad(), from_vector(want, {7, 5}), 1e-5, 1e-4);
}

GENESIS_GRADCHECK("embedding") {
  Tensor w = rand_leaf({5, 3});
  Tensor idx = indices64({4, 1, 1, 0, 4, 4}, {3, 2});
  gradcheck([idx](const TensorList& in) { return embedding(idx, in[0]); }, {w});
  // The padding row gets no gradient; it is picked here but held at zero (as a padding
  // row is kept in practice), so finite differences see no dependence on it either.
  Tensor not_padding = ne(arange(5, {.dtype = DType::i64}), 4.0).view({5, 1});
  gradcheck([idx, not_padding](const TensorList& in) { return embedding(idx, where(not_padding, in[0], 0.0), 4); },
            {w});
  gradcheck([idx](const TensorList& in) { return embedding(idx.t().to(DType::i32), in[0].t().contiguous().t()); }, {w});
  Tensor wt = rand_leaf({3, 5});
  gradcheck([idx](const TensorList& in) { return embedding(idx, in[0].t(), -2); }, {wt});
}

TEST_CASE("dropout masks, scales and reproduces with a generator", "[cpu][nn]") {
  Tensor x = testing::rand_values({64, 64}, DType::f32, 1, 2);
  CHECK(dropout(x, 0.0).is_same(x));
  CHECK(dropout(x, 0.7, false).is_same(x));
  Generator g1(123), g2(123);
  Tensor a = dropout(x, 0.25, true, &g1);
  Tensor b = dropout(x, 0.25, true, &g2);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(dropout(x, 0.25, true, &g1).to_vector<float>() != a.to_vector<float>());
  auto av = a.to_vector<double>(), xv = x.to_vector<double>();
  int64_t kept = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    if (av[i] == 0.0) continue;
    ++kept;
    CHECK(av[i] == Approx(xv[i] / 0.75).epsilon(1e-6));
  }
  CHECK(std::fabs(static_cast<double>(kept) / 4096.0 - 0.75) < 0.04);
  Tensor ones_all = ones({1000});
  CHECK(sum(dropout(ones_all, 1.0)).item() == 0.0);
  // bf16 scales in f32 and rounds once: kept values are bf16(1.5 / 0.9).
  Generator g3(5);
  for (double v : dropout(full({100}, 1.5, {.dtype = DType::bf16}), 0.1, true, &g3).to_vector<double>())
    CHECK((v == 0.0 || v == static_cast<double>(static_cast<float>(bfloat16(1.5f * static_cast<float>(1.0 / 0.9))))));
  CHECK_THROWS_AS(dropout(x, 1.5), ValueError);
  CHECK_THROWS_AS(dropout(x, -0.1), ValueError);
  CHECK_THROWS_AS(dropout(from_vector(std::vector<int64_t>{1}, {1}), 0.5), DTypeError);
}

TEST_CASE("dropout backward reuses the forward mask", "[cpu][nn]") {
  Tensor x = testing::rand_values({40, 30}, DType::f64, 1, 2).requires_grad_();
  Generator gen(9);
  Tensor y = dropout(x, 0.3, true, &gen);
  sum(y).backward();
  // Where kept, y = x / 0.7 and the gradient is 1 / 0.7; elsewhere both are zero.
  auto yv = y.to_vector<double>(), gv = x.grad().to_vector<double>();
  for (size_t i = 0; i < yv.size(); ++i) {
    if (yv[i] == 0.0)
      CHECK(gv[i] == 0.0);
    else
      CHECK(gv[i] == Approx(1 / 0.7));
  }
  Tensor z = ones({10}, {.dtype = DType::f64}).requires_grad_();
  sum(dropout(z, 1.0)).backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>(10, 0.0));
}

GENESIS_GRADCHECK("dropout") {
  Tensor x = rand_leaf({6, 7});
  gradcheck(
      [](const TensorList& in) {
        Generator g(7);
        return dropout(in[0], 0.4, true, &g);
      },
      {x});
  gradcheck(
      [](const TensorList& in) {
        Generator g(11);
        return dropout(in[0].t(), 0.5, true, &g);
      },
      {x});
}

TEST_CASE("one_hot encodes class indices", "[cpu][nn]") {
  Tensor idx = indices64({2, 0, 1, 2}, {2, 2});
  Tensor oh = one_hot(idx);
  CHECK(oh.dtype() == DType::i64);
  CHECK(oh.shape() == Shape{2, 2, 3});
  CHECK(oh.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(one_hot(idx.to(DType::i32), 5).shape() == Shape{2, 2, 5});
  CHECK(one_hot(indices64({1}, {}), 2).to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(one_hot(idx.t(), 3).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 1});
  CHECK(one_hot(empty({0}, {.dtype = DType::i64}), 4).shape() == Shape{0, 4});
  CHECK_THROWS_AS(one_hot(idx, 2), IndexError);
  CHECK_THROWS_WITH(one_hot(idx, 2), Catch::Contains("index 2") && Catch::Contains("2 classes"));
  CHECK_THROWS_AS(one_hot(indices64({0, -1}, {2})), IndexError);
  CHECK_THROWS_AS(one_hot(indices64({0, -1}, {2}), 3), IndexError);
  CHECK_THROWS_AS(one_hot(empty({0}, {.dtype = DType::i64})), ValueError);
  CHECK_THROWS_AS(one_hot(tensor({1.0})), DTypeError);
}
