// Op cases: the elementwise family (libgenesis/ops/op_cases.h): unary, binary, compare, select.
#include <cmath>

#include "libgenesis/core/error.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/op_cases_family.h"

namespace genesis::cases {
namespace {

constexpr double kBoolBytes = 1;  // masks and comparison results

// One input per shape, of the kinds given in order (normal past the end); masks are never
// differentiable, and `differentiable = false` makes none of them so (comparisons).
CaseInputs inputs_of(std::vector<InputKind> kinds, bool differentiable = true) {
  return [kinds = std::move(kinds), differentiable](const OpArgs& args) {
    std::vector<CaseInput> inputs;
    for (size_t i = 0; i < args.shapes.size(); ++i) {
      InputKind kind = i < kinds.size() ? kinds[i] : InputKind::normal;
      inputs.push_back({args.shapes[i], kind, 0, differentiable && kind != InputKind::mask});
    }
    return inputs;
  };
}

// A unary op streamed over one tensor (the default cost: one pass in, one out).
OpCase unary_case(std::string name, OpId op, CaseForward forward, std::string torch,
                  InputKind kind = InputKind::normal) {
  return {.name = std::move(name),
          .op = op,
          .test = {.shapes = {{2, 3, 5}}},
          .bench = {.shapes = {{2048, 2048}}},
          .inputs = kind == InputKind::normal ? CaseInputs() : inputs_of({kind}),
          .forward = std::move(forward),
          .torch = std::move(torch)};
}

// A broadcasting binary op; the test broadcasts both ways ([2, 1, 4] with [3, 1]).
OpCase binary_case(std::string name, OpId op, CaseForward forward, std::string torch,
                   std::vector<InputKind> kinds = {}) {
  return {.name = std::move(name),
          .op = op,
          .test = {.shapes = {{2, 1, 4}, {3, 1}}},
          .bench = {.shapes = {{2048, 2048}, {2048, 2048}}},
          .min_shapes = 2,
          .max_shapes = 2,
          .inputs = kinds.empty() ? CaseInputs() : inputs_of(std::move(kinds)),
          .forward = std::move(forward),
          .cost = binary_cost,
          .torch = std::move(torch)};
}

// Inputs read once, the bool result written once; there is no backward.
OpCost compare_cost(const OpArgs& args, bool, double es) {
  const Shape out = broadcast_shapes(args.shapes.at(0), args.shapes.at(1));
  return {(numel_d(args.shapes[0]) + numel_d(args.shapes[1])) * es + numel_d(out) * kBoolBytes, 0};
}

OpCase compare_case(std::string name, OpId op, CaseForward forward, std::string torch) {
  // Continuous random inputs: ties have probability 0, so CUDA and the CPU agree exactly.
  return {.name = std::move(name),
          .op = op,
          .test = {.shapes = {{3, 5}, {5}}},
          .bench = {.shapes = {{2048, 2048}, {2048, 2048}}},
          .min_shapes = 2,
          .max_shapes = 2,
          .inputs = inputs_of({}, false),
          .forward = std::move(forward),
          .cost = compare_cost,
          .torch = std::move(torch)};
}

// Data inputs and the result at the element size, masks at one byte; the backward reads the
// output gradient and the mask and writes the data gradients: as much again.
CaseCost masked_cost(size_t mask) {
  return [mask](const OpArgs& args, bool backward, double es) {
    double bytes = 0;
    Shape out;
    for (size_t i = 0; i < args.shapes.size(); ++i) {
      bytes += numel_d(args.shapes[i]) * (i == mask ? kBoolBytes : es);
      out = broadcast_shapes(out, args.shapes[i]);
    }
    bytes += numel_d(out) * es;
    return OpCost{backward ? 2 * bytes : bytes, 0};
  };
}

std::string check_finite_scalar(const OpArgs& args) {
  return std::isfinite(args.scalar) ? "" : detail::concat("scalar must be finite, got ", args.scalar);
}

}  // namespace

void append_elementwise_cases(std::vector<OpCase>& cases) {
  using X = const std::vector<Tensor>&;
  using O = const TensorOptions&;
  constexpr InputKind kPositive = InputKind::positive;

  // --- unary ---------------------------------------------------------------
  cases.push_back(unary_case("neg", OpId::neg, unary(&genesis::neg), "torch.neg(x[0])"));
  cases.push_back(unary_case("abs", OpId::abs, unary(&genesis::abs), "torch.abs(x[0])"));
  cases.push_back(unary_case("exp", OpId::exp, unary(&genesis::exp), "torch.exp(x[0])"));
  cases.push_back(unary_case("log", OpId::log, unary(&genesis::log), "torch.log(x[0])", kPositive));
  cases.push_back(unary_case("log1p", OpId::log1p, unary(&genesis::log1p), "torch.log1p(x[0])", kPositive));
  cases.push_back(unary_case("sqrt", OpId::sqrt, unary(&genesis::sqrt), "torch.sqrt(x[0])", kPositive));
  cases.push_back(unary_case("rsqrt", OpId::rsqrt, unary(&genesis::rsqrt), "torch.rsqrt(x[0])", kPositive));
  cases.push_back(unary_case("sin", OpId::sin, unary(&genesis::sin), "torch.sin(x[0])"));
  cases.push_back(unary_case("cos", OpId::cos, unary(&genesis::cos), "torch.cos(x[0])"));
  cases.push_back(unary_case("tanh", OpId::tanh, unary(&genesis::tanh), "torch.tanh(x[0])"));
  cases.push_back(unary_case("sigmoid", OpId::sigmoid, unary(&genesis::sigmoid), "torch.sigmoid(x[0])"));
  cases.push_back(unary_case("relu", OpId::relu, unary(&genesis::relu), "F.relu(x[0])"));
  // gelu: exact by default; variant "tanh" picks the tanh approximation (as the bench suites name it).
  cases.push_back(unary_case(
      "gelu", OpId::gelu,
      [](const OpArgs& a, X x, O) {
        return gelu(x[0], a.variant == "tanh" ? GeluApproximation::tanh : GeluApproximation::none);
      },
      "F.gelu(x[0], approximate='tanh' if a['variant'] == 'tanh' else 'none')"));
  cases.back().check_args = [](const OpArgs& a) {
    return a.variant.empty() || a.variant == "none" || a.variant == "tanh"
               ? std::string()
               : detail::concat("gelu takes variant = \"tanh\" or \"none\", got '", a.variant, "'");
  };
  cases.push_back(unary_case(
      "gelu_tanh", OpId::gelu_tanh, [](const OpArgs&, X x, O) { return gelu(x[0], GeluApproximation::tanh); },
      "F.gelu(x[0], approximate='tanh')"));
  cases.push_back(unary_case("silu", OpId::silu, unary(&genesis::silu), "F.silu(x[0])"));
  cases.push_back(unary_case(
      "softplus", OpId::softplus, [](const OpArgs&, X x, O) { return softplus(x[0]); }, "F.softplus(x[0])"));
  // x ** scalar over positive bases, so any real exponent is defined.
  cases.push_back(unary_case(
      "pow_scalar", OpId::pow_scalar, [](const OpArgs& a, X x, O) { return pow(x[0], a.scalar); },
      "torch.pow(x[0], a['scalar'])", kPositive));
  cases.back().test.scalar = 1.5;
  cases.back().check_args = check_finite_scalar;
  cases.push_back(unary_case(
      "clamp", OpId::clamp, [](const OpArgs&, X x, O) { return clamp(x[0], -0.5, 0.5); },
      "torch.clamp(x[0], -0.5, 0.5)"));
  cases.push_back(unary_case("sign", OpId::sign, unary(&genesis::sign), "torch.sign(x[0])"));
  // x * scalar: the scalar form of mul (bench suites: "mul_scalar", scalar = 1.5).
  cases.push_back(unary_case(
      "mul_scalar", OpId::mul, [](const OpArgs& a, X x, O) { return mul(x[0], a.scalar); }, "x[0] * a['scalar']"));
  cases.back().test.scalar = 1.5;
  cases.back().check_args = check_finite_scalar;

  // --- binary (broadcasting) -----------------------------------------------
  cases.push_back(binary_case("add", OpId::add, binary(&genesis::add), "x[0] + x[1]"));
  cases.push_back(binary_case("sub", OpId::sub, binary(&genesis::sub), "x[0] - x[1]"));
  cases.push_back(binary_case("mul", OpId::mul, binary(&genesis::mul), "x[0] * x[1]"));
  cases.push_back(binary_case("div", OpId::div, binary(&genesis::div), "x[0] / x[1]", {InputKind::normal, kPositive}));
  // Positive bases: a real power for any exponent, and a finite log for the exponent's gradient.
  cases.push_back(binary_case("pow", OpId::pow, binary(&genesis::pow), "torch.pow(x[0], x[1])", {kPositive}));
  cases.push_back(binary_case("maximum", OpId::maximum, binary(&genesis::maximum), "torch.maximum(x[0], x[1])"));
  cases.push_back(binary_case("minimum", OpId::minimum, binary(&genesis::minimum), "torch.minimum(x[0], x[1])"));

  // --- compare (bool results) ----------------------------------------------
  cases.push_back(compare_case("eq", OpId::eq, binary(&genesis::eq), "torch.eq(x[0], x[1])"));
  cases.push_back(compare_case("ne", OpId::ne, binary(&genesis::ne), "torch.ne(x[0], x[1])"));
  cases.push_back(compare_case("lt", OpId::lt, binary(&genesis::lt), "torch.lt(x[0], x[1])"));
  cases.push_back(compare_case("le", OpId::le, binary(&genesis::le), "torch.le(x[0], x[1])"));
  cases.push_back(compare_case("gt", OpId::gt, binary(&genesis::gt), "torch.gt(x[0], x[1])"));
  cases.push_back(compare_case("ge", OpId::ge, binary(&genesis::ge), "torch.ge(x[0], x[1])"));

  // --- select ----------------------------------------------------------------
  // where(mask, a, b), all three broadcast: a [3, 1] mask, a full a and a row b.
  cases.push_back({.name = "where",
                   .op = OpId::where,
                   .test = {.shapes = {{3, 1}, {3, 5}, {5}}},
                   .bench = {.shapes = {{2048, 2048}, {2048, 2048}, {2048, 2048}}},
                   .min_shapes = 3,
                   .max_shapes = 3,
                   .inputs = inputs_of({InputKind::mask}),
                   .forward = [](const OpArgs&, X x, O) { return where(x[0], x[1], x[2]); },
                   .cost = masked_cost(0),
                   .torch = "torch.where(x[0], x[1], x[2])"});
  // masked_fill(x, mask, scalar): a row mask broadcast over x.
  cases.push_back({.name = "masked_fill",
                   .op = OpId::masked_fill,
                   .test = {.shapes = {{3, 5}, {5}}, .scalar = -1.5},
                   .bench = {.shapes = {{2048, 2048}, {2048, 2048}}},
                   .min_shapes = 2,
                   .max_shapes = 2,
                   .inputs = inputs_of({InputKind::normal, InputKind::mask}),
                   .forward = [](const OpArgs& a, X x, O) { return masked_fill(x[0], x[1], a.scalar); },
                   .cost = masked_cost(1),
                   .torch = "x[0].masked_fill(x[1], a['scalar'])",
                   // -inf is a common fill (attention masks); NaN is not meant.
                   .check_args =
                       [](const OpArgs& a) {
                         return std::isnan(a.scalar) ? std::string("masked_fill's scalar is NaN") : std::string();
                       }});
}

}  // namespace genesis::cases
