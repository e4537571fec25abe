// Convolution and pooling: conv2d against a direct float64 convolution loop, pools against
// hand-computed cases, dtype and bad-input behaviour, and finite-difference gradient checks.
#include <cmath>
#include <vector>

#include "tests/testing.h"

using namespace genesis;
using testing::gradcheck;
using testing::rand_leaf;

namespace {

// Direct convolution in double: y[n, co, oh, ow] = b[co] + sum x[n, ci, ih, iw] * w[co, ci - group start, ki, kj].
Tensor conv2d_reference(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dOptions& o) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t CO = w.size(0), CG = w.size(1), KH = w.size(2), KW = w.size(3);
  const int64_t OH = (H + 2 * o.padding[0] - o.dilation[0] * (KH - 1) - 1) / o.stride[0] + 1;
  const int64_t OW = (W + 2 * o.padding[1] - o.dilation[1] * (KW - 1) - 1) / o.stride[1] + 1;
  const int64_t out_per_group = CO / o.groups;
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(static_cast<size_t>(CO), 0.0);
  std::vector<double> y(static_cast<size_t>(N * CO * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t co = 0; co < CO; ++co)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = bv[static_cast<size_t>(co)];
          for (int64_t cg = 0; cg < CG; ++cg)
            for (int64_t ki = 0; ki < KH; ++ki)
              for (int64_t kj = 0; kj < KW; ++kj) {
                const int64_t ci = (co / out_per_group) * CG + cg;
                const int64_t ih = oh * o.stride[0] - o.padding[0] + ki * o.dilation[0];
                const int64_t iw = ow * o.stride[1] - o.padding[1] + kj * o.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += xv[static_cast<size_t>(((n * C + ci) * H + ih) * W + iw)] *
                       wv[static_cast<size_t>(((co * CG + cg) * KH + ki) * KW + kj)];
              }
          y[static_cast<size_t>(((n * CO + co) * OH + oh) * OW + ow)] = acc;
        }
  return from_vector(y, {N, CO, OH, OW});
}

struct ConvCase {
  Shape x, w;
  Conv2dOptions options;
};

// Distinct values spaced far beyond the finite-difference step, so max pooling has no near-ties.
Tensor distinct_leaf(const Shape& shape) {
  const int64_t n = numel_of(shape);
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<double>((i * 7919) % n) * 0.05 - 1.0;
  Tensor t = from_vector(values, shape);
  t.requires_grad_(true);
  return t;
}

Tensor small_image() { return tensor({1, -2, 3, 4, 5, -6, -7, 8, 9}, {1, 1, 3, 3}, {.dtype = DType::f64}); }

}  // namespace

TEST_CASE("conv2d matches a direct convolution", "[cpu][conv]") {
  const std::vector<ConvCase> cases = {
      {{2, 4, 5, 7}, {6, 4, 3, 3}, {}},
      {{2, 4, 5, 7}, {6, 2, 3, 3}, {.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}, .groups = 2}},
      {{1, 3, 6, 5}, {4, 3, 2, 3}, {.stride = {3, 2}, .padding = {0, 1}}},
      {{2, 4, 5, 7}, {5, 4, 1, 1}, {}},                                // pointwise: the input is the column matrix
      {{2, 4, 5, 7}, {8, 1, 3, 3}, {.padding = {1, 1}, .groups = 4}},  // depthwise
      {{1, 2, 4, 4}, {3, 2, 1, 1}, {.stride = {2, 2}, .padding = {1, 0}}},
  };
  for (const ConvCase& c : cases) {
    for (bool with_bias : {false, true}) {
      INFO("input " << shape_str(c.x) << ", weight " << shape_str(c.w) << ", bias " << with_bias);
      Tensor x = testing::rand_values(c.x, DType::f64);
      Tensor w = testing::rand_values(c.w, DType::f64);
      Tensor b = with_bias ? testing::rand_values({c.w[0]}, DType::f64) : Tensor();
      Tensor want = conv2d_reference(x, w, b, c.options);
      testing::require_close(conv2d(x, w, b, c.options), want, 1e-12, 1e-12);
      Tensor b32 = with_bias ? b.to(DType::f32) : Tensor();
      Tensor y32 = conv2d(x.to(DType::f32), w.to(DType::f32), b32, c.options);
      CHECK(y32.dtype() == DType::f32);
      testing::require_close(y32, want, 1e-4, 1e-5);
      for (DType half : {DType::bf16, DType::f16}) {
        Tensor xh = x.to(half), wh = w.to(half), bh = with_bias ? b.to(half) : Tensor();
        Tensor yh = conv2d(xh, wh, bh, c.options);
        CHECK(yh.dtype() == half);
        Tensor bh64 = with_bias ? bh.to(DType::f64) : Tensor();
        Tensor rounded_ref = conv2d_reference(xh.to(DType::f64), wh.to(DType::f64), bh64, c.options);
        testing::require_close(yh, rounded_ref, 2e-2, 2e-2);
      }
    }
  }
}

