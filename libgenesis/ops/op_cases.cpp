// The op-case registry assembled from its family files, and the helpers they share.
#include "libgenesis/ops/op_cases.h"

#include <algorithm>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/op_cases_family.h"

namespace genesis {

std::string_view input_kind_name(InputKind kind) {
  switch (kind) {
    case InputKind::normal: return "normal";
    case InputKind::positive: return "positive";
    case InputKind::probability: return "probability";
    case InputKind::index: return "index";
    case InputKind::mask: return "mask";
  }
  return "?";
}

std::span<const OpCase> op_cases() {
  static const std::vector<OpCase> registry = [] {
    std::vector<OpCase> all;
    cases::append_view_cases(all);
    cases::append_elementwise_cases(all);
    cases::append_reduce_cases(all);
    cases::append_nn_cases(all);
    cases::append_index_cases(all);
    for (size_t i = 0; i < all.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        GENESIS_CHECK(all[i].name != all[j].name, ValueError, "op cases: the name '", all[i].name, "' is used twice");
    return all;
  }();
  return registry;
}

const OpCase* find_op_case(std::string_view name) {
  for (const OpCase& c : op_cases())
    if (c.name == name) return &c;
  return nullptr;
}

std::vector<CaseInput> case_inputs(const OpCase& c, const OpArgs& args) {
  return c.inputs ? c.inputs(args) : cases::data_inputs(args);
}

std::string check_case_args(const OpCase& c, const OpArgs& args) {
  if (args.shapes.size() < c.min_shapes || args.shapes.size() > c.max_shapes)
    return c.min_shapes == c.max_shapes
               ? detail::concat("expects ", c.min_shapes, " shapes, got ", args.shapes.size())
               : detail::concat("expects ", c.min_shapes, " to ", c.max_shapes, " shapes, got ", args.shapes.size());
  return c.check_args ? c.check_args(args) : std::string();
}

OpCost case_cost(const OpCase& c, const OpArgs& args, bool backward, double element_bytes) {
  return c.cost ? c.cost(args, backward, element_bytes) : streaming_cost(args, backward, element_bytes);
}

bool takes_gradient(const CaseInput& input) {
  return input.differentiable && input.kind != InputKind::index && input.kind != InputKind::mask;
}

bool has_gradient_input(const OpCase& c, const OpArgs& args) {
  for (const CaseInput& in : case_inputs(c, args))
    if (takes_gradient(in)) return true;
  return false;
}

bool gradient_checked(const OpCase& c) {
  return op_info(c.op).backward && has_gradient_input(c, c.test);
}

bool op_gradient_checked(OpId op) {
  return std::ranges::any_of(op_cases(), [op](const OpCase& c) { return c.op == op && gradient_checked(c); });
}

Tensor draw_case_input(const CaseInput& input, DType dtype, Device device, Generator& gen) {
  NoGradGuard no_grad;
  switch (input.kind) {
    case InputKind::index:
      return randint(0, input.bound, input.shape, {.dtype = DType::i64, .device = device}, &gen);
    case InputKind::mask:
      return bernoulli(input.shape, 0.5, {.dtype = DType::boolean, .device = device}, &gen);
    case InputKind::positive:
      return add(mul(rand(input.shape, {.dtype = DType::f32, .device = device}, &gen), 1.5), 0.5).to(dtype);
    case InputKind::probability:
      return add(mul(rand(input.shape, {.dtype = DType::f32, .device = device}, &gen), 0.9), 0.05).to(dtype);
    case InputKind::normal: break;
  }
  return randn(input.shape, {.dtype = DType::f32, .device = device}, &gen).to(dtype);
}

double numel_d(const Shape& s) {
  return static_cast<double>(numel_of(s));
}

OpCost streaming_cost(const OpArgs& args, bool backward, double es) {
  double x = numel_d(args.shapes.at(0)) * es;
  return {backward ? 5 * x : 2 * x, 0};
}

namespace cases {

std::vector<CaseInput> data_inputs(const OpArgs& args) {
  std::vector<CaseInput> inputs;
  for (const Shape& s : args.shapes) inputs.push_back({s});
  return inputs;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1, db = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[out.size() - 1 - i] = std::max(da, db);
  }
  return out;
}

OpCost binary_cost(const OpArgs& args, bool backward, double es) {
  double total = 0;
  Shape out;
  for (const Shape& s : args.shapes) {
    total += numel_d(s);
    out = broadcast_shapes(out, s);
  }
  double fwd = (total + numel_d(out)) * es;
  return {backward ? 2 * fwd : fwd, 0};
}

OpCost reduction_cost(const OpArgs& args, bool backward, double es, const Axes& axes) {
  const Shape& s = args.shapes.at(0);
  double reduced = 1;
  if (axes.empty()) reduced = numel_d(s);
  for (int64_t a : axes) reduced *= static_cast<double>(s[static_cast<size_t>(a < 0 ? a + std::ssize(s) : a)]);
  double in = numel_d(s) * es, out = in / reduced;
  return {backward ? 2 * (in + out) : in + out, 0};
}

std::string check_dim(const OpArgs& args) {
  const int64_t rank = std::ssize(args.shapes.at(0));
  if (rank < 1) return "expects an input of rank 1 or more";
  if (args.dim < -rank || args.dim >= rank) return detail::concat("dim ", args.dim, " is out of range for rank ", rank);
  return "";
}

std::string check_axes(const OpArgs& args) {
  const int64_t rank = std::ssize(args.shapes.at(0));
  for (int64_t a : args.axes)
    if (a < -rank || a >= rank) return detail::concat("axis ", a, " is out of range for rank ", rank);
  return "";
}

CaseForward unary(Tensor (*fn)(const Tensor&)) {
  return [fn](const OpArgs&, const std::vector<Tensor>& x, const TensorOptions&) { return fn(x[0]); };
}

CaseForward binary(Tensor (*fn)(const Tensor&, const Tensor&)) {
  return [fn](const OpArgs&, const std::vector<Tensor>& x, const TensorOptions&) { return fn(x[0], x[1]); };
}

}  // namespace cases
}  // namespace genesis
