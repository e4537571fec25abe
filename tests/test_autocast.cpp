// Autocast follows the op table: every op, run under AutocastGuard on small CPU inputs, returns
// the dtype its policy column predicts; casts are differentiable and happen once, at the op the
// caller called.
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "libgenesis/autograd/autocast.h"
#include "tests/cuda_testing.h"
#include "tests/testing.h"

using namespace genesis;
using testing::rand_values;

namespace {

// The dtypes of an invocation's floating inputs: the first one and the others (a mixed pair
// tests promotion).
struct InputDtypes {
  DType first;
  DType rest;
};

struct AutocastCase {
  std::function<Tensor(InputDtypes)> run;
  std::optional<DType> fixed;  // the result dtype of ops whose result is not floating
};

AutocastCase with_inputs(std::function<Tensor(InputDtypes)> run, std::optional<DType> fixed = std::nullopt) {
  return {std::move(run), fixed};
}

// Non-zero, positive values (log, sqrt, rsqrt and pow take them).
Tensor input(const Shape& shape, DType dtype) {
  return rand_values(shape, dtype, 0.5, 1.5);
}
Tensor indices(std::initializer_list<double> values, const Shape& shape) {
  return tensor(values, shape, {.dtype = DType::i64});
}
Tensor mask() {
  return tensor({1, 0, 1, 0, 1, 0}, {2, 3}, {.dtype = DType::boolean});
}

template <class Unary>
AutocastCase unary_case(Unary op) {
  return with_inputs([op](InputDtypes d) { return op(input({2, 3}, d.first)); });
}
template <class Binary>
AutocastCase binary_case(Binary op, std::optional<DType> fixed = std::nullopt) {
  return with_inputs([op](InputDtypes d) { return op(input({2, 3}, d.first), input({2, 3}, d.rest)); }, fixed);
}

// One small invocation per op of the table, by name.
const std::map<std::string_view, AutocastCase>& autocast_cases() {
  static const std::map<std::string_view, AutocastCase> cases = [] {
    std::map<std::string_view, AutocastCase> c;
    // views and copies
    c["view"] = unary_case([](const Tensor& x) { return x.view({3, 2}); });
    c["reshape"] = unary_case([](const Tensor& x) { return x.t().reshape({6}); });
    c["permute"] = unary_case([](const Tensor& x) { return x.permute({1, 0}); });
    c["transpose"] = unary_case([](const Tensor& x) { return x.transpose(0, 1); });
    c["narrow"] = unary_case([](const Tensor& x) { return x.narrow(1, 1, 2); });
    c["slice"] = unary_case([](const Tensor& x) { return x.slice(1, 0, 3, 2); });
    c["select"] = unary_case([](const Tensor& x) { return x.select(0, 1); });
    c["expand"] = unary_case([](const Tensor& x) { return x.unsqueeze(0).expand({2, 2, 3}); });
    c["squeeze"] = unary_case([](const Tensor& x) { return x.unsqueeze(1).squeeze(); });
    c["unsqueeze"] = unary_case([](const Tensor& x) { return x.unsqueeze(0); });
    c["flatten"] = unary_case([](const Tensor& x) { return x.flatten(); });
    c["contiguous"] = unary_case([](const Tensor& x) { return x.t().contiguous(); });
    c["clone"] = unary_case([](const Tensor& x) { return x.clone(); });
    c["to_dtype"] = with_inputs([](InputDtypes d) { return input({2, 3}, DType::f64).to(d.first); });
    c["to_device"] = unary_case([](const Tensor& x) { return x.to(kCPU); });
    // factories: their dtype is the one asked for
    c["full"] = with_inputs([](InputDtypes d) { return full({2}, 1.0, {.dtype = d.first}); });
    c["arange"] = with_inputs([](InputDtypes d) { return arange(0.0, 3.0, 1.0, {.dtype = d.first}); });
    c["linspace"] = with_inputs([](InputDtypes d) { return linspace(0.0, 1.0, 3, {.dtype = d.first}); });
    c["eye"] = with_inputs([](InputDtypes d) { return eye(2, -1, {.dtype = d.first}); });
    c["rand"] = with_inputs([](InputDtypes d) { return rand({2}, {.dtype = d.first}); });
    c["randn"] = with_inputs([](InputDtypes d) { return randn({2}, {.dtype = d.first}); });
    c["randint"] = with_inputs([](InputDtypes d) { return randint(0, 3, {2}, {.dtype = d.first}); });
    c["bernoulli"] = with_inputs([](InputDtypes d) { return bernoulli({2}, 0.5, {.dtype = d.first}); });
    // unary
    c["neg"] = unary_case([](const Tensor& x) { return neg(x); });
    c["abs"] = unary_case([](const Tensor& x) { return abs(x); });
    c["exp"] = unary_case([](const Tensor& x) { return exp(x); });
    c["log"] = unary_case([](const Tensor& x) { return log(x); });
    c["log1p"] = unary_case([](const Tensor& x) { return log1p(x); });
    c["sqrt"] = unary_case([](const Tensor& x) { return sqrt(x); });
    c["rsqrt"] = unary_case([](const Tensor& x) { return rsqrt(x); });
    c["sin"] = unary_case([](const Tensor& x) { return sin(x); });
    c["cos"] = unary_case([](const Tensor& x) { return cos(x); });
    c["tanh"] = unary_case([](const Tensor& x) { return tanh(x); });
    c["sigmoid"] = unary_case([](const Tensor& x) { return sigmoid(x); });
    c["relu"] = unary_case([](const Tensor& x) { return relu(x); });
    c["gelu"] = unary_case([](const Tensor& x) { return gelu(x); });
    c["gelu_tanh"] = unary_case([](const Tensor& x) { return gelu(x, GeluApproximation::tanh); });
    c["silu"] = unary_case([](const Tensor& x) { return silu(x); });
    c["softplus"] = unary_case([](const Tensor& x) { return softplus(x); });
    c["pow_scalar"] = unary_case([](const Tensor& x) { return pow(x, 2.0); });
    c["clamp"] = unary_case([](const Tensor& x) { return clamp(x, 0.75, 1.25); });
    c["sign"] = unary_case([](const Tensor& x) { return sign(x); });
    // binary, compare, select
    c["add"] = binary_case([](const Tensor& a, const Tensor& b) { return add(a, b); });
    c["sub"] = binary_case([](const Tensor& a, const Tensor& b) { return sub(a, b); });
    c["mul"] = binary_case([](const Tensor& a, const Tensor& b) { return mul(a, b); });
    c["div"] = binary_case([](const Tensor& a, const Tensor& b) { return div(a, b); });
    c["pow"] = binary_case([](const Tensor& a, const Tensor& b) { return pow(a, b); });
    c["maximum"] = binary_case([](const Tensor& a, const Tensor& b) { return maximum(a, b); });
    c["minimum"] = binary_case([](const Tensor& a, const Tensor& b) { return minimum(a, b); });
    c["eq"] = binary_case([](const Tensor& a, const Tensor& b) { return eq(a, b); }, DType::boolean);
    c["ne"] = binary_case([](const Tensor& a, const Tensor& b) { return ne(a, b); }, DType::boolean);
    c["lt"] = binary_case([](const Tensor& a, const Tensor& b) { return lt(a, b); }, DType::boolean);
    c["le"] = binary_case([](const Tensor& a, const Tensor& b) { return le(a, b); }, DType::boolean);
    c["gt"] = binary_case([](const Tensor& a, const Tensor& b) { return gt(a, b); }, DType::boolean);
    c["ge"] = binary_case([](const Tensor& a, const Tensor& b) { return ge(a, b); }, DType::boolean);
    c["where"] = binary_case([](const Tensor& a, const Tensor& b) { return where(mask(), a, b); });
    c["masked_fill"] = unary_case([](const Tensor& x) { return masked_fill(x, mask(), 0.0); });
    // reductions
    c["sum"] = unary_case([](const Tensor& x) { return sum(x); });
    c["mean"] = unary_case([](const Tensor& x) { return mean(x, {1}); });
    c["prod"] = unary_case([](const Tensor& x) { return prod(x, {0}); });
    c["max"] = unary_case([](const Tensor& x) { return max(x, 1).values; });
    c["min"] = unary_case([](const Tensor& x) { return min(x, 1).values; });
    c["argmax"] = with_inputs([](InputDtypes d) { return argmax(input({2, 3}, d.first), 1); }, DType::i64);
    c["argmin"] = with_inputs([](InputDtypes d) { return argmin(input({2, 3}, d.first), 1); }, DType::i64);
    c["var"] = unary_case([](const Tensor& x) { return var(x, {1}); });
    c["std"] = unary_case([](const Tensor& x) { return genesis::std(x, {1}); });
    c["logsumexp"] = unary_case([](const Tensor& x) { return logsumexp(x, {1}); });
    c["norm"] = unary_case([](const Tensor& x) { return norm(x); });
    // linear algebra
    c["matmul"] = with_inputs([](InputDtypes d) { return matmul(input({2, 3}, d.first), input({3, 4}, d.rest)); });
    c["bmm"] = with_inputs([](InputDtypes d) { return bmm(input({2, 2, 3}, d.first), input({2, 3, 4}, d.rest)); });
    c["linear"] = with_inputs([](InputDtypes d) {
      return linear(input({2, 3}, d.first), input({4, 3}, d.rest), input({4}, d.rest));
    });
    c["linear_gelu"] = with_inputs([](InputDtypes d) {
      return linear_gelu(input({2, 3}, d.first), input({4, 3}, d.rest), input({4}, d.rest));
    });
    c["lora_linear"] = with_inputs([](InputDtypes d) {
      return lora_linear(input({2, 3}, d.first), input({4, 3}, d.rest), input({4}, d.rest), input({2, 3}, d.rest),
                         input({4, 2}, d.rest), 2.0);
    });
    c["swiglu_linear"] = with_inputs([](InputDtypes d) {
      return swiglu_linear(input({2, 3}, d.first), input({2, 3}, d.first), input({4, 3}, d.rest), input({4}, d.rest),
                           input({2, 3}, d.rest), input({4, 2}, d.rest), 2.0);
    });
    // neural-network functions and losses
    c["softmax"] = unary_case([](const Tensor& x) { return softmax(x, 1); });
    c["log_softmax"] = unary_case([](const Tensor& x) { return log_softmax(x, 1); });
    c["layer_norm"] = with_inputs([](InputDtypes d) {
      return layer_norm(input({2, 4}, d.first), {4}, input({4}, d.rest), input({4}, d.rest));
    });
    c["rms_norm"] = with_inputs([](InputDtypes d) {
      return rms_norm(input({2, 4}, d.first), {4}, input({4}, d.rest));
    });
    c["embedding"] = with_inputs([](InputDtypes d) {
      return embedding(indices({0, 2, 1}, {3}), input({4, 3}, d.first));
    });
    c["dropout"] = unary_case([](const Tensor& x) { return dropout(x, 0.5); });
    c["linear_cross_entropy"] = with_inputs(
        [](InputDtypes d) {
          return linear_cross_entropy(input({2, 3}, d.first), input({4, 3}, d.rest), indices({0, 3}, {2}));
        },
        DType::f32);
    c["cross_entropy"] = with_inputs([](InputDtypes d) {
      return cross_entropy(input({2, 3}, d.first), indices({0, 2}, {2}));
    });
    c["nll_loss"] = with_inputs([](InputDtypes d) { return nll_loss(input({2, 3}, d.first), indices({1, 0}, {2})); });
    c["mse_loss"] = binary_case([](const Tensor& a, const Tensor& b) { return mse_loss(a, b); });
    c["l1_loss"] = binary_case([](const Tensor& a, const Tensor& b) { return l1_loss(a, b); });
    c["binary_cross_entropy_with_logits"] =
        binary_case([](const Tensor& a, const Tensor& b) { return binary_cross_entropy_with_logits(a, b); });
    c["conv2d"] = with_inputs([](InputDtypes d) {
      return conv2d(input({1, 2, 4, 4}, d.first), input({3, 2, 3, 3}, d.rest), input({3}, d.rest));
    });
    c["max_pool2d"] = with_inputs([](InputDtypes d) { return max_pool2d(input({1, 1, 4, 4}, d.first)); });
    c["avg_pool2d"] = with_inputs([](InputDtypes d) { return avg_pool2d(input({1, 1, 4, 4}, d.first)); });
    c["one_hot"] = with_inputs([](InputDtypes) { return one_hot(indices({0, 2, 1}, {3}), 3); }, DType::i64);
    // rope's tables stay f32 whatever the input's dtype: rope casts them
    c["rope"] = with_inputs([](InputDtypes d) {
      const RopeTables tables = rope_tables(0, 4, 4, 10000.0);
      return rope(input({1, 2, 4, 4}, d.first), tables.cos, tables.sin);
    });
    c["swiglu"] = binary_case([](const Tensor& a, const Tensor& b) { return swiglu(a, b); });
    c["scaled_dot_product_attention"] = with_inputs([](InputDtypes d) {
      return scaled_dot_product_attention(input({1, 2, 3, 4}, d.first), input({1, 2, 3, 4}, d.rest),
                                          input({1, 2, 3, 4}, d.rest));
    });
    // shape and indexing
    c["cat"] = binary_case([](const Tensor& a, const Tensor& b) { return cat({a, b}, 1); });
    c["stack"] = binary_case([](const Tensor& a, const Tensor& b) { return stack({a, b}); });
    c["split"] = unary_case([](const Tensor& x) { return split(x, 2, 1)[0]; });
    c["chunk"] = unary_case([](const Tensor& x) { return chunk(x, 2, 1)[1]; });
    c["index_select"] = unary_case([](const Tensor& x) { return index_select(x, 1, indices({2, 0}, {2})); });
    c["gather"] = unary_case([](const Tensor& x) { return gather(x, 1, indices({2, 0}, {2, 1})); });
    c["scatter_add"] = with_inputs([](InputDtypes d) {
      return scatter_add(input({2, 3}, d.first), 1, indices({2, 0}, {2, 1}), input({2, 1}, d.rest));
    });
    c["tril"] = unary_case([](const Tensor& x) { return tril(x); });
    c["triu"] = unary_case([](const Tensor& x) { return triu(x); });
    c["repeat"] = unary_case([](const Tensor& x) { return repeat(x, {2, 1}); });
    c["flip"] = unary_case([](const Tensor& x) { return flip(x, {0}); });
    return c;
  }();
  return cases;
}

// The result dtype the policy column predicts for floating inputs of dtypes `d` under autocast to `low`.
DType predicted(AutocastPolicy policy, DType low, InputDtypes d) {
  switch (policy) {
    case AutocastPolicy::none:
      return d.first;
    case AutocastPolicy::lower:
    case AutocastPolicy::low_out:
      return low;
    case AutocastPolicy::f32:
    case AutocastPolicy::f32_math:
      return DType::f32;
    case AutocastPolicy::promote:
    case AutocastPolicy::promote_math:
      return promote_types(d.first, d.rest);
  }
  return d.first;
}

// Runs the op's case under autocast to `low` and checks the result's dtype, and that the op
// left autocast as it found it.
void check_case(const OpInfo& op, DType low, InputDtypes d) {
  const AutocastCase& c = autocast_cases().at(op.name);
  INFO("op " << op.name << " (policy " << autocast_policy_name(op.autocast) << ") under autocast " << dtype_name(low)
             << " with inputs " << dtype_name(d.first) << " and " << dtype_name(d.rest));
  AutocastGuard autocast(low);
  const Tensor result = c.run(d);
  CHECK(dtype_name(result.dtype()) == dtype_name(c.fixed.value_or(predicted(op.autocast, low, d))));
  CHECK(autocast_dtype() == low);
}

// The number of nodes named `name` in the autograd graph that produced t.
int count_nodes(const Tensor& t, std::string_view name) {
  std::set<const Node*> seen;
  std::vector<const Node*> pending{t.grad_fn().get()};
  int count = 0;
  while (!pending.empty()) {
    const Node* node = pending.back();
    pending.pop_back();
    if (!node || !seen.insert(node).second) continue;
    if (node->name() == name) ++count;
    for (const Edge& edge : node->next_edges) pending.push_back(edge.node.get());
  }
  return count;
}

Tensor leaf(const Shape& shape) {
  return input(shape, DType::f32).requires_grad_();
}

}  // namespace

