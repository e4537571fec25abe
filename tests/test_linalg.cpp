// matmul, bmm and linear: values against a double-precision reference over 1-D, 2-D,
// batched and broadcast operands, transposed and strided layouts, dtypes and empty
// dimensions; error messages; finite-difference gradient checks.
#include "tests/testing.h"

using namespace genesis;
using Catch::Matchers::Contains;
using testing::gradcheck;
using testing::rand_leaf;
using testing::require_close;

namespace {

// Reference for a [..., m, k] x [..., k, n] product of operands already broadcast to one
// batch shape, in f64 with the naive triple loop.
Tensor reference_matmul(const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  const int64_t batch = numel_of(Shape(a.shape().begin(), a.shape().end() - 2));
  std::vector<double> out(static_cast<size_t>(batch * m * n), 0.0);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < k; ++j)
          acc += av[static_cast<size_t>(i * m * k + r * k + j)] * bv[static_cast<size_t>(i * k * n + j * n + c)];
        out[static_cast<size_t>(i * m * n + r * n + c)] = acc;
      }
  Shape shape(a.shape().begin(), a.shape().end() - 1);
  shape.push_back(n);
  return from_vector(out, shape);
}

Tensor f64(std::initializer_list<double> values, const Shape& shape) {
  return tensor(values, shape, {.dtype = DType::f64});
}

}  // namespace

TEST_CASE("matmul of matrices matches the reference", "[cpu][linalg]") {
  Tensor a = testing::rand_values({7, 5}, DType::f64), b = testing::rand_values({5, 3}, DType::f64);
  Tensor want = reference_matmul(a, b);
  require_close(matmul(a, b), want, 1e-12, 1e-12);
  require_close(matmul(a.to(DType::f32), b.to(DType::f32)), want, 1e-5, 1e-6);
  CHECK(matmul(a.to(DType::f32), b.to(DType::f32)).dtype() == DType::f32);
  CHECK(matmul(a.to(DType::f32), b).dtype() == DType::f64);
  for (DType half : {DType::bf16, DType::f16}) {
    Tensor ah = a.to(half), bh = b.to(half);
    Tensor got = matmul(ah, bh);
    CHECK(got.dtype() == half);
    require_close(got, reference_matmul(ah, bh), 1e-2, 1e-2);
  }
  // Large enough for OpenBLAS to use several threads.
  Tensor big_a = testing::rand_values({96, 130}, DType::f64), big_b = testing::rand_values({130, 70}, DType::f64);
  require_close(matmul(big_a.to(DType::f32), big_b.to(DType::f32)), reference_matmul(big_a, big_b), 1e-4, 1e-5);
}

TEST_CASE("matmul reads transposed and strided operands", "[cpu][linalg]") {
  Tensor at = testing::rand_values({5, 7}, DType::f64), bt = testing::rand_values({3, 5}, DType::f64);
  Tensor want = reference_matmul(at.t().contiguous(), bt.t().contiguous());
  require_close(matmul(at.t(), bt.t()), want, 1e-12, 1e-12);
  require_close(matmul(at.t().to(DType::bf16), bt.t().to(DType::bf16)),
                reference_matmul(at.t().to(DType::bf16).contiguous(), bt.t().to(DType::bf16).contiguous()), 1e-2,
                1e-2);
  // Row-strided (ld > cols), column-strided (a copy) and sliced batch operands.
  Tensor wide = testing::rand_values({7, 11}, DType::f64);
  Tensor rows = wide.narrow(1, 2, 5), cols = wide.slice(1, 0, 10, 2);
  Tensor b = testing::rand_values({5, 4}, DType::f64);
  require_close(matmul(rows, b), reference_matmul(rows.contiguous(), b), 1e-12, 1e-12);
  require_close(matmul(cols, b), reference_matmul(cols.contiguous(), b), 1e-12, 1e-12);
  Tensor stacked = testing::rand_values({6, 3, 5}, DType::f64).slice(0, 0, 6, 2);
  require_close(matmul(stacked, b), reference_matmul(stacked.contiguous(), b.expand({3, 5, 4}).contiguous()), 1e-12,
                1e-12);
  // Single rows and columns viewed through transposes.
  Tensor col = testing::rand_values({5, 1}, DType::f64), row = testing::rand_values({1, 5}, DType::f64);
  require_close(matmul(col.t(), row.t()), reference_matmul(col.t().contiguous(), row.t().contiguous()), 1e-12, 1e-12);
  require_close(matmul(row.t(), col.t()), reference_matmul(row.t().contiguous(), col.t().contiguous()), 1e-12, 1e-12);
  Tensor wt = testing::rand_values({4, 1, 3, 5}, DType::f64).permute({1, 0, 3, 2});  // [1, 4, 5, 3], transposed
  Tensor x = testing::rand_values({2, 1, 7, 5}, DType::f64);
  require_close(matmul(x, wt),
                reference_matmul(x.expand({2, 4, 7, 5}).contiguous(), wt.expand({2, 4, 5, 3}).contiguous()), 1e-12,
                1e-12);
}

