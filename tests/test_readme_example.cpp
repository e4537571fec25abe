// The library example from README.md, kept compiling and running.
#include "tests/testing.h"

using namespace genesis;

TEST_CASE("README library example", "[cpu][docs]") {
  Tensor x = randn({64, 784});
  Tensor w = mul(randn({10, 784}), 0.01).requires_grad_();
  Tensor loss = cross_entropy(linear(x, w), randint(0, 10, {64}));
  loss.backward();  // w.grad() now holds d loss / d w
  REQUIRE(w.grad().defined());
  CHECK(w.grad().shape() == Shape{10, 784});
  CHECK(std::isfinite(loss.item()));
}
