// Gradient checks of views and copies, and the reductions the foundation relies on.
#include "tests/testing.h"

using namespace genesis;
using testing::gradcheck;
using testing::rand_leaf;

GENESIS_GRADCHECK("view") {
  gradcheck([](const TensorList& in) { return in[0].view({5, 3}); }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return in[0].view({-1}); }, {rand_leaf({2, 3, 2})});
}
GENESIS_GRADCHECK("reshape") {
  gradcheck([](const TensorList& in) { return in[0].t().reshape({15}); }, {rand_leaf({3, 5})});
}
GENESIS_GRADCHECK("permute") {
  gradcheck([](const TensorList& in) { return mul(in[0].permute({2, 0, 1}), in[0].permute({2, 0, 1})); },
            {rand_leaf({2, 3, 4})});
}
GENESIS_GRADCHECK("transpose") { gradcheck([](const TensorList& in) { return in[0].transpose(0, 2); }, {rand_leaf({2, 3, 4})}); }
GENESIS_GRADCHECK("narrow") { gradcheck([](const TensorList& in) { return in[0].narrow(1, 1, 3); }, {rand_leaf({3, 5})}); }
GENESIS_GRADCHECK("slice") {
  gradcheck([](const TensorList& in) { return in[0].slice(1, 1, 5, 2); }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return in[0].slice(0, -2, 3); }, {rand_leaf({3, 5})});
}
GENESIS_GRADCHECK("select") { gradcheck([](const TensorList& in) { return in[0].select(1, -1); }, {rand_leaf({3, 5})}); }
GENESIS_GRADCHECK("expand") {
  gradcheck([](const TensorList& in) { return in[0].expand({4, 3, 5}); }, {rand_leaf({3, 1})});
  gradcheck([](const TensorList& in) { return in[0].expand({2, 3}); }, {rand_leaf({})});
}
GENESIS_GRADCHECK("squeeze") { gradcheck([](const TensorList& in) { return in[0].squeeze(); }, {rand_leaf({3, 1, 5})}); }
GENESIS_GRADCHECK("unsqueeze") { gradcheck([](const TensorList& in) { return in[0].t().unsqueeze(1); }, {rand_leaf({3, 5})}); }
GENESIS_GRADCHECK("flatten") { gradcheck([](const TensorList& in) { return in[0].permute({1, 0, 2}).flatten(1); }, {rand_leaf({2, 3, 4})}); }
GENESIS_GRADCHECK("contiguous") { gradcheck([](const TensorList& in) { return in[0].t().contiguous(); }, {rand_leaf({3, 5})}); }
GENESIS_GRADCHECK("clone") { gradcheck([](const TensorList& in) { return in[0].clone(); }, {rand_leaf({3, 5})}); }
GENESIS_GRADCHECK("to_dtype") {
  // Through f32 and back: the gradient is cast back to f64.
  gradcheck([](const TensorList& in) { return in[0].to(DType::f32).to(DType::f64); }, {rand_leaf({4})},
            {.eps = 1e-3, .atol = 1e-4, .rtol = 1e-3});
}
GENESIS_GRADCHECK("to_device") {
  // On a CPU-only machine to(kCPU) is the identity; the CUDA round trip is in the CUDA suite.
  gradcheck([](const TensorList& in) { return in[0].to(kCPU); }, {rand_leaf({4})});
}
GENESIS_GRADCHECK("sum") {
  gradcheck([](const TensorList& in) { return sum(in[0]); }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return sum(in[0].t(), {0}, true); }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return sum(in[0], {0, 2}); }, {rand_leaf({2, 3, 4})});
}
GENESIS_GRADCHECK("mean") {
  gradcheck([](const TensorList& in) { return mean(in[0], {-1}); }, {rand_leaf({3, 5})});
  gradcheck([](const TensorList& in) { return mean(in[0].slice(0, 0, 3, 2), {0, 1}, true); }, {rand_leaf({3, 5})});
}

TEST_CASE("sum and mean forward", "[cpu][reduce]") {
  Tensor x = arange(0, 24, 1, {.dtype = DType::f64}).reshape({2, 3, 4});
  CHECK(sum(x).item() == 276.0);
  CHECK(sum(x, {0, 2}).to_vector<double>() == std::vector<double>{60, 92, 124});
  CHECK(sum(x, {1}, true).shape() == Shape{2, 1, 4});
  CHECK(mean(x, {-1}).to_vector<double>() == std::vector<double>{1.5, 5.5, 9.5, 13.5, 17.5, 21.5});
  CHECK(sum(from_vector(std::vector<int32_t>{1, 2, 3}, {3})).dtype() == DType::i64);
  CHECK(sum(gt(x, 10.0)).item() == 13.0);
  CHECK(mean(from_vector(std::vector<int32_t>{1, 2}, {2})).item() == 1.5);
  CHECK_THROWS_AS(sum(x, {0, 0}), ValueError);
  CHECK_THROWS_AS(sum(x, {3}), IndexError);
}
