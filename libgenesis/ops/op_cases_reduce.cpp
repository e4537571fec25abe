// Op cases: reductions (libgenesis/ops/op_cases.h).
#include "libgenesis/ops/op_cases_family.h"
#include "libgenesis/ops/reduce.h"

namespace genesis::cases {
namespace {

CaseCost over_axes() {
  return [](const OpArgs& args, bool backward, double es) { return reduction_cost(args, backward, es, args.axes); };
}

// A reduction over args.axes (all axes when empty): sum, mean, prod, var, std, norm.
OpCase axes_case(std::string name, OpId op, CaseForward forward, std::string torch) {
  return {.name = std::move(name),
          .op = op,
          .test = {.shapes = {{3, 4, 5}}, .axes = {1}},
          .bench = {.shapes = {{2048, 2048}}, .axes = {1}},
          .forward = std::move(forward),
          .cost = over_axes(),
          .torch = std::move(torch),
          .check_args = check_axes,
          .parity_rtol = 1e-5};
}

}  // namespace

void append_reduce_cases(std::vector<OpCase>& cases) {
  cases.push_back(axes_case(
      "sum", OpId::sum, [](const OpArgs& a, const std::vector<Tensor>& x, const TensorOptions&) { return sum(x[0], a.axes); },
      "x[0].sum(dim=a['axes']) if a['axes'] else x[0].sum()"));
  cases.push_back(axes_case(
      "mean", OpId::mean,
      [](const OpArgs& a, const std::vector<Tensor>& x, const TensorOptions&) { return mean(x[0], a.axes); },
      "x[0].mean(dim=a['axes']) if a['axes'] else x[0].mean()"));
  // Products of 4 factors of N(0, 1): no zero, well-conditioned gradients.
  cases.push_back(axes_case(
      "prod", OpId::prod,
      [](const OpArgs& a, const std::vector<Tensor>& x, const TensorOptions&) { return prod(x[0], a.axes); },
      "torch.prod(x[0], dim=a['axes'][0]) if len(a['axes']) == 1 else x[0].prod()"));
  cases.back().check_args = [](const OpArgs& args) {
    return args.axes.size() > 1 ? std::string("prod reduces one axis or all of them (axes = [] or [a])")
                                : check_axes(args);
  };
  cases.push_back(axes_case(
      "var", OpId::var, [](const OpArgs& a, const std::vector<Tensor>& x, const TensorOptions&) { return var(x[0], a.axes); },
      "x[0].var(dim=a['axes']) if a['axes'] else x[0].var()"));
  cases.push_back(axes_case(
      "std", OpId::std, [](const OpArgs& a, const std::vector<Tensor>& x, const TensorOptions&) { return std(x[0], a.axes); },
      "x[0].std(dim=a['axes']) if a['axes'] else x[0].std()"));
  cases.push_back(axes_case(
      "norm", OpId::norm,
      [](const OpArgs& a, const std::vector<Tensor>& x, const TensorOptions&) { return norm(x[0], 2.0, a.axes); },
      "torch.linalg.vector_norm(x[0], 2, dim=a['axes'] or None)"));
  // logsumexp over args.axes, or over args.dim when no axes are given.
  cases.push_back(
      {.name = "logsumexp",
       .op = OpId::logsumexp,
       .test = {.shapes = {{3, 4, 5}}, .dim = 1},
       .bench = {.shapes = {{4096, 4096}}},
       .forward =
           [](const OpArgs& a, const std::vector<Tensor>& x, const TensorOptions&) {
             return logsumexp(x[0], a.axes.empty() ? Axes{a.dim} : a.axes);
           },
       .cost = [](const OpArgs& a, bool backward,
                  double es) { return reduction_cost(a, backward, es, a.axes.empty() ? Axes{a.dim} : a.axes); },
       .torch = "torch.logsumexp(x[0], dim=a['axes'] or [a['dim']])",
       .check_args = [](const OpArgs& a) { return a.axes.empty() ? check_dim(a) : check_axes(a); },
       .parity_rtol = 1e-5});
  // max and min of the whole tensor (the axis forms are argmax / argmin).
  for (bool is_max : {true, false}) {
    cases.push_back({.name = is_max ? "max" : "min",
                     .op = is_max ? OpId::max : OpId::min,
                     .test = {.shapes = {{3, 4, 5}}},
                     .bench = {.shapes = {{2048, 2048}}},
                     .forward = [is_max](const OpArgs&, const std::vector<Tensor>& x,
                                         const TensorOptions&) { return is_max ? max(x[0]) : min(x[0]); },
                     .cost = [](const OpArgs& a, bool backward, double es) { return reduction_cost(a, backward, es, {}); },
                     .torch = is_max ? "x[0].max()" : "x[0].min()"});
  }
  for (bool is_max : {true, false}) {
    cases.push_back({.name = is_max ? "argmax" : "argmin",
                     .op = is_max ? OpId::argmax : OpId::argmin,
                     .test = {.shapes = {{3, 4, 5}}, .dim = 1},
                     .bench = {.shapes = {{2048, 2048}}, .dim = 1},
                     .forward = [is_max](const OpArgs& a, const std::vector<Tensor>& x, const TensorOptions&) {
                       return is_max ? argmax(x[0], a.dim) : argmin(x[0], a.dim);
                     },
                     .cost = [](const OpArgs& a, bool backward,
                                double es) { return reduction_cost(a, backward, es, Axes{a.dim}); },
                     .torch = is_max ? "torch.argmax(x[0], dim=a['dim'])" : "torch.argmin(x[0], dim=a['dim'])",
                     .check_args = check_dim});
  }
}

}  // namespace genesis::cases