TEST_CASE("every op of the table has an autocast case", "[cpu][autocast]") {
  for (const OpInfo& op : op_table()) {
    INFO("op '" << op.name << "' has no entry in autocast_cases() (tests/test_autocast.cpp)");
    CHECK(autocast_cases().count(op.name) == 1);
  }
  for (const auto& [name, c] : autocast_cases()) {
    INFO("autocast case for unknown op '" << name << "'");
    CHECK(find_op(name) != nullptr);
  }
}

TEST_CASE("without autocast every op keeps f32 inputs in f32", "[cpu][autocast]") {
  for (const OpInfo& op : op_table()) {
    const AutocastCase& c = autocast_cases().at(op.name);
    INFO("op " << op.name);
    CHECK(dtype_name(c.run({DType::f32, DType::f32}).dtype()) == dtype_name(c.fixed.value_or(DType::f32)));
  }
}

TEST_CASE("under autocast each op returns the dtype its policy predicts", "[cpu][autocast]") {
  for (const DType low : {DType::bf16, DType::f16}) {
    const DType other_half = low == DType::bf16 ? DType::f16 : DType::bf16;
    for (const OpInfo& op : op_table()) {
      check_case(op, low, {DType::f32, DType::f32});
      switch (op.autocast) {
        case AutocastPolicy::f32:  // 16-bit inputs go up to f32 (cast, or read as they are)
        case AutocastPolicy::f32_math:
          check_case(op, low, {DType::bf16, DType::bf16});
          break;
        case AutocastPolicy::promote:  // mixed inputs meet at the widest
        case AutocastPolicy::promote_math:
          check_case(op, low, {DType::bf16, DType::f32});
          check_case(op, low, {DType::f32, DType::bf16});
          break;
        case AutocastPolicy::none:  // a 16-bit input other than the autocast dtype stays as it is
          check_case(op, low, {other_half, other_half});
          break;
        case AutocastPolicy::low_out:  // a 16-bit input with f32 parameters is read as it is
          check_case(op, low, {DType::bf16, DType::f32});
          break;
        case AutocastPolicy::lower:
          break;
      }
    }
  }
}