TEST_CASE("conv2d reads non-contiguous inputs and takes the parallel path", "[cpu][conv]") {
  Tensor x = testing::rand_values({2, 16, 33, 31}, DType::f64);
  Tensor w = testing::rand_values({8, 16, 3, 3}, DType::f64);
  Tensor b = testing::rand_values({8}, DType::f64);
  Conv2dOptions o{.padding = {1, 1}};
  testing::require_close(conv2d(x, w, b, o), conv2d_reference(x, w, b, o), 1e-11, 1e-11);
  Tensor xt = x.transpose(2, 3).contiguous().transpose(2, 3);  // same values, transposed strides
  REQUIRE_FALSE(xt.is_contiguous());
  testing::require_close(conv2d(xt, w, b, o), conv2d_reference(x, w, b, o), 1e-11, 1e-11);
  Tensor empty_batch = conv2d(zeros({0, 16, 5, 5}, {.dtype = DType::f64}), w);
  CHECK(empty_batch.shape() == Shape{0, 8, 3, 3});
}

TEST_CASE("conv2d splits large batches into blocks of samples", "[cpu][conv]") {
  // About 1.2M column entries per sample: the 5 samples run as blocks of 3 and 2.
  Tensor x = testing::rand_values({5, 32, 64, 64}, DType::f64);
  Tensor w = testing::rand_values({2, 32, 3, 3}, DType::f64);
  Tensor gy = testing::rand_values({5, 2, 64, 64}, DType::f64);
  Conv2dOptions o{.padding = {1, 1}};
  Tensor xl = x.clone().requires_grad_(), wl = w.clone().requires_grad_();
  Tensor y = conv2d(xl, wl, Tensor(), o);
  testing::require_close(y, conv2d_reference(x, w, Tensor(), o), 1e-11, 1e-11);
  sum(mul(y, gy)).backward();
  // Sample by sample (one block each), the input gradients match and the weight gradients add up.
  Tensor w_total = zeros({2, 32, 3, 3}, {.dtype = DType::f64});
  for (int64_t n = 0; n < 5; ++n) {
    Tensor xn = x.narrow(0, n, 1).clone().requires_grad_(), wn = w.clone().requires_grad_();
    sum(mul(conv2d(xn, wn, Tensor(), o), gy.narrow(0, n, 1))).backward();
    testing::require_close(xl.grad().narrow(0, n, 1), xn.grad(), 1e-11, 1e-11);
    w_total = add(w_total, wn.grad());
  }
  testing::require_close(wl.grad(), w_total, 1e-10, 1e-10);
}

