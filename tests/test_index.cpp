// Joining, splitting and indexing ops: forward values against hand-written results, index
// validation errors, deterministic accumulation of repeated indices, and gradient checks.
#include <string>
#include <vector>

#include "tests/testing.h"

using namespace genesis;
using testing::gradcheck;
using testing::rand_leaf;

namespace {

Tensor i64s(const std::vector<int64_t>& values, const Shape& shape) { return from_vector(values, shape); }
Tensor i32s(const std::vector<int32_t>& values, const Shape& shape) { return from_vector(values, shape); }
std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

// The message of the IndexError that f throws.
template <class F>
std::string index_error(F&& f) {
  try {
    f();
  } catch (const IndexError& e) {
    return e.what();
  }
  FAIL("expected an IndexError");
  return "";
}

}  // namespace

TEST_CASE("cat joins along any axis and promotes dtypes", "[cpu][index]") {
  Tensor a = tensor({1, 2, 3, 4}, {2, 2});
  CHECK(values(cat({a, tensor({5, 6}, {1, 2})})) == std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor joined = cat({a, tensor({7, 8}, {2, 1}), a}, -1);
  CHECK(joined.shape() == Shape{2, 5});
  CHECK(values(joined) == std::vector<float>{1, 2, 7, 1, 2, 3, 4, 8, 3, 4});
  CHECK(values(cat({a.t(), a}, 0)) == std::vector<float>{1, 3, 2, 4, 1, 2, 3, 4});  // non-contiguous input
  CHECK(cat({a, tensor({}, {0, 2})}).shape() == Shape{2, 2});
  Tensor ints = i32s({9, 9}, {1, 2});
  CHECK(cat({ints, a}).dtype() == DType::f32);
  CHECK(cat({ints, i64s({1, 2}, {1, 2})}).dtype() == DType::i64);
  CHECK(cat({ints, ints}).dtype() == DType::i32);
  CHECK(cat({a.to(DType::f16), a.to(DType::bf16)}).dtype() == DType::f32);
  CHECK(cat({a}).to_vector<float>() == values(a));

  CHECK_THROWS_AS(cat({}), ValueError);
  CHECK_THROWS_AS(cat({a, tensor({1, 2, 3}, {1, 3})}), ShapeError);
  CHECK_THROWS_AS(cat({a, tensor({1, 2}, {2})}), ShapeError);
  CHECK_THROWS_AS(cat({scalar_tensor(1.0), scalar_tensor(2.0)}), ShapeError);
  CHECK_THROWS_AS(cat({a, a}, 2), IndexError);
  CHECK_THROWS_AS(cat({a, Tensor()}), ValueError);
}

TEST_CASE("stack adds a new axis", "[cpu][index]") {
  Tensor a = tensor({1, 2, 3}), b = tensor({4, 5, 6});
  Tensor s0 = stack({a, b});
  CHECK(s0.shape() == Shape{2, 3});
  CHECK(values(s0) == std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor s1 = stack({a, b}, -1);
  CHECK(s1.shape() == Shape{3, 2});
  CHECK(values(s1) == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(stack({scalar_tensor(1.0), scalar_tensor(2.0)}).shape() == Shape{2});
  CHECK_THROWS_AS(stack({a, tensor({1, 2})}), ShapeError);
  CHECK_THROWS_AS(stack({a, b}, 2), IndexError);
  CHECK_THROWS_AS(stack({}), ValueError);
}

// Gradients of split's pieces that are the regions of one tensor laid out as the pieces were
// (here cat's backward narrows its gradient) are taken whole as the input's gradient; pieces
// that are not (a piece's gradient from mul) are copied. Both give the right values.
TEST_CASE("split's backward takes gradients laid out as its pieces whole", "[cpu][index]") {
  Tensor x = arange(0, 24, 1, {.dtype = DType::f64}).reshape({2, 3, 4}).requires_grad_(true);
  Tensor w = arange(1, 25, 1, {.dtype = DType::f64}).reshape({2, 3, 4});
  std::vector<Tensor> pieces = split(x, std::vector<int64_t>{1, 2, 1}, 2);
  sum(mul(cat(pieces, 2), w)).backward();
  CHECK(x.grad().to_vector<double>() == w.to_vector<double>());
  Tensor y = arange(0, 24, 1, {.dtype = DType::f64}).reshape({2, 3, 4}).requires_grad_(true);
  std::vector<Tensor> parts = split(y, 2, 2);
  sum(add(mul(parts[0], w.narrow(2, 0, 2)), mul(parts[1], 2.0))).backward();
  CHECK(y.grad().narrow(2, 0, 2).contiguous().to_vector<double>() == w.narrow(2, 0, 2).contiguous().to_vector<double>());
  CHECK(y.grad().narrow(2, 2, 2).contiguous().to_vector<double>() == std::vector<double>(12, 2.0));
}

TEST_CASE("split and chunk return views", "[cpu][index]") {
  Tensor x = arange(0, 10, 1).reshape({2, 5});
  std::vector<Tensor> by_size = split(x, 2, 1);
  REQUIRE(by_size.size() == 3);
  CHECK(values(by_size[0]) == std::vector<float>{0, 1, 5, 6});
  CHECK(values(by_size[2]) == std::vector<float>{4, 9});
  CHECK(by_size[1].shares_storage(x));
  std::vector<Tensor> by_sizes = split(x, std::vector<int64_t>{1, 0, 4}, -1);
  REQUIRE(by_sizes.size() == 3);
  CHECK(by_sizes[1].shape() == Shape{2, 0});
  CHECK(values(by_sizes[2]) == std::vector<float>{1, 2, 3, 4, 6, 7, 8, 9});
  CHECK(split(x, 7, 1).size() == 1);
  CHECK(split(zeros({0, 3}), 2).size() == 1);

  std::vector<Tensor> chunks = chunk(arange(0, 5, 1), 3);
  REQUIRE(chunks.size() == 3);
  CHECK(values(chunks[0]) == std::vector<float>{0, 1});
  CHECK(values(chunks[2]) == std::vector<float>{4});
  CHECK(chunk(arange(0, 6, 1), 4).size() == 3);  // like torch.chunk: pieces of ceil(6 / 4) = 2
  CHECK(chunk(x, 5, 0).size() == 2);

  CHECK_THROWS_AS(split(x, 0, 1), ValueError);
  CHECK_THROWS_AS(split(x, std::vector<int64_t>{2, 2}, 1), ShapeError);
  CHECK_THROWS_AS(split(x, std::vector<int64_t>{6, -1}, 1), ValueError);
  CHECK_THROWS_AS(split(x, 2, 2), IndexError);
  CHECK_THROWS_AS(split(scalar_tensor(1.0), 1), ShapeError);
  CHECK_THROWS_AS(chunk(x, 0), ValueError);
}

TEST_CASE("index_select picks rows along any axis", "[cpu][index]") {
  Tensor x = arange(0, 12, 1).reshape({3, 4});
  CHECK(values(index_select(x, 0, i64s({2, 0, 2}, {3}))) == std::vector<float>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  Tensor cols = index_select(x, -1, i32s({3, 1}, {2}));
  CHECK(cols.shape() == Shape{3, 2});
  CHECK(values(cols) == std::vector<float>{3, 1, 7, 5, 11, 9});
  CHECK(values(index_select(x.t(), 0, i64s({1}, {1}))) == std::vector<float>{1, 5, 9});
  CHECK(index_select(x, 1, i64s({}, {0})).shape() == Shape{3, 0});
  CHECK(index_select(i32s({4, 5, 6}, {3}), 0, i64s({2, 2}, {2})).to_vector<int32_t>() == std::vector<int32_t>{6, 6});

  std::string msg = index_error([&] { index_select(x, 0, i64s({0, 3}, {2})); });
  CHECK_THAT(msg, Catch::Matchers::Contains("index_select") && Catch::Matchers::Contains("index 3") &&
                      Catch::Matchers::Contains("size 3"));
  msg = index_error([&] { index_select(x, 1, i32s({-1}, {1})); });
  CHECK_THAT(msg, Catch::Matchers::Contains("index -1") && Catch::Matchers::Contains("negative"));
  CHECK_THROWS_AS(index_select(x, 0, tensor({0})), DTypeError);
  CHECK_THROWS_AS(index_select(x, 0, i64s({0, 1}, {1, 2})), ShapeError);
  CHECK_THROWS_AS(index_select(x, 2, i64s({0}, {1})), IndexError);
}

TEST_CASE("gather reads along an axis", "[cpu][index]") {
  Tensor x = tensor({1, 2, 3, 4}, {2, 2});
  CHECK(values(gather(x, 1, i64s({0, 0, 1, 0}, {2, 2}))) == std::vector<float>{1, 1, 4, 3});
  CHECK(values(gather(x, 0, i64s({1, 0, 1}, {1, 3}).narrow(1, 0, 2))) == std::vector<float>{3, 2});
  Tensor y = arange(0, 12, 1).reshape({3, 4});
  Tensor picked = gather(y, 1, i32s({3, 2, 0}, {3, 1}));  // smaller than the input off the axis
  CHECK(values(picked) == std::vector<float>{3, 6, 8});
  CHECK(values(gather(y.t(), 0, i64s({2, 0}, {1, 2}))) == std::vector<float>{2, 4});

  std::string msg = index_error([&] { gather(x, 1, i64s({0, 2}, {1, 2})); });
  CHECK_THAT(msg, Catch::Matchers::Contains("gather") && Catch::Matchers::Contains("index 2") &&
                      Catch::Matchers::Contains("size 2"));
  CHECK_THROWS_AS(gather(x, 0, i64s({-1, 0}, {1, 2})), IndexError);
  CHECK_THROWS_AS(gather(x, 0, i64s({0, 0}, {2})), ShapeError);
  CHECK_THROWS_AS(gather(x, 0, i64s({0, 0, 0}, {1, 3})), ShapeError);
  CHECK_THROWS_AS(gather(x, 0, tensor({0, 0}, {1, 2})), DTypeError);
}

TEST_CASE("scatter_add adds into a copy", "[cpu][index]") {
  Tensor base = zeros({3, 5});
  Tensor index = i64s({0, 1, 2, 0, 0, 0, 1, 2, 2, 2}, {2, 5});
  Tensor out = scatter_add(base, 0, index, ones({2, 5}));
  CHECK(values(out) == std::vector<float>{2, 0, 0, 1, 1, 0, 2, 0, 0, 0, 0, 0, 2, 1, 1});
  CHECK(values(base) == std::vector<float>(15, 0.0f));
  Tensor x = tensor({10, 20, 30});
  CHECK(values(scatter_add(x, 0, i32s({2, 2, 0}, {3}), tensor({1, 2, 4}))) == std::vector<float>{14, 20, 33});
  // src larger than the index: entries beyond the index's extent are ignored.
  CHECK(values(scatter_add(x, 0, i64s({1}, {1}), tensor({5, 100}))) == std::vector<float>{10, 25, 30});
  Tensor ints = i64s({1, 1}, {2});
  CHECK(scatter_add(ints, 0, i64s({1, 1}, {2}), ints).to_vector<int64_t>() == std::vector<int64_t>{1, 3});

  std::string msg = index_error([&] { scatter_add(x, 0, i64s({3}, {1}), tensor({1})); });
  CHECK_THAT(msg, Catch::Matchers::Contains("scatter_add") && Catch::Matchers::Contains("index 3") &&
                      Catch::Matchers::Contains("size 3"));
  CHECK_THROWS_AS(scatter_add(x, 0, i64s({-2}, {1}), tensor({1})), IndexError);
  CHECK_THROWS_AS(scatter_add(x, 0, i64s({0, 1}, {2}), tensor({1})), ShapeError);
  CHECK_THROWS_AS(scatter_add(x, 0, i64s({0}, {1}), tensor({1}, {1}, {.dtype = DType::f64})), DTypeError);
  CHECK_THROWS_AS(scatter_add(x, 0, i64s({0}, {1, 1}), tensor({1}, {1, 1})), ShapeError);
}

TEST_CASE("index ops on large inputs accumulate deterministically", "[cpu][index]") {
  const int64_t rows = 5, cols = 40000, picks = 9;
  Tensor x = testing::rand_values({rows, cols}, DType::f64);
  Tensor index = randint(0, rows, {picks, cols});
  Tensor src = testing::rand_values({picks, cols}, DType::f64);
  auto xv = x.to_vector<double>(), sv = src.to_vector<double>();
  auto iv = index.to_vector<int64_t>();
  std::vector<double> scattered = xv, gathered(static_cast<size_t>(picks * cols));
  for (int64_t p = 0; p < picks; ++p)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t at = static_cast<size_t>(p * cols + c);
      const size_t to = static_cast<size_t>(iv[at] * cols + c);
      scattered[to] += sv[at];  // the same order the kernel promises: increasing p
      gathered[at] = xv[to];
    }
  CHECK(scatter_add(x, 0, index, src).to_vector<double>() == scattered);
  CHECK(gather(x, 0, index).to_vector<double>() == gathered);
  Tensor rows_picked = index_select(x, 0, i64s({4, 0, 4}, {3}));
  testing::require_close(rows_picked.select(0, 2), x.select(0, 4));
}

TEST_CASE("tril and triu keep a triangle", "[cpu][index]") {
  Tensor x = arange(1, 13, 1).reshape({3, 4});
  CHECK(values(tril(x)) == std::vector<float>{1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0});
  CHECK(values(tril(x, -1)) == std::vector<float>{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
  CHECK(values(tril(x, 2)) == std::vector<float>{1, 2, 3, 0, 5, 6, 7, 8, 9, 10, 11, 12});
  CHECK(values(triu(x)) == std::vector<float>{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12});
  CHECK(values(triu(x, 1)) == std::vector<float>{0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12});
  CHECK(values(triu(x, -5)) == values(x));
  CHECK(values(triu(x, 9)) == std::vector<float>(12, 0.0f));
  Tensor batch = ones({2, 2, 2}, {.dtype = DType::i32});
  CHECK(tril(batch).to_vector<int32_t>() == std::vector<int32_t>{1, 0, 1, 1, 1, 0, 1, 1});
  CHECK(values(triu(x.t())) == std::vector<float>{1, 5, 9, 0, 6, 10, 0, 0, 11, 0, 0, 0});
  CHECK(tril(zeros({0, 3})).shape() == Shape{0, 3});
  CHECK_THROWS_AS(tril(tensor({1, 2})), ShapeError);
  CHECK_THROWS_AS(triu(scalar_tensor(1.0)), ShapeError);
}

TEST_CASE("repeat tiles and flip reverses", "[cpu][index]") {
  Tensor x = tensor({1, 2});
  CHECK(values(repeat(x, {2, 2})) == std::vector<float>{1, 2, 1, 2, 1, 2, 1, 2});
  Tensor m = tensor({1, 2, 3, 4}, {2, 2});
  Tensor tiled = repeat(m, {2, 1, 2});
  CHECK(tiled.shape() == Shape{2, 2, 4});
  CHECK(values(tiled) == std::vector<float>{1, 2, 1, 2, 3, 4, 3, 4, 1, 2, 1, 2, 3, 4, 3, 4});
  CHECK(values(repeat(m.t(), {1, 2})) == std::vector<float>{1, 3, 1, 3, 2, 4, 2, 4});
  CHECK(repeat(m, {0, 3}).shape() == Shape{0, 6});
  CHECK(repeat(scalar_tensor(5.0), {3}).to_vector<float>() == std::vector<float>{5, 5, 5});
  CHECK_THROWS_AS(repeat(m, {2}), ShapeError);
  CHECK_THROWS_AS(repeat(m, {2, -1}), ValueError);

  Tensor f = arange(1, 7, 1).reshape({2, 3});
  CHECK(values(flip(f, {0})) == std::vector<float>{4, 5, 6, 1, 2, 3});
  CHECK(values(flip(f, {-1})) == std::vector<float>{3, 2, 1, 6, 5, 4});
  CHECK(values(flip(f, {0, 1})) == std::vector<float>{6, 5, 4, 3, 2, 1});
  CHECK(values(flip(f, {})) == values(f));
  CHECK(values(flip(f.t(), {0})) == std::vector<float>{3, 6, 2, 5, 1, 4});
  CHECK(flip(i64s({1, 2, 3}, {3}), {0}).to_vector<int64_t>() == std::vector<int64_t>{3, 2, 1});
  CHECK(flip(zeros({0, 2}), {0}).shape() == Shape{0, 2});
  CHECK_THROWS_AS(flip(f, {1, -1}), ValueError);
  CHECK_THROWS_AS(flip(f, {2}), IndexError);
}

GENESIS_GRADCHECK("cat") {
  gradcheck([](const TensorList& in) { return cat({in[0], in[1].t(), in[2]}, 1); },
            {rand_leaf({3, 2}), rand_leaf({4, 3}), rand_leaf({3, 1})});
  gradcheck([](const TensorList& in) { return cat({in[0].slice(0, 0, 5, 2), in[1]}, 0); },
            {rand_leaf({5, 2, 3}), rand_leaf({1, 2, 3})});
  // The same tensor twice: both gradient pieces add up.
  gradcheck([](const TensorList& in) { return cat({in[0], in[0]}, -1); }, {rand_leaf({2, 3})});
}

GENESIS_GRADCHECK("stack") {
  gradcheck([](const TensorList& in) { return stack({in[0], in[1].t()}, 1); }, {rand_leaf({3, 2}), rand_leaf({2, 3})});
  gradcheck([](const TensorList& in) { return stack({in[0], in[0], in[1]}, 0); }, {rand_leaf({4}), rand_leaf({4})});
}

GENESIS_GRADCHECK("split") {
  gradcheck(
      [](const TensorList& in) {
        std::vector<Tensor> p = split(in[0], 2, 1);
        return cat({p[2], mul(p[0], p[1])}, 1);
      },
      {rand_leaf({3, 5})});
  gradcheck(
      [](const TensorList& in) {
        std::vector<Tensor> p = split(in[0].t(), std::vector<int64_t>{1, 3, 1}, 0);
        return mul(p[1], 2.0);
      },
      {rand_leaf({3, 5})});
}

GENESIS_GRADCHECK("chunk") {
  gradcheck(
      [](const TensorList& in) {
        std::vector<Tensor> p = chunk(in[0], 3, 0);
        return cat({p[2], p[0]}, 0);
      },
      {rand_leaf({5, 2})});
}

GENESIS_GRADCHECK("index_select") {
  gradcheck([](const TensorList& in) { return index_select(in[0], 0, i64s({2, 0, 2, 2}, {4})); }, {rand_leaf({3, 4})});
  gradcheck([](const TensorList& in) { return index_select(in[0].t(), 1, i32s({1, 1, 0}, {3})); }, {rand_leaf({2, 5})});
  gradcheck([](const TensorList& in) { return index_select(in[0], 1, i64s({3, 0, 3}, {3})); }, {rand_leaf({2, 4, 3})});
}

GENESIS_GRADCHECK("gather") {
  gradcheck([](const TensorList& in) { return gather(in[0], 1, i64s({0, 0, 3, 1, 2, 2, 0, 3}, {2, 4})); },
            {rand_leaf({2, 4})});
  gradcheck([](const TensorList& in) { return gather(in[0].t(), 0, i32s({2, 2, 0, 1}, {2, 2})); }, {rand_leaf({3, 3})});
}

GENESIS_GRADCHECK("scatter_add") {
  Tensor index = i64s({0, 2, 0, 0, 1, 2}, {2, 3});
  gradcheck([&](const TensorList& in) { return scatter_add(in[0], 0, index, in[1]); },
            {rand_leaf({3, 3}), rand_leaf({2, 3})});
  // src larger than the index and a transposed input.
  gradcheck([&](const TensorList& in) { return scatter_add(in[0].t(), 1, index, in[1]); },
            {rand_leaf({4, 2}), rand_leaf({3, 4})});
}

GENESIS_GRADCHECK("tril") {
  gradcheck([](const TensorList& in) { return tril(in[0]); }, {rand_leaf({3, 4})});
  gradcheck([](const TensorList& in) { return tril(in[0].transpose(0, 2), -1); }, {rand_leaf({4, 3, 2})});
}

GENESIS_GRADCHECK("triu") {
  gradcheck([](const TensorList& in) { return triu(in[0], 1); }, {rand_leaf({4, 3})});
  gradcheck([](const TensorList& in) { return triu(in[0].t(), -1); }, {rand_leaf({3, 3})});
}

GENESIS_GRADCHECK("repeat") {
  gradcheck([](const TensorList& in) { return repeat(in[0], {2, 1, 3}); }, {rand_leaf({2, 3})});
  gradcheck([](const TensorList& in) { return repeat(in[0].t(), {2, 2}); }, {rand_leaf({2, 3})});
}

GENESIS_GRADCHECK("flip") {
  gradcheck([](const TensorList& in) { return flip(in[0], {0, 2}); }, {rand_leaf({2, 3, 4})});
  gradcheck([](const TensorList& in) { return flip(in[0].t(), {-1}); }, {rand_leaf({3, 5})});
}