TEST_CASE("autocast: gradients of a linear model reach f32 leaves as f32", "[cpu][autocast]") {
  Tensor x = input({4, 3}, DType::f32), target = input({4, 2}, DType::f32);
  Tensor w = leaf({2, 3}), b = leaf({2});
  auto loss_of = [&] { return mse_loss(relu(linear(x, w, b)), target); };
  loss_of().backward();
  const Tensor w_grad = w.grad().clone(), b_grad = b.grad().clone();
  w.grad().fill_(0.0);
  b.grad().fill_(0.0);
  Tensor loss;
  {
    AutocastGuard autocast(DType::bf16);
    Tensor hidden = relu(linear(x, w, b));
    CHECK(hidden.dtype() == DType::bf16);
    loss = mse_loss(hidden, target);
  }
  CHECK(loss.dtype() == DType::f32);
  loss.backward();
  REQUIRE(w.grad().dtype() == DType::f32);
  REQUIRE(b.grad().dtype() == DType::f32);
  testing::require_close(w.grad(), w_grad, 3e-2, 3e-2);
  testing::require_close(b.grad(), b_grad, 3e-2, 3e-2);
}

TEST_CASE("autocast: each argument is cast once, by the op called", "[cpu][autocast]") {
  AutocastGuard autocast(DType::bf16);
  // linear's three f32 arguments, each cast to bf16 once.
  Tensor y = linear(leaf({2, 3}), leaf({4, 3}), leaf({4}));
  CHECK(y.dtype() == DType::bf16);
  CHECK(count_nodes(y, "to_dtype") == 3);
  // cross_entropy (f32_math) reads the bf16 logits without a cast and returns f32; the
  // reductions inside it do not cast either.
  Tensor logits = linear(leaf({2, 3}), leaf({4, 3}), Tensor());
  Tensor loss = cross_entropy(logits, indices({1, 3}, {2}));
  CHECK(loss.dtype() == DType::f32);
  CHECK(count_nodes(loss, "to_dtype") == 2);
  // mse_loss (f32) casts its bf16 input up once.
  Tensor mse = mse_loss(logits, input({2, 4}, DType::f32));
  CHECK(mse.dtype() == DType::f32);
  CHECK(count_nodes(mse, "to_dtype") == 3);
  // stack casts its bf16 argument to f32; the cat it runs inside finds nothing left to cast.
  Tensor stacked = stack({leaf({2}).to(DType::bf16), leaf({2})});
  CHECK(stacked.dtype() == DType::f32);
  CHECK(count_nodes(stacked, "to_dtype") == 2);
  CHECK(count_nodes(stacked, "cat") == 1);
}

