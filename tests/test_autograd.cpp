// Autograd engine: accumulation, broadcasting, hooks, no-grad, detach, long chains.
#include "tests/testing.h"

using namespace genesis;

TEST_CASE("gradients accumulate when a tensor is used twice", "[cpu][autograd]") {
  Tensor x = tensor({1.0, 2.0, 3.0}, {}, {.dtype = DType::f64}).requires_grad_();
  Tensor y = sum(add(mul(x, x), x));  // d/dx = 2x + 1
  y.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3.0, 5.0, 7.0});
  // A second backward adds into .grad.
  sum(mul(x, 2.0)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5.0, 7.0, 9.0});
}

TEST_CASE("broadcast gradients are reduced to the input shape", "[cpu][autograd]") {
  Tensor a = ones({3, 1}, {.dtype = DType::f64, .requires_grad = true});
  Tensor b = ones({4}, {.dtype = DType::f64, .requires_grad = true});
  sum(mul(a, b)).backward();
  CHECK(a.grad().shape() == Shape{3, 1});
  CHECK(a.grad().to_vector<double>() == std::vector<double>{4, 4, 4});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{3, 3, 3, 3});
}

TEST_CASE("backward with an explicit gradient for non-scalars", "[cpu][autograd]") {
  Tensor x = tensor({1.0, 2.0}, {}, {.dtype = DType::f64}).requires_grad_();
  Tensor y = mul(x, 3.0);
  CHECK_THROWS_AS(y.backward(), AutogradError);
  y.backward(tensor({1.0, 10.0}, {}, {.dtype = DType::f64}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{3.0, 30.0});
}

TEST_CASE("two leaves never share a .grad buffer", "[cpu][autograd]") {
  Tensor a = ones({2}, {.requires_grad = true});
  Tensor b = ones({2}, {.requires_grad = true});
  sum(add(a, b)).backward();
  CHECK(!a.grad().shares_storage(b.grad()));
}

TEST_CASE("NoGradGuard and detach stop recording", "[cpu][autograd]") {
  Tensor x = ones({2}, {.requires_grad = true});
  {
    NoGradGuard g;
    Tensor y = mul(x, 2.0);
    CHECK(!y.requires_grad());
  }
  CHECK(grad_enabled());
  Tensor d = mul(x, 2.0).detach();
  CHECK(!d.requires_grad());
  CHECK(d.is_leaf());
  CHECK_THROWS_AS(sum(d).backward(), AutogradError);
  // Integer and comparison results do not require grad.
  CHECK(!gt(x, 0.5).requires_grad());
}

TEST_CASE("in-place ops on tensors that need grad are refused", "[cpu][autograd]") {
  Tensor x = ones({2}, {.requires_grad = true});
  CHECK_THROWS_AS(x.fill_(3.0), AutogradError);
  NoGradGuard g;
  x.fill_(3.0);
  CHECK(x.to_vector<float>() == std::vector<float>{3, 3});
}

TEST_CASE("leaf hooks see and may replace the gradient, post-accumulate hooks run after", "[cpu][autograd]") {
  Tensor x = ones({3}, {.dtype = DType::f64, .requires_grad = true});
  int calls = 0;
  x.register_hook([&](const Tensor& g) {
    ++calls;
    return mul(g, 10.0);
  });
  double seen = 0.0;
  x.register_post_accumulate_grad_hook([&](Tensor& leaf) { seen = sum(leaf.grad()).item(); });
  sum(x).backward();
  CHECK(calls == 1);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{10, 10, 10});
  CHECK(seen == 30.0);
}

TEST_CASE("backward twice without retain_graph is an error, with it gradients add", "[cpu][autograd]") {
  Tensor x = tensor({2.0}, {}, {.dtype = DType::f64}).requires_grad_();
  Tensor y = exp(x);
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  CHECK(x.grad().item() == Approx(2 * std::exp(2.0)));
  CHECK_THROWS_AS(y.backward(), AutogradError);
}

TEST_CASE("a 100,000-node chain backpropagates and frees without recursion", "[cpu][autograd]") {
  Tensor x = ones({1}, {.dtype = DType::f64, .requires_grad = true});
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = add(y, 1e-6);
  y.backward();
  CHECK(x.grad().item() == 1.0);
  y = Tensor();  // destroying the chain must not overflow the stack either
  // A chain that is dropped without running backward.
  Tensor z = x;
  for (int i = 0; i < 100000; ++i) z = mul(z, 1.0);
  z = Tensor();
  SUCCEED();
}

TEST_CASE("diamond graphs sum every path", "[cpu][autograd]") {
  Tensor x = tensor({0.5}, {}, {.dtype = DType::f64}).requires_grad_();
  Tensor a = sin(x), b = cos(x);
  Tensor y = mul(a, b);  // d/dx = cos^2 - sin^2
  y.backward();
  CHECK(x.grad().item() == Approx(std::cos(1.0)));
}