TEST_CASE("matmul follows torch.matmul for 1-D and batched operands", "[cpu][linalg]") {
  Tensor v = f64({1, 2, 3}, {3}), w = f64({4, 5, 6}, {3});
  Tensor dot = matmul(v, w);
  CHECK(dot.shape() == Shape{});
  CHECK(dot.item() == 32.0);
  Tensor m = f64({1, 2, 3, 4, 5, 6}, {3, 2});
  CHECK(matmul(v, m).shape() == Shape{2});
  CHECK(matmul(v, m).to_vector<double>() == std::vector<double>{22, 28});
  CHECK(matmul(m.t(), v).to_vector<double>() == std::vector<double>{22, 28});
  // Batch dimensions broadcast: [2, 1, 3, 4] x [5, 4, 2] -> [2, 5, 3, 2].
  Tensor a = testing::rand_values({2, 1, 3, 4}, DType::f64), b = testing::rand_values({5, 4, 2}, DType::f64);
  Tensor got = matmul(a, b);
  CHECK(got.shape() == Shape{2, 5, 3, 2});
  require_close(got, reference_matmul(a.expand({2, 5, 3, 4}).contiguous(), b.expand({2, 5, 4, 2}).contiguous()), 1e-12,
                1e-12);
  // A matrix against a batch (read with batch stride 0) and 1-D against a batch.
  Tensor mat = testing::rand_values({3, 4}, DType::f64);
  require_close(matmul(mat, b), reference_matmul(mat.expand({5, 3, 4}).contiguous(), b), 1e-12, 1e-12);
  Tensor vec = testing::rand_values({4}, DType::f64);
  CHECK(matmul(vec, b).shape() == Shape{5, 2});
  require_close(matmul(vec, b), reference_matmul(vec.view({1, 4}).expand({5, 1, 4}).contiguous(), b).view({5, 2}),
                1e-12, 1e-12);
  CHECK(matmul(a, vec).shape() == Shape{2, 1, 3});
  // A contiguous batch against one matrix (computed as a single taller GEMM).
  Tensor stack = testing::rand_values({2, 3, 4, 5}, DType::f64), shared = testing::rand_values({5, 3}, DType::f64);
  require_close(matmul(stack, shared), reference_matmul(stack, shared.expand({2, 3, 5, 3}).contiguous()), 1e-12,
                1e-12);
  require_close(matmul(stack.to(DType::f16), shared.to(DType::f16)),
                reference_matmul(stack.to(DType::f16), shared.to(DType::f16).expand({2, 3, 5, 3}).contiguous()), 1e-2,
                1e-2);
}