TEST_CASE("conv2d backward for half types and empty batches", "[cpu][conv]") {
  Tensor x = testing::rand_values({2, 2, 5, 5}, DType::f32);
  Tensor w = testing::rand_values({4, 2, 3, 3}, DType::f32);
  Tensor x64 = x.to(DType::f64).requires_grad_(), w64 = w.to(DType::f64).requires_grad_();
  sum(conv2d(x64, w64)).backward();
  Tensor xh = x.to(DType::bf16).requires_grad_(), wh = w.to(DType::bf16).requires_grad_();
  sum(conv2d(xh, wh)).backward();
  CHECK(xh.grad().dtype() == DType::bf16);
  testing::require_close(xh.grad(), x64.grad(), 5e-2, 5e-2);
  testing::require_close(wh.grad(), w64.grad(), 5e-2, 5e-2);

  Tensor xe = zeros({0, 2, 5, 5}, {.dtype = DType::f64}).requires_grad_();
  Tensor we = testing::rand_values({4, 2, 3, 3}, DType::f64).requires_grad_();
  sum(conv2d(xe, we)).backward();
  testing::require_close(we.grad(), zeros({4, 2, 3, 3}, {.dtype = DType::f64}));
}

TEST_CASE("conv2d rejects bad arguments", "[cpu][conv]") {
  Tensor x = zeros({1, 4, 5, 5});
  Tensor w = zeros({6, 2, 3, 3});
  CHECK_THROWS_AS(conv2d(zeros({4, 5, 5}), w, Tensor(), {.groups = 2}), ShapeError);
  CHECK_THROWS_AS(conv2d(x, zeros({6, 2, 3})), ShapeError);
  CHECK_THROWS_AS(conv2d(x, w), ShapeError);  // 2 * groups(1) != 4 input channels
  CHECK_THROWS_AS(conv2d(x, zeros({6, 1, 3, 3}), Tensor(), {.groups = 4}), ShapeError);  // 6 % 4 != 0
  CHECK_THROWS_AS(conv2d(x, w, zeros({5}), {.groups = 2}), ShapeError);
  CHECK_THROWS_AS(conv2d(x, zeros({6, 4, 7, 3})), ShapeError);  // kernel taller than the input
  CHECK_THROWS_AS(conv2d(x, zeros({6, 4, 3, 3}), Tensor(), {.dilation = {3, 1}}), ShapeError);
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {.groups = 0}), ValueError);
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {.stride = {0, 1}, .groups = 2}), ValueError);
  CHECK_THROWS_AS(conv2d(x, w, Tensor(), {.padding = {-1, 0}, .groups = 2}), ValueError);
  CHECK_THROWS_AS(conv2d(x, w.to(DType::f64), Tensor(), {.groups = 2}), DTypeError);
  CHECK_THROWS_AS(conv2d(x.to(DType::i64), w.to(DType::i64), Tensor(), {.groups = 2}), DTypeError);
  CHECK_THROWS_AS(conv2d(x, Tensor()), ValueError);
  CHECK(conv2d(x, w, Tensor(), {.groups = 2}).shape() == Shape{1, 6, 3, 3});
}

TEST_CASE("max_pool2d forward on small cases", "[cpu][conv]") {
  Tensor x = small_image();
  testing::require_close(max_pool2d(x, {.kernel = {2, 2}, .stride = {1, 1}}), tensor({5, 5, 8, 9}, {1, 1, 2, 2}));
  // Padding acts as -inf: windows at the border keep their real maximum.
  testing::require_close(max_pool2d(x, {.kernel = {2, 2}, .stride = {2, 2}, .padding = {1, 1}}),
                         tensor({1, 3, 4, 9}, {1, 1, 2, 2}));
  Tensor negative = tensor({-1, -2, -3, -4}, {1, 1, 2, 2});
  testing::require_close(max_pool2d(negative, {.kernel = {2, 2}, .stride = {1, 1}, .padding = {1, 1}}),
                         tensor({-1, -1, -2, -1, -1, -2, -3, -3, -4}, {1, 1, 3, 3}));
  // Default stride equals the kernel; two planes pool independently.
  Tensor planes = arange(0, 32, 1).reshape({1, 2, 4, 4});
  testing::require_close(max_pool2d(planes), tensor({5, 7, 13, 15, 21, 23, 29, 31}, {1, 2, 2, 2}));
  testing::require_close(max_pool2d(planes, {.kernel = {1, 4}}), tensor({3, 7, 11, 15, 19, 23, 27, 31}, {1, 2, 4, 1}));
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor y = max_pool2d(x.to(dt), {.kernel = {2, 2}, .stride = {1, 1}});
    CHECK(y.dtype() == dt);
    testing::require_close(y, tensor({5, 5, 8, 9}, {1, 1, 2, 2}));
  }
  testing::require_close(max_pool2d(x.transpose(2, 3), {.kernel = {2, 2}, .stride = {1, 1}}),
                         tensor({5, 8, 5, 9}, {1, 1, 2, 2}));
}