TEST_CASE("autocast: an op that throws leaves autocast as it was", "[cpu][autocast]") {
  AutocastGuard autocast(DType::f16);
  CHECK_THROWS_AS(matmul(input({2, 3}, DType::f32), input({2, 3}, DType::f32)), ShapeError);
  CHECK(autocast_dtype() == DType::f16);
}

TEST_CASE("AutocastGuard nests and restores", "[cpu][autocast]") {
  REQUIRE_FALSE(autocast_dtype().has_value());
  const Tensor a = input({2, 3}, DType::f32), b = input({3, 2}, DType::f32);
  {
    AutocastGuard outer(DType::bf16);
    CHECK(autocast_dtype() == DType::bf16);
    {
      AutocastGuard inner(DType::f16);
      CHECK(matmul(a, b).dtype() == DType::f16);
      {
        AutocastGuard off(std::nullopt);  // a keep-in-f32 region
        CHECK_FALSE(autocast_dtype().has_value());
        CHECK(matmul(a, b).dtype() == DType::f32);
      }
      CHECK(autocast_dtype() == DType::f16);
    }
    CHECK(matmul(a, b).dtype() == DType::bf16);
    CHECK_THROWS_AS(AutocastGuard(DType::f32), ValueError);
    CHECK(autocast_dtype() == DType::bf16);
  }
  CHECK_FALSE(autocast_dtype().has_value());
}

