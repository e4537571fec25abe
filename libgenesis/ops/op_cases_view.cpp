// Op cases: the view family (libgenesis/ops/op_cases.h): views, copies, factories and random
// draws. Axis arguments come from args.dim; factories and random draws take their size from
// args.shapes[0] and their dtype and device from the call's options.
#include <cmath>
#include <numeric>

#include "libgenesis/core/error.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/op_cases_family.h"

namespace genesis::cases {
namespace {

using Inputs = std::vector<Tensor>;
using Options = const TensorOptions&;

constexpr double kIndexBytes = 8;  // randint draws i64
constexpr uint64_t kSeed = 1234;   // random cases: two calls draw the same values

int64_t rank_of(const OpArgs& a) {
  return std::ssize(a.shapes.at(0));
}

CaseCheck rank_at_least(int64_t rank) {
  return [rank](const OpArgs& a) {
    return rank_of(a) < rank
               ? detail::concat("expects an input of rank ", rank, " or more, got ", shape_str(a.shapes[0]))
               : std::string();
  };
}

CaseCheck rank_exactly(int64_t rank) {
  return [rank](const OpArgs& a) {
    return rank_of(a) != rank ? detail::concat("expects a shape of rank ", rank, ", got ", shape_str(a.shapes[0]))
                              : std::string();
  };
}

// args.dim names an axis of shapes[0] whose size is at least `min_size`.
CaseCheck dim_of_size(int64_t min_size) {
  return [min_size](const OpArgs& a) -> std::string {
    if (std::string why = check_dim(a); !why.empty()) return why;
    const int64_t rank = rank_of(a);
    const int64_t size = a.shapes[0][static_cast<size_t>(a.dim < 0 ? a.dim + rank : a.dim)];
    return size < min_size ? detail::concat("dim ", a.dim, " has size ", size, ", fewer than ", min_size) : "";
  };
}

int64_t dim_size(const OpArgs& a) {
  return a.shapes[0][static_cast<size_t>(a.dim < 0 ? a.dim + rank_of(a) : a.dim)];
}

// The elements of shapes[0] that narrow and slice keep (size / 2 along args.dim), and select.
double half_of_dim(const OpArgs& a) {
  return numel_d(a.shapes[0]) / static_cast<double>(dim_size(a)) * static_cast<double>(dim_size(a) / 2);
}

double one_of_dim(const OpArgs& a) {
  return numel_d(a.shapes[0]) / static_cast<double>(dim_size(a));
}

// A view moves no data; neither does its backward (the gradient is a view of the output's).
OpCost view_cost(const OpArgs&, bool, double) {
  return {};
}

// A view of `out_numel` of shapes[0]'s elements (narrow, slice, select, expand): free forward;
// the backward reads the output gradient and writes the input's (zero-filled or summed).
CaseCost part_view_cost(double (*out_numel)(const OpArgs&)) {
  return [out_numel](const OpArgs& a, bool backward, double es) {
    return OpCost{backward ? (out_numel(a) + numel_d(a.shapes[0])) * es : 0, 0};
  };
}

// Factories and random draws: the output written once, nothing read.
CaseCost written_cost(double element_bytes = 0) {
  return [element_bytes](const OpArgs& a, bool, double es) {
    return OpCost{numel_d(a.shapes.at(0)) * (element_bytes > 0 ? element_bytes : es), 0};
  };
}

// One input of shapes[0] through a view; the test shape is odd-sized in every axis.
OpCase view_case(std::string name, OpId op, CaseForward forward, std::string torch, CaseCost cost = view_cost) {
  return {.name = std::move(name),
          .op = op,
          .test = {.shapes = {{3, 4, 5}}, .dim = 1},
          .bench = {.shapes = {{2048, 2048}}},
          .forward = std::move(forward),
          .cost = std::move(cost),
          .torch = std::move(torch)};
}

// A factory or random draw of shapes[0] in options' dtype on options' device.
OpCase factory_case(std::string name, OpId op, Shape test, Shape bench, CaseForward forward, std::string torch,
                    CaseCost cost = written_cost()) {
  return {.name = std::move(name),
          .op = op,
          .test = {.shapes = {std::move(test)}},
          .bench = {.shapes = {std::move(bench)}},
          .inputs = [](const OpArgs&) { return std::vector<CaseInput>{}; },
          .forward = std::move(forward),
          .cost = std::move(cost),
          .torch = std::move(torch)};
}

OpCase random_case(std::string name, OpId op, OutputMoments moments, CaseForward forward, std::string torch,
                   CaseCost cost = written_cost()) {
  OpCase c =
      factory_case(std::move(name), op, {3, 5}, {2048, 2048}, std::move(forward), std::move(torch), std::move(cost));
  c.random = true;
  c.moments = moments;
  return c;
}

// Axis orders: all axes reversed, and the last axis moved to the front (torch's movedim(-1, 0)).
std::vector<int64_t> reversed_axes(int64_t rank) {
  std::vector<int64_t> axes(static_cast<size_t>(rank));
  std::iota(axes.rbegin(), axes.rend(), 0);
  return axes;
}

std::vector<int64_t> last_axis_first(int64_t rank) {
  std::vector<int64_t> axes(static_cast<size_t>(rank));
  std::iota(axes.begin(), axes.end(), -1);
  axes[0] = rank - 1;
  return axes;
}

}  // namespace

void append_view_cases(std::vector<OpCase>& cases) {
  // --- views ---------------------------------------------------------------
  // view needs a layout it can view: contiguous inputs only. It merges the leading axes.
  cases.push_back(view_case(
      "view", OpId::view,
      [](const OpArgs&, const Inputs& x, Options) {
        return x[0].view({-1, x[0].size(-1)});
      },
      "x[0].view(-1, x[0].shape[-1])"));
  cases.back().check_args = rank_at_least(1);
  cases.back().strided_inputs = false;
  // [.., n] -> [n, -1]: a view of contiguous inputs, a copy of strided ones.
  cases.push_back(view_case(
      "reshape", OpId::reshape,
      [](const OpArgs&, const Inputs& x, Options) {
        return x[0].reshape({x[0].size(-1), -1});
      },
      "x[0].reshape(x[0].shape[-1], -1)"));
  cases.back().check_args = rank_at_least(1);
  cases.push_back(view_case(
      "permute", OpId::permute,
      [](const OpArgs&, const Inputs& x, Options) { return x[0].permute(reversed_axes(x[0].dim())); },
      "x[0].permute(*reversed(range(x[0].dim())))"));
  cases.push_back(view_case(
      "transpose", OpId::transpose, [](const OpArgs&, const Inputs& x, Options) { return x[0].transpose(-2, -1); },
      "x[0].transpose(-2, -1)"));
  cases.back().check_args = rank_at_least(2);
  // The middle half of axis args.dim (start size / 4, length size / 2).
  cases.push_back(view_case(
      "narrow", OpId::narrow,
      [](const OpArgs& a, const Inputs& x, Options) {
        const int64_t n = x[0].size(a.dim);
        return x[0].narrow(a.dim, n / 4, n / 2);
      },
      "x[0].narrow(a['dim'], x[0].shape[a['dim']] // 4, x[0].shape[a['dim']] // 2)", part_view_cost(half_of_dim)));
  cases.back().check_args = dim_of_size(2);
  // Every second element of axis args.dim, from 1: a strided view.
  cases.push_back(view_case(
      "slice", OpId::slice,
      [](const OpArgs& a, const Inputs& x, Options) { return x[0].slice(a.dim, 1, x[0].size(a.dim), 2); },
      "x[0][(slice(None),) * (a['dim'] % x[0].dim()) + (slice(1, None, 2),)]", part_view_cost(half_of_dim)));
  cases.back().check_args = dim_of_size(2);
  cases.push_back(view_case(
      "select", OpId::select,
      [](const OpArgs& a, const Inputs& x, Options) { return x[0].select(a.dim, x[0].size(a.dim) / 2); },
      "x[0].select(a['dim'], x[0].shape[a['dim']] // 2)", part_view_cost(one_of_dim)));
  cases.back().check_args = dim_of_size(1);
  // shapes[0] the input, shapes[1] the shape it is expanded to (new leading axes and size-1 axes).
  cases.push_back({.name = "expand",
                   .op = OpId::expand,
                   .test = {.shapes = {{3, 1, 5}, {2, 3, 4, 5}}},
                   .bench = {.shapes = {{1, 2048}, {2048, 2048}}},
                   .min_shapes = 2,
                   .max_shapes = 2,
                   .inputs = [](const OpArgs& a) { return std::vector<CaseInput>{{a.shapes[0]}}; },
                   .forward = [](const OpArgs& a, const Inputs& x, Options) { return x[0].expand(a.shapes[1]); },
                   .cost = part_view_cost([](const OpArgs& a) { return numel_d(a.shapes[1]); }),
                   .torch = "x[0].expand(*a['shapes'][1])",
                   .check_args =
                       [](const OpArgs& a) {
                         return a.shapes[0].size() <= a.shapes[1].size() &&
                                        broadcast_shapes(a.shapes[0], a.shapes[1]) == a.shapes[1]
                                    ? std::string()
                                    : detail::concat("shape ", shape_str(a.shapes[0]), " does not expand to ",
                                                     shape_str(a.shapes[1]));
                       }});
  // Drops every axis of size 1.
  cases.push_back(view_case(
      "squeeze", OpId::squeeze, [](const OpArgs&, const Inputs& x, Options) { return x[0].squeeze(); },
      "x[0].squeeze()"));
  cases.back().test.shapes = {{3, 1, 5, 1}};
  cases.back().bench.shapes = {{2048, 1, 2048}};
  // A new axis at args.dim (in [-rank - 1, rank]).
  cases.push_back(view_case(
      "unsqueeze", OpId::unsqueeze, [](const OpArgs& a, const Inputs& x, Options) { return x[0].unsqueeze(a.dim); },
      "x[0].unsqueeze(a['dim'])"));
  cases.back().check_args = [](const OpArgs& a) {
    const int64_t rank = rank_of(a) + 1;
    return a.dim < -rank || a.dim >= rank
               ? detail::concat("dim ", a.dim, " is out of range for unsqueezing rank ", rank - 1)
               : std::string();
  };
  // To 1-D: a view of contiguous inputs, a copy of strided ones.
  cases.push_back(view_case(
      "flatten", OpId::flatten, [](const OpArgs&, const Inputs& x, Options) { return x[0].flatten(); },
      "x[0].flatten()"));

  // --- copies (one streaming pass: the default cost) -----------------------
  // The last axis moved to the front, so the input is not contiguous (strided inputs neither).
  cases.push_back({.name = "contiguous",
                   .op = OpId::contiguous,
                   .test = {.shapes = {{3, 4, 5}}},
                   .bench = {.shapes = {{64, 256, 256}}},
                   .forward = [](const OpArgs&, const Inputs& x,
                                 Options) { return x[0].permute(last_axis_first(x[0].dim())).contiguous(); },
                   .torch = "x[0].movedim(-1, 0).contiguous()",
                   .check_args = rank_at_least(2)});
  // The bench case "transpose_copy" of bench_ops.cpp / torch_ops.py.
  cases.push_back(
      {.name = "transpose_copy",
       .op = OpId::contiguous,
       .test = {.shapes = {{5, 7}}},
       .bench = {.shapes = {{4096, 4096}}},
       .forward = [](const OpArgs&, const Inputs& x, Options) { return x[0].transpose(-2, -1).contiguous(); },
       .torch = "x[0].transpose(-2, -1).contiguous()",
       .check_args =
           [](const OpArgs& a) { return rank_of(a) != 2 ? std::string("the input must be 2-D") : std::string(); }});
  cases.push_back({.name = "clone",
                   .op = OpId::clone,
                   .test = {.shapes = {{2, 3, 5}}},
                   .bench = {.shapes = {{2048, 2048}}},
                   .forward = [](const OpArgs&, const Inputs& x, Options) { return x[0].clone(); },
                   .torch = "x[0].clone()"});
  // Widening to f64: exact from every floating dtype, so the CUDA comparison is exact and the
  // float64 gradient check's differences stay exact (there it is the identity: f64 to f64
  // returns the input, and every real cast from f64 narrows). Reads es, writes 8 bytes per
  // element; the backward reads 8 and writes es.
  cases.push_back({.name = "to_dtype",
                   .op = OpId::to_dtype,
                   .test = {.shapes = {{2, 3, 5}}},
                   .bench = {.shapes = {{2048, 2048}}},
                   .forward = [](const OpArgs&, const Inputs& x, Options) { return x[0].to(DType::f64); },
                   .cost =
                       [](const OpArgs& a, bool backward, double es) {
                         const double fwd = numel_d(a.shapes.at(0)) * (es + 8);
                         return OpCost{backward ? 2 * fwd : fwd, 0};
                       },
                   .torch = "x[0].to(torch.float64)"});
  // The bench case "cast" of bench_ops.cpp / torch_ops.py: to the dtype args.variant names
  // (f32, f64, bf16, f16), costed as one streaming pass at the input's element size.
  cases.push_back(
      {.name = "cast",
       .op = OpId::to_dtype,
       .test = {.shapes = {{2, 3, 5}}, .variant = "f64"},
       .bench = {.shapes = {{2048, 2048}}, .variant = "bf16"},
       .forward = [](const OpArgs& a, const Inputs& x, Options) { return x[0].to(*parse_dtype(a.variant)); },
       .torch = "x[0].to({'f32': torch.float32, 'f64': torch.float64, 'bf16': torch.bfloat16, "
                "'f16': torch.float16}[a['variant']])",
       .check_args =
           [](const OpArgs& a) {
             const std::string& v = a.variant;
             return v == "f32" || v == "f64" || v == "bf16" || v == "f16"
                        ? std::string()
                        : detail::concat("cast needs variant = the target dtype (f32, f64, bf16 or f16), got '", v,
                                         "'");
           }});
  // A round trip through the host: a CUDA input goes to the CPU and back, each leg reading and
  // writing the tensor once (4 passes); the backward takes the gradient the same way. On the
  // CPU there is no other device and the call returns its input, as PyTorch's does.
  cases.push_back({.name = "to_device",
                   .op = OpId::to_device,
                   .test = {.shapes = {{2, 3, 5}}},
                   .bench = {.shapes = {{2048, 2048}}},
                   .forward = [](const OpArgs&, const Inputs& x,
                                 Options) { return x[0].to(kCPU).to(x[0].device()); },
                   .cost =
                       [](const OpArgs& a, bool backward, double es) {
                         const double fwd = 4 * numel_d(a.shapes.at(0)) * es;
                         return OpCost{backward ? 2 * fwd : fwd, 0};
                       },
                   .torch = "x[0].to('cpu').to(device)"});

  // --- factories: written once (no inputs, no backward) ---------------------
  cases.push_back(factory_case(
      "full", OpId::full, {3, 5}, {2048, 2048},
      [](const OpArgs& a, const Inputs&, Options o) { return full(a.shapes[0], a.scalar, o); },
      "torch.full(a['shapes'][0], a['scalar'], dtype=dtype, device=device)"));
  cases.back().check_args = [](const OpArgs& a) {
    return std::isfinite(a.scalar) ? std::string() : detail::concat("scalar must be finite, got ", a.scalar);
  };
  // 1-D: 0, 1, ..., n - 1 for shapes[0] = [n].
  cases.push_back(factory_case(
      "arange", OpId::arange, {17}, {1 << 22},
      [](const OpArgs& a, const Inputs&, Options o) {
        return arange(0.0, static_cast<double>(a.shapes[0][0]), 1.0, o);
      },
      "torch.arange(0, a['shapes'][0][0], 1, dtype=dtype, device=device)"));
  cases.back().check_args = rank_exactly(1);
  // 1-D: n points from -1 to 1 for shapes[0] = [n].
  cases.push_back(factory_case(
      "linspace", OpId::linspace, {17}, {1 << 22},
      [](const OpArgs& a, const Inputs&, Options o) { return linspace(-1.0, 1.0, a.shapes[0][0], o); },
      "torch.linspace(-1, 1, a['shapes'][0][0], dtype=dtype, device=device)"));
  cases.back().check_args = rank_exactly(1);
  // shapes[0] = [n, m].
  cases.push_back(factory_case(
      "eye", OpId::eye, {5, 7}, {2048, 2048},
      [](const OpArgs& a, const Inputs&, Options o) { return eye(a.shapes[0][0], a.shapes[0][1], o); },
      "torch.eye(*a['shapes'][0], dtype=dtype, device=device)"));
  cases.back().check_args = rank_exactly(2);

  // --- random draws: a fixed seed, so two calls give the same values --------
  // U[0, 1): mean 1/2, variance 1/12.
  cases.push_back(random_case(
      "rand", OpId::rand, {.mean = 0.5, .variance = 1.0 / 12, .min = 0, .max = 1},
      [](const OpArgs& a, const Inputs&, Options o) {
        Generator gen(kSeed);
        return rand(a.shapes[0], o, &gen);
      },
      "torch.rand(a['shapes'][0], dtype=dtype, device=device)"));
  cases.push_back(random_case(
      "randn", OpId::randn, {.mean = 0, .variance = 1},
      [](const OpArgs& a, const Inputs&, Options o) {
        Generator gen(kSeed);
        return randn(a.shapes[0], o, &gen);
      },
      "torch.randn(a['shapes'][0], dtype=dtype, device=device)"));
  // Integers in [0, 100), always i64: mean 99/2, variance (100^2 - 1)/12.
  cases.push_back(random_case(
      "randint", OpId::randint, {.mean = 49.5, .variance = (100.0 * 100 - 1) / 12, .min = 0, .max = 99},
      [](const OpArgs& a, const Inputs&, Options o) {
        Generator gen(kSeed);
        return randint(0, 100, a.shapes[0], {.dtype = DType::i64, .device = o.device}, &gen);
      },
      "torch.randint(0, 100, a['shapes'][0], dtype=torch.int64, device=device)", written_cost(kIndexBytes)));
  // Zeros and ones with probability 1/2, in the case's dtype: mean 1/2, variance 1/4.
  cases.push_back(random_case(
      "bernoulli", OpId::bernoulli, {.mean = 0.5, .variance = 0.25, .min = 0, .max = 1},
      [](const OpArgs& a, const Inputs&, Options o) {
        Generator gen(kSeed);
        return bernoulli(a.shapes[0], 0.5, o, &gen);
      },
      "torch.empty(a['shapes'][0], dtype=dtype, device=device).bernoulli_(0.5)"));
}

}  // namespace genesis::cases