TEST_CASE("max_pool2d routes the gradient to the first maximum", "[cpu][conv]") {
  Tensor x = small_image().requires_grad_();
  sum(max_pool2d(x, {.kernel = {2, 2}, .stride = {1, 1}})).backward();
  testing::require_close(x.grad(), tensor({0, 0, 0, 0, 2, 0, 0, 1, 1}, {1, 1, 3, 3}, {.dtype = DType::f64}));
  Tensor ties = ones({1, 1, 2, 3}, {.dtype = DType::f64}).requires_grad_();
  sum(max_pool2d(ties, {.kernel = {2, 2}, .stride = {1, 1}})).backward();
  testing::require_close(ties.grad(), tensor({1, 1, 0, 0, 0, 0}, {1, 1, 2, 3}, {.dtype = DType::f64}));
  Tensor with_nan = tensor({1, NAN, 3, 2}, {1, 1, 2, 2});
  CHECK(std::isnan(max_pool2d(with_nan).item()));
}

TEST_CASE("avg_pool2d forward and backward on small cases", "[cpu][conv]") {
  Tensor x = small_image();
  testing::require_close(avg_pool2d(x, {.kernel = {2, 2}, .stride = {1, 1}}), tensor({2, 0, 2.5, 4}, {1, 1, 2, 2}));
  // Padding counts as zeros in the divisor (count_include_pad).
  testing::require_close(avg_pool2d(x, {.kernel = {2, 2}, .stride = {2, 2}, .padding = {1, 1}}),
                         tensor({0.25, 0.25, -0.75, 4}, {1, 1, 2, 2}));
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor y = avg_pool2d(x.to(dt), {.kernel = {2, 2}, .stride = {1, 1}});
    CHECK(y.dtype() == dt);
    testing::require_close(y, tensor({2, 0, 2.5, 4}, {1, 1, 2, 2}));
  }
  Tensor leaf = small_image().requires_grad_();
  sum(avg_pool2d(leaf, {.kernel = {2, 2}, .stride = {1, 1}})).backward();
  testing::require_close(leaf.grad(), tensor({0.25, 0.5, 0.25, 0.5, 1, 0.5, 0.25, 0.5, 0.25}, {1, 1, 3, 3}));
  Tensor padded = small_image().requires_grad_();
  sum(avg_pool2d(padded, {.kernel = {2, 2}, .stride = {2, 2}, .padding = {1, 1}})).backward();
  testing::require_close(padded.grad(), full({1, 1, 3, 3}, 0.25));
}

TEST_CASE("pooling on large inputs matches the small-case formulas", "[cpu][conv]") {
  // Big enough for the parallel path; a 1x1 window makes both pools the identity.
  Tensor x = testing::rand_values({4, 8, 64, 65}, DType::f32);
  testing::require_close(max_pool2d(x, {.kernel = {1, 1}}), x);
  testing::require_close(avg_pool2d(x, {.kernel = {1, 1}}), x);
  Tensor pooled = avg_pool2d(x, {.kernel = {2, 5}});
  Tensor by_sum = div(sum(x.narrow(2, 0, 64).narrow(3, 0, 65).reshape({4, 8, 32, 2, 13, 5}), {3, 5}), 10.0);
  testing::require_close(pooled, by_sum, 1e-5, 1e-6);
}