TEST_CASE("rope casts its tables to the input's dtype", "[cpu][autocast]") {
  const Tensor x = rand_values({2, 3, 5, 6}, DType::f64);
  const RopeTables f64 = rope_tables(1, 5, 6, 100.0, {.dtype = DType::f64});
  const RopeTables f32 = rope_tables(1, 5, 6, 100.0);
  const Tensor expected = rope(x, f64.cos, f64.sin);
  const Tensor mixed = rope(x, f32.cos, f32.sin);
  CHECK(mixed.dtype() == DType::f64);
  testing::require_close(mixed, expected, 1e-6, 1e-6);
  const Tensor low = rope(x.to(DType::bf16), f32.cos, f32.sin);
  CHECK(low.dtype() == DType::bf16);
  testing::require_close(low, expected, 2e-2, 2e-2);
}

TEST_CASE("an op's DeviceError names the op", "[cuda][autocast]") {
  if (!testing::cuda_ready()) return;
  const Tensor host = input({2, 3}, DType::f32), device = input({3, 2}, DType::f32).to(testing::kCuda0);
  CHECK_THROWS_WITH(matmul(host, device), Catch::Contains("matmul") && Catch::Contains("different devices"));
  CHECK_THROWS_WITH(add(host, device.t()), Catch::Contains("add"));
  CHECK_THROWS_WITH(cat({host, device.t()}), Catch::Contains("cat"));
  AutocastGuard autocast(DType::bf16);
  CHECK_THROWS_AS(linear(host, device, Tensor()), DeviceError);
  CHECK(autocast_dtype() == DType::bf16);
}