TEST_CASE("matmul dtypes and empty dimensions", "[cpu][linalg]") {
  Tensor ia = from_vector(std::vector<int32_t>{1, 2, 3, 4}, {2, 2});
  Tensor ib = from_vector(std::vector<int32_t>{5, 6, 7, 8}, {2, 2});
  Tensor prod = matmul(ia, ib);
  CHECK(prod.dtype() == DType::i32);
  CHECK(prod.to_vector<int32_t>() == std::vector<int32_t>{19, 22, 43, 50});
  Tensor big = from_vector(std::vector<int64_t>{int64_t{1} << 40, 3}, {2});
  CHECK(matmul(big, from_vector(std::vector<int64_t>{2, 1}, {2})).to_vector<int64_t>() ==
        std::vector<int64_t>{(int64_t{1} << 41) + 3});
  CHECK(matmul(ia, ib.to(DType::f32)).dtype() == DType::f32);
  CHECK_THROWS_AS(matmul(gt(ia, 1.0), gt(ib, 1.0)), DTypeError);
  // k = 0 gives zeros; m = 0 or a zero batch gives an empty result.
  Tensor z = matmul(empty({3, 0}), empty({0, 2}));
  CHECK(z.shape() == Shape{3, 2});
  CHECK(z.to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(matmul(empty({0, 4}), ones({4, 2})).shape() == Shape{0, 2});
  CHECK(matmul(empty({0, 2, 4}), ones({4, 3})).shape() == Shape{0, 2, 3});
}

TEST_CASE("matmul shape errors name the op and both shapes", "[cpu][linalg]") {
  CHECK_THROWS_AS(matmul(ones({2, 3}), ones({4, 5})), ShapeError);
  CHECK_THROWS_WITH(matmul(ones({2, 3}), ones({4, 5})), Contains("matmul") && Contains("[2, 3]") && Contains("[4, 5]"));
  CHECK_THROWS_WITH(matmul(ones({2, 2, 3}), ones({3, 3, 4})),
                    Contains("matmul") && Contains("[2, 2, 3]") && Contains("[3, 3, 4]"));
  CHECK_THROWS_WITH(matmul(ones({3}), ones({4})), Contains("[3]") && Contains("[4]"));
  CHECK_THROWS_AS(matmul(scalar_tensor(1.0), ones({2})), ShapeError);
  CHECK_THROWS_AS(matmul(Tensor(), ones({2})), ValueError);
}

TEST_CASE("bmm", "[cpu][linalg]") {
  Tensor a = testing::rand_values({4, 3, 5}, DType::f64), b = testing::rand_values({4, 5, 2}, DType::f64);
  require_close(bmm(a, b), reference_matmul(a, b), 1e-12, 1e-12);
  require_close(bmm(a.to(DType::f32), b.transpose(1, 2).contiguous().transpose(1, 2).to(DType::f32)),
                reference_matmul(a, b), 1e-5, 1e-6);
  CHECK_THROWS_WITH(bmm(a, b.select(0, 0)), Contains("bmm") && Contains("[4, 3, 5]") && Contains("[5, 2]"));
  CHECK_THROWS_WITH(bmm(a, ones({2, 5, 2}, {.dtype = DType::f64})), Contains("bmm") && Contains("[2, 5, 2]"));
  CHECK_THROWS_WITH(bmm(a, ones({4, 4, 2}, {.dtype = DType::f64})), Contains("bmm") && Contains("[4, 4, 2]"));
}

TEST_CASE("linear", "[cpu][linalg]") {
  Tensor x = testing::rand_values({2, 3, 5}, DType::f64), w = testing::rand_values({4, 5}, DType::f64);
  Tensor bias = testing::rand_values({4}, DType::f64);
  Tensor want = reference_matmul(x.view({6, 5}), w.t().contiguous()).view({2, 3, 4});
  require_close(linear(x, w), want, 1e-12, 1e-12);
  require_close(linear(x, w, bias), add(want, bias), 1e-12, 1e-12);
  require_close(linear(x.select(0, 1).t().contiguous().t(), w, bias), add(want.select(0, 1), bias), 1e-12, 1e-12);
  Tensor v = linear(x.select(0, 0).select(0, 0), w, bias);
  CHECK(v.shape() == Shape{4});
  require_close(v, add(want.select(0, 0).select(0, 0), bias), 1e-12, 1e-12);
  Tensor got16 = linear(x.to(DType::bf16), w.to(DType::bf16), bias.to(DType::bf16));
  CHECK(got16.dtype() == DType::bf16);
  require_close(got16, add(want, bias), 3e-2, 3e-2);
  require_close(linear(x.to(DType::f32), w.to(DType::f32), bias.to(DType::f32)), add(want, bias), 1e-5, 1e-5);
  // No input features: the output is the bias.
  require_close(linear(empty({3, 0}), empty({2, 0}), tensor({1, 2})), tensor({1, 2, 1, 2, 1, 2}, {3, 2}), 0, 0);
  CHECK_THROWS_WITH(linear(x, ones({4, 6}, {.dtype = DType::f64})),
                    Contains("linear") && Contains("[2, 3, 5]") && Contains("[4, 6]"));
  CHECK_THROWS_WITH(linear(x, w, ones({5})), Contains("linear") && Contains("[5]"));
  CHECK_THROWS_AS(linear(from_vector(std::vector<int32_t>{1}, {1}), from_vector(std::vector<int32_t>{1}, {1, 1})),
                  DTypeError);
}

GENESIS_GRADCHECK("matmul") {
  auto mm = [](const TensorList& in) { return matmul(in[0], in[1]); };
  gradcheck(mm, {rand_leaf({3, 4}), rand_leaf({4, 2})});
  gradcheck(mm, {rand_leaf({4}), rand_leaf({4})});
  gradcheck(mm, {rand_leaf({4}), rand_leaf({4, 3})});
  gradcheck(mm, {rand_leaf({3, 4}), rand_leaf({4})});
  gradcheck(mm, {rand_leaf({2, 1, 3, 4}), rand_leaf({3, 4, 2})});
  gradcheck(mm, {rand_leaf({3}), rand_leaf({2, 3, 2})});
  gradcheck(mm, {rand_leaf({2, 2, 3}), rand_leaf({3})});
  gradcheck([](const TensorList& in) { return matmul(in[0].t(), in[1].transpose(-1, -2)); },
            {rand_leaf({4, 3}), rand_leaf({2, 5, 4})});
  gradcheck([](const TensorList& in) { return matmul(in[0].slice(1, 0, 5, 2), in[1]); },
            {rand_leaf({3, 5}), rand_leaf({3, 1})});
}

GENESIS_GRADCHECK("bmm") {
  auto mm = [](const TensorList& in) { return bmm(in[0], in[1]); };
  gradcheck(mm, {rand_leaf({2, 3, 4}), rand_leaf({2, 4, 5})});
  gradcheck(mm, {rand_leaf({1, 1, 3}), rand_leaf({1, 3, 1})});
  gradcheck([](const TensorList& in) { return bmm(in[0].transpose(1, 2), in[1].permute({1, 0, 2})); },
            {rand_leaf({3, 4, 2}), rand_leaf({4, 3, 5})});
}

GENESIS_GRADCHECK("linear") {
  auto with_bias = [](const TensorList& in) { return linear(in[0], in[1], in[2]); };
  auto without_bias = [](const TensorList& in) { return linear(in[0], in[1]); };
  gradcheck(with_bias, {rand_leaf({3, 4}), rand_leaf({2, 4}), rand_leaf({2})});
  gradcheck(without_bias, {rand_leaf({3, 4}), rand_leaf({5, 4})});
  gradcheck(with_bias, {rand_leaf({2, 3, 4}), rand_leaf({5, 4}), rand_leaf({5})});
  gradcheck(with_bias, {rand_leaf({4}), rand_leaf({3, 4}), rand_leaf({3})});
  gradcheck([](const TensorList& in) { return linear(in[0].transpose(0, 1), in[1].t(), in[2]); },
            {rand_leaf({4, 2, 3}), rand_leaf({3, 5}), rand_leaf({5})});
  // Only the weight requires grad: no gradient is computed for the input.
  Tensor x = testing::rand_values({3, 4}, DType::f64);
  Tensor w = rand_leaf({2, 4});
  sum(linear(x, w)).backward();
  CHECK(w.grad().shape() == Shape{2, 4});
  CHECK_FALSE(x.grad().defined());
}