TEST_CASE("pooling rejects bad arguments", "[cpu][conv]") {
  Tensor x = zeros({1, 1, 4, 4});
  for (auto pool : {&max_pool2d, &avg_pool2d}) {
    CHECK_THROWS_AS(pool(zeros({1, 4, 4}), {}), ShapeError);
    CHECK_THROWS_AS(pool(x, {.kernel = {5, 5}}), ShapeError);
    CHECK_THROWS_AS(pool(x, {.kernel = {0, 2}}), ValueError);
    CHECK_THROWS_AS(pool(x, {.kernel = {2, 2}, .stride = {0, 1}}), ValueError);
    CHECK_THROWS_AS(pool(x, {.kernel = {2, 2}, .padding = {2, 0}}), ValueError);
    CHECK_THROWS_AS(pool(x, {.kernel = {2, 2}, .padding = {-1, 0}}), ValueError);
    CHECK_THROWS_AS(pool(x.to(DType::i32), {}), DTypeError);
    CHECK_THROWS_AS(pool(Tensor(), {}), ValueError);
  }
}

GENESIS_GRADCHECK("conv2d") {
  const Conv2dOptions full_options{.stride = {2, 2}, .padding = {1, 1}, .dilation = {2, 2}, .groups = 2};
  for (bool with_bias : {false, true}) {
    TensorList inputs = {rand_leaf({2, 4, 5, 7}), rand_leaf({6, 2, 3, 3})};
    if (with_bias) inputs.push_back(rand_leaf({6}));
    gradcheck(
        [&](const TensorList& in) { return conv2d(in[0], in[1], with_bias ? in[2] : Tensor(), full_options); },
        inputs);
  }
  // Asymmetric options, a non-contiguous input, and the pointwise (1x1) path.
  gradcheck(
      [](const TensorList& in) {
        return conv2d(in[0].transpose(2, 3), in[1], in[2], {.stride = {1, 2}, .padding = {2, 0}, .dilation = {1, 2}});
      },
      {rand_leaf({1, 3, 7, 5}), rand_leaf({2, 3, 2, 3}), rand_leaf({2})});
  gradcheck([](const TensorList& in) { return conv2d(in[0], in[1], in[2]); },
            {rand_leaf({2, 3, 3, 5}), rand_leaf({4, 3, 1, 1}), rand_leaf({4})});
}

