// Op cases: the index family (libgenesis/ops/op_cases.h): joining, splitting and indexing.
// Axis arguments come from args.dim. split's piece size, chunk's piece count and the diagonal of
// tril / triu come from args.scalar (an integer); repeat's counts and flip's axes from args.axes.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "libgenesis/ops/index.h"
#include "libgenesis/ops/op_cases_family.h"

namespace genesis::cases {
namespace {

using Inputs = std::vector<Tensor>;

constexpr double kIndexBytes = 8;  // index inputs are drawn as i64

int64_t rank_of(const OpArgs& a) {
  return std::ssize(a.shapes.at(0));
}

size_t axis_at(int64_t axis, int64_t rank) {
  return static_cast<size_t>(axis < 0 ? axis + rank : axis);
}

// args.dim as an index into shapes[0].
size_t axis_of(const OpArgs& a) {
  return axis_at(a.dim, rank_of(a));
}

// args.scalar is an integer (`what`), and at least 1 when `positive`.
std::string check_integer_scalar(const OpArgs& a, const char* what, bool positive) {
  if (a.scalar != std::floor(a.scalar) || (positive && a.scalar < 1))
    return detail::concat("scalar (", what, ") must be ", positive ? "a positive" : "an", " integer, got ", a.scalar);
  return "";
}

// cat and stack: the bytes of every input read once and written once into the output; the
// backward reads the output gradient and writes each input's gradient.
OpCost joined_cost(const OpArgs& a, bool backward, double es) {
  double total = 0;
  for (const Shape& s : a.shapes) total += numel_d(s) * es;
  return {backward ? 4 * total : 2 * total, 0};
}

// Read once, written once; the backward reads the output gradient and writes the input's.
OpCost copy_cost(const OpArgs& a, bool backward, double es) {
  double x = numel_d(a.shapes.at(0)) * es;
  return {backward ? 4 * x : 2 * x, 0};
}

// gather and scatter_add: the index's shape is shapes[1] when given, else the data's shape.
Shape index_shape(const OpArgs& a) {
  return a.shapes.size() > 1 ? a.shapes[1] : a.shapes[0];
}

// The index has the data's rank and fits inside it in every dimension but args.dim.
std::string check_index_shape(const OpArgs& a) {
  if (std::string why = check_dim(a); !why.empty()) return why;
  const Shape& x = a.shapes[0];
  const Shape index = index_shape(a);
  if (index.size() != x.size())
    return detail::concat("index shape ", shape_str(index), " must have the rank of ", shape_str(x));
  for (size_t d = 0; d < x.size(); ++d)
    if (d != axis_of(a) && index[d] > x[d])
      return detail::concat("index shape ", shape_str(index), " exceeds ", shape_str(x), " in dimension ", d);
  return "";
}

// Split's and chunk's pieces joined back in reverse order, so every piece gets a gradient.
Tensor joined_reversed(std::vector<Tensor> pieces, int64_t dim) {
  std::reverse(pieces.begin(), pieces.end());
  return cat(pieces, dim);
}

}  // namespace

void append_index_cases(std::vector<OpCase>& cases) {
  // The bench case "cat" of bench_ops.cpp / torch_ops.py: 2 to 64 inputs joined along args.dim.
  cases.push_back({.name = "cat",
                   .op = OpId::cat,
                   .test = {.shapes = {{3, 5}, {3, 2}, {3, 4}}, .dim = -1},
                   .bench = {.shapes = {{2048, 2048}, {2048, 2048}}, .dim = 0},
                   .min_shapes = 2,
                   .max_shapes = 64,
                   .forward = [](const OpArgs& a, const Inputs& x, const TensorOptions&) { return cat(x, a.dim); },
                   .cost = joined_cost,
                   .torch = "torch.cat(x, a['dim'])",
                   .check_args = [](const OpArgs& a) -> std::string {
                     if (std::string why = check_dim(a); !why.empty()) return why;
                     const size_t axis = axis_of(a);
                     for (const Shape& s : a.shapes) {
                       bool fits = s.size() == a.shapes[0].size();
                       for (size_t d = 0; fits && d < s.size(); ++d) fits = d == axis || s[d] == a.shapes[0][d];
                       if (!fits)
                         return detail::concat("shape ", shape_str(s), " does not match ", shape_str(a.shapes[0]),
                                               " outside dim ", a.dim);
                     }
                     return "";
                   }});
  cases.push_back({.name = "stack",
                   .op = OpId::stack,
                   .test = {.shapes = {{3, 5}, {3, 5}, {3, 5}}, .dim = 1},
                   .bench = {.shapes = {{2048, 2048}, {2048, 2048}}, .dim = 0},
                   .min_shapes = 2,
                   .max_shapes = 64,
                   .forward = [](const OpArgs& a, const Inputs& x, const TensorOptions&) { return stack(x, a.dim); },
                   .cost = joined_cost,
                   .torch = "torch.stack(x, a['dim'])",
                   .check_args = [](const OpArgs& a) -> std::string {
                     for (const Shape& s : a.shapes)
                       if (s != a.shapes[0]) return detail::concat("stack takes equal shapes, got ", shape_str(s));
                     // The new axis may come after the last one.
                     const int64_t rank = rank_of(a) + 1;
                     return a.dim < -rank || a.dim >= rank
                                ? detail::concat("dim ", a.dim, " is out of range for stacking rank ", rank - 1)
                                : "";
                   }});
  // split and chunk are views; the cost is that of joining the pieces back (one copy).
  cases.push_back({.name = "split",
                   .op = OpId::split,
                   .test = {.shapes = {{3, 5}}, .dim = -1, .scalar = 2},
                   .bench = {.shapes = {{2048, 2048}}, .dim = -1, .scalar = 512},
                   .forward =
                       [](const OpArgs& a, const Inputs& x, const TensorOptions&) {
                         return joined_reversed(split(x[0], static_cast<int64_t>(a.scalar), a.dim), a.dim);
                       },
                   .cost = copy_cost,
                   .torch = "torch.cat(torch.split(x[0], int(a['scalar']), a['dim'])[::-1], a['dim'])",
                   .check_args =
                       [](const OpArgs& a) {
                         std::string why = check_dim(a);
                         return why.empty() ? check_integer_scalar(a, "the piece size", true) : why;
                       }});
  cases.push_back({.name = "chunk",
                   .op = OpId::chunk,
                   .test = {.shapes = {{5, 3}}, .dim = 0, .scalar = 3},
                   .bench = {.shapes = {{2048, 2048}}, .dim = 0, .scalar = 4},
                   .forward =
                       [](const OpArgs& a, const Inputs& x, const TensorOptions&) {
                         return joined_reversed(chunk(x[0], static_cast<int64_t>(a.scalar), a.dim), a.dim);
                       },
                   .cost = copy_cost,
                   .torch = "torch.cat(torch.chunk(x[0], int(a['scalar']), a['dim'])[::-1], a['dim'])",
                   .check_args =
                       [](const OpArgs& a) {
                         std::string why = check_dim(a);
                         return why.empty() ? check_integer_scalar(a, "the number of chunks", true) : why;
                       }});
  // shapes[0] the data, shapes[1] the 1-D index (entries along args.dim, repeats allowed).
  cases.push_back({.name = "index_select",
                   .op = OpId::index_select,
                   .test = {.shapes = {{4, 5}, {7}}, .dim = 0},
                   .bench = {.shapes = {{4096, 1024}, {4096}}, .dim = 0},
                   .min_shapes = 2,
                   .max_shapes = 2,
                   .inputs =
                       [](const OpArgs& a) {
                         const int64_t bound = a.shapes[0][axis_of(a)];
                         return std::vector<CaseInput>{{a.shapes[0]}, {a.shapes[1], InputKind::index, bound, false}};
                       },
                   .forward = [](const OpArgs& a, const Inputs& x,
                                 const TensorOptions&) { return index_select(x[0], a.dim, x[1]); },
                   .cost =
                       [](const OpArgs& a, bool backward, double es) {
                         const Shape& s = a.shapes[0];
                         const double picks = numel_d(a.shapes[1]);
                         const double out = numel_d(s) / static_cast<double>(s[axis_of(a)]) * picks * es;
                         // Reads the index and the picked rows, writes them; the backward reads the output
                         // gradient and the index and writes the input's gradient.
                         const double fwd = picks * kIndexBytes + 2 * out;
                         return OpCost{backward ? fwd + out + picks * kIndexBytes + numel_d(s) * es : fwd, 0};
                       },
                   .torch = "torch.index_select(x[0], a['dim'], x[1])",
                   .check_args =
                       [](const OpArgs& a) {
                         return a.shapes[1].size() != 1
                                    ? detail::concat("the index shape must be 1-D, got ", shape_str(a.shapes[1]))
                                    : check_dim(a);
                       }});
  // shapes[0] the data; shapes[1], when given, the index's shape (else the data's).
  cases.push_back(
      {.name = "gather",
       .op = OpId::gather,
       .test = {.shapes = {{4, 5}, {3, 7}}, .dim = -1},
       .bench = {.shapes = {{2048, 2048}}, .dim = -1},
       .max_shapes = 2,
       .inputs =
           [](const OpArgs& a) {
             const int64_t bound = a.shapes[0][axis_of(a)];
             return std::vector<CaseInput>{{a.shapes[0]}, {index_shape(a), InputKind::index, bound, false}};
           },
       .forward = [](const OpArgs& a, const Inputs& x, const TensorOptions&) { return gather(x[0], a.dim, x[1]); },
       .cost =
           [](const OpArgs& a, bool backward, double es) {
             const double n = numel_d(index_shape(a));
             // Reads the index and the gathered elements, writes them; the backward reads the
             // output gradient and the index and writes the input's gradient.
             const double fwd = n * (kIndexBytes + 2 * es);
             return OpCost{backward ? fwd + n * (kIndexBytes + es) + numel_d(a.shapes[0]) * es : fwd, 0};
           },
       .torch = "torch.gather(x[0], a['dim'], x[1])",
       .check_args = check_index_shape});
  // scatter_add(x, dim, index, src): shapes[0] is x; shapes[1], when given, the shape of the index
  // and of src (else x's).
  cases.push_back({.name = "scatter_add",
                   .op = OpId::scatter_add,
                   .test = {.shapes = {{5, 4}, {7, 3}}, .dim = 0},
                   .bench = {.shapes = {{2048, 2048}}, .dim = 0},
                   .max_shapes = 2,
                   .inputs =
                       [](const OpArgs& a) {
                         const int64_t bound = a.shapes[0][axis_of(a)];
                         const Shape index = index_shape(a);
                         return std::vector<CaseInput>{{a.shapes[0]}, {index, InputKind::index, bound, false}, {index}};
                       },
                   .forward = [](const OpArgs& a, const Inputs& x,
                                 const TensorOptions&) { return scatter_add(x[0], a.dim, x[1], x[2]); },
                   .cost =
                       [](const OpArgs& a, bool backward, double es) {
                         const double x = numel_d(a.shapes[0]) * es, n = numel_d(index_shape(a));
                         // Reads x, the index and src, writes the output; the backward passes the output
                         // gradient through as x's and gathers src's (reads the index and the picks, writes them).
                         const double fwd = 2 * x + n * (kIndexBytes + es);
                         return OpCost{backward ? fwd + n * (kIndexBytes + 2 * es) : fwd, 0};
                       },
                   .torch = "torch.scatter_add(x[0], a['dim'], x[1], x[2])",
                   .check_args = check_index_shape});
  // The diagonal offset is args.scalar.
  for (auto [name, op, fn, diagonal] :
       {std::tuple{"tril", OpId::tril, &tril, -1.0}, std::tuple{"triu", OpId::triu, &triu, 1.0}}) {
    cases.push_back({.name = name,
                     .op = op,
                     .test = {.shapes = {{2, 3, 5}}, .scalar = diagonal},
                     .bench = {.shapes = {{2048, 2048}}, .scalar = 0},
                     // (the binding copied: clang does not capture structured bindings)
                     .forward = [triangle = fn](const OpArgs& a, const Inputs& x,
                                                const TensorOptions&) { return triangle(x[0], static_cast<int64_t>(a.scalar)); },
                     .cost = copy_cost,
                     .torch = std::string("torch.") + name + "(x[0], int(a['scalar']))",
                     .check_args =
                         [](const OpArgs& a) {
                           return rank_of(a) < 2 ? std::string("expects an input of rank 2 or more")
                                                 : check_integer_scalar(a, "the diagonal", false);
                         }});
  }
  // args.axes holds the repeat counts, one per dimension and any leading new ones (torch.Tensor.repeat).
  cases.push_back(
      {.name = "repeat",
       .op = OpId::repeat,
       .test = {.shapes = {{3, 5}}, .axes = {2, 1, 3}},
       .bench = {.shapes = {{1024, 1024}}, .axes = {2, 2}},
       .forward = [](const OpArgs& a, const Inputs& x, const TensorOptions&) { return repeat(x[0], a.axes); },
       .cost =
           [](const OpArgs& a, bool backward, double es) {
             double tiles = 1;
             for (int64_t r : a.axes) tiles *= static_cast<double>(r);
             // Reads x, writes the tiles; the backward reads their gradient, writes x's.
             const double fwd = numel_d(a.shapes[0]) * es * (1 + tiles);
             return OpCost{backward ? 2 * fwd : fwd, 0};
           },
       .torch = "x[0].repeat(*a['axes'])",
       .check_args = [](const OpArgs& a) -> std::string {
         if (std::ssize(a.axes) < rank_of(a))
           return detail::concat("axes holds the repeat counts, at least one per dimension of rank ", rank_of(a));
         for (int64_t r : a.axes)
           if (r < 0) return detail::concat("repeat counts must be non-negative, got ", r);
         return "";
       }});
  cases.push_back({.name = "flip",
                   .op = OpId::flip,
                   .test = {.shapes = {{2, 3, 5}}, .axes = {0, -1}},
                   .bench = {.shapes = {{2048, 2048}}, .axes = {-1}},
                   .forward = [](const OpArgs& a, const Inputs& x, const TensorOptions&) { return flip(x[0], a.axes); },
                   .cost = copy_cost,
                   .torch = "torch.flip(x[0], a['axes'])",
                   .check_args = [](const OpArgs& a) -> std::string {
                     const int64_t rank = rank_of(a);
                     std::vector<bool> seen(static_cast<size_t>(rank), false);
                     for (int64_t d : a.axes) {
                       if (d < -rank || d >= rank)
                         return detail::concat("axis ", d, " is out of range for rank ", rank);
                       if (seen[axis_at(d, rank)]) return detail::concat("axis ", d, " is repeated");
                       seen[axis_at(d, rank)] = true;
                     }
                     return "";
                   }});
}

}  // namespace genesis::cases