GENESIS_GRADCHECK("max_pool2d") {
  const Pool2dOptions padded{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  gradcheck([&](const TensorList& in) { return max_pool2d(in[0], padded); }, {distinct_leaf({2, 3, 5, 7})});
  gradcheck([](const TensorList& in) { return max_pool2d(in[0].transpose(2, 3), {.kernel = {2, 3}}); },
            {distinct_leaf({1, 2, 7, 5})});
  gradcheck([](const TensorList& in) { return max_pool2d(in[0], {.kernel = {2, 2}, .stride = {1, 1}}); },
            {distinct_leaf({1, 1, 4, 5})});
}

GENESIS_GRADCHECK("avg_pool2d") {
  const Pool2dOptions padded{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  gradcheck([&](const TensorList& in) { return avg_pool2d(in[0], padded); }, {rand_leaf({2, 3, 5, 7})});
  const Pool2dOptions uneven{.kernel = {2, 3}, .stride = {1, 2}, .padding = {1, 1}};
  gradcheck([&](const TensorList& in) { return avg_pool2d(in[0].transpose(2, 3), uneven); }, {rand_leaf({1, 2, 7, 5})});
}

TEST_CASE("conv2d in f32 (oneDNN where built with it) matches f64 forward and backward", "[cpu][conv]") {
  // f64 runs the im2col path; f32 runs oneDNN's primitives for every shape they take (the
  // blocked layouts, reorders and the backward primitives), im2col for the rest (the stride-3
  // case needs a negative right padding, which oneDNN does not take).
  const std::vector<ConvCase> cases = {
      {{3, 8, 9, 11}, {16, 8, 3, 3}, {.padding = {1, 1}}},
      {{1, 1, 28, 28}, {32, 1, 3, 3}, {.padding = {1, 1}}},
      {{2, 4, 5, 7}, {6, 2, 3, 3}, {.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}, .groups = 2}},
      {{1, 3, 6, 5}, {4, 3, 2, 3}, {.stride = {3, 2}, .padding = {0, 1}}},
      {{2, 16, 7, 7}, {24, 16, 1, 1}, {}},
      {{2, 8, 6, 6}, {8, 1, 3, 3}, {.padding = {1, 1}, .groups = 8}},
      {{2, 5, 8, 8}, {7, 5, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}},
  };
  for (const ConvCase& c : cases) {
    INFO("input " << shape_str(c.x) << ", weight " << shape_str(c.w));
    Tensor x = testing::rand_values(c.x, DType::f64), w = testing::rand_values(c.w, DType::f64);
    Tensor b = testing::rand_values({c.w[0]}, DType::f64);
    Tensor x64 = x.clone().requires_grad_(), w64 = w.clone().requires_grad_(), b64 = b.clone().requires_grad_();
    Tensor y64 = conv2d(x64, w64, b64, c.options);
    Tensor gy = testing::rand_values(y64.shape(), DType::f64);
    sum(mul(y64, gy)).backward();
    Tensor x32 = x.to(DType::f32).requires_grad_(), w32 = w.to(DType::f32).requires_grad_();
    Tensor b32 = b.to(DType::f32).requires_grad_();
    Tensor y32 = conv2d(x32, w32, b32, c.options);
    sum(mul(y32, gy.to(DType::f32))).backward();
    testing::require_close(y32, y64, 1e-4, 1e-5);
    testing::require_close(x32.grad(), x64.grad(), 1e-4, 1e-5);
    testing::require_close(w32.grad(), w64.grad(), 1e-4, 1e-5);
    testing::require_close(b32.grad(), b64.grad(), 1e-4, 1e-5);
  }
  const std::string kernels = cpu_conv2d_kernels();
#if GENESIS_WITH_DNNL
  if (std::getenv("GENESIS_CPU_CONV") == nullptr) CHECK(kernels.rfind("oneDNN ", 0) == 0);
#else
  CHECK(kernels == "im2col + openblas sgemm");
#endif
}

TEST_CASE("conv2d backward computes exactly the gradients asked for, in f32 and f64", "[cpu][conv]") {
  // Every subset of {input, weight, bias} requiring grad, with and without a bias: the f32 path
  // (oneDNN's primitives where built with them, which sum the bias gradient with the weight's or
  // into a sink) against f64 (im2col, the bias summed apart). A plain and a grouped, strided case.
  const std::vector<ConvCase> cases = {
      {{3, 8, 9, 11}, {16, 8, 3, 3}, {.padding = {1, 1}}},
      {{2, 16, 9, 7}, {12, 4, 3, 3}, {.stride = {2, 1}, .padding = {1, 1}, .groups = 4}},
  };
  for (const ConvCase& c : cases) {
    INFO("input " << shape_str(c.x) << ", weight " << shape_str(c.w));
    Tensor x = testing::rand_values(c.x, DType::f64), w = testing::rand_values(c.w, DType::f64);
    Tensor b = testing::rand_values({c.w[0]}, DType::f64);
    Tensor gy = testing::rand_values(conv2d(x, w, b, c.options).shape(), DType::f64);
    for (int mask = 1; mask < 8; ++mask) {
      for (bool with_bias : {true, false}) {
        const bool gx = mask & 1, gw = mask & 2, gb = (mask & 4) && with_bias;
        if (!gx && !gw && !gb) continue;
        INFO("grads: x " << gx << ", w " << gw << ", bias " << gb << "; bias given " << with_bias);
        Tensor want[3], got[3];
        for (DType dtype : {DType::f64, DType::f32}) {
          Tensor xs = x.to(dtype).clone().requires_grad_(gx), ws = w.to(dtype).clone().requires_grad_(gw);
          Tensor bs = with_bias ? b.to(dtype).clone().requires_grad_(gb) : Tensor();
          sum(mul(conv2d(xs, ws, bs, c.options), gy.to(dtype))).backward();
          Tensor* out = dtype == DType::f64 ? want : got;
          out[0] = gx ? xs.grad() : Tensor();
          out[1] = gw ? ws.grad() : Tensor();
          out[2] = gb ? bs.grad() : Tensor();
        }
        for (int k = 0; k < 3; ++k)
          if (want[k].defined()) testing::require_close(got[k], want[k], 1e-4, 1e-5);
      }
    }
  }
}
