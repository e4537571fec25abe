// CUDA parity of the reductions against the CPU: every geometry of the CUDA engine (rows,
// split rows, columns, split columns, full reductions, the as_rows fallback), odd, empty and
// 0-d shapes, keepdim, non-contiguous and misaligned inputs, every dtype the CPU supports,
// NaN and infinity handling, gradients and bit-for-bit determinism.
#include <cmath>
#include <limits>
#include <optional>

#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

using ReduceFn = std::function<Tensor(const Tensor&, const Axes&, bool)>;
using ViewFn = std::function<Tensor(const Tensor&)>;

struct Case {
  Shape shape;
  Axes axes;
  bool keepdim = false;
};
// Warp and block rows, aligned rows (16-byte loads), rows split over blocks, columns with and
// without vector loads, columns split over blocks, a reduced block between kept axes, the
// as_rows fallback (axes {0, 2}), full reductions, single elements, 0-d and empty inputs.
const Case kCases[] = {{{37, 129}, {}},         {{37, 129}, {0}},        {{37, 129}, {1}, true},
                       {{37, 129}, {-1}},       {{3, 5, 7}, {0}},        {{3, 5, 7}, {1}, true},
                       {{3, 5, 7}, {2}},        {{3, 5, 7}, {0, 1}},     {{3, 5, 7}, {1, 2}, true},
                       {{3, 5, 7}, {0, 2}},     {{5, 3001}, {1}},        {{5, 3001}, {0}},
                       {{4, 64, 96}, {0}},      {{4, 64, 96}, {1}},      {{4, 64, 96}, {2}},
                       {{4, 64, 96}, {0, 1}},   {{4, 64, 96}, {}, true}, {{2, 300, 40}, {1}},
                       {{3, 65536}, {1}},       {{37, 40000}, {1}},      {{1, 100003}, {}},       {{4096, 5}, {0}},
                       {{20000, 7}, {1}},       {{1, 1}, {}},            {{1, 1}, {0}, true},
                       {{}, {}},                {{}, {0}, true},         {{0, 5}, {1}},
                       {{5, 0}, {1}},           {{0, 5}, {0}}};

// Non-contiguous and misaligned views: a transpose (read in place), a strided slice and a
// permutation (both copied by as_rows), and a 1-D view that starts one element in.
struct ViewCase {
  Shape shape;
  ViewFn view;
  Axes axes;
};
const ViewCase kViews[] = {
    {{129, 37}, [](const Tensor& x) { return x.t(); }, {0}},
    {{129, 37}, [](const Tensor& x) { return x.t(); }, {1}},
    {{129, 37}, [](const Tensor& x) { return x.t(); }, {}},
    {{7, 2049}, [](const Tensor& x) { return x.slice(1, 1, 2049, 2); }, {1}},
    {{7, 2049}, [](const Tensor& x) { return x.slice(1, 1, 2049, 2); }, {0}},
    {{3, 5, 7}, [](const Tensor& x) { return x.permute({2, 0, 1}); }, {0}},
    {{3, 5, 7}, [](const Tensor& x) { return x.permute({2, 0, 1}); }, {1, 2}},
    {{100003}, [](const Tensor& x) { return x.narrow(0, 1, 100002); }, {}},
};

bool has_empty_axis(const Case& c) {
  if (c.shape.empty()) return false;
  for (int64_t a : c.axes) {
    if (c.shape[static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(c.shape.size()) : a)] == 0) return true;
  }
  if (c.axes.empty()) {
    for (int64_t s : c.shape)
      if (s == 0) return true;
  }
  return false;
}

using InputFn = std::function<Tensor(const Shape&, DType)>;

// op over every case and view of kCases/kViews in `dtype`, inputs from make_input.
void check_cases(const ReduceFn& op, DType dtype, const InputFn& make_input, Tolerance tolerance,
                 bool skip_empty_axes = false) {
  INFO("dtype " << dtype_name(dtype));
  for (const Case& c : kCases) {
    if (skip_empty_axes && has_empty_axis(c)) continue;
    INFO("shape " << shape_str(c.shape) << ", " << c.axes.size() << " axes, keepdim " << c.keepdim);
    check_parity([&](const TensorList& in) { return op(in[0], c.axes, c.keepdim); }, {make_input(c.shape, dtype)},
                 tolerance);
  }
  for (const ViewCase& v : kViews) {
    INFO("view of shape " << shape_str(v.shape) << ", " << v.axes.size() << " axes");
    check_parity([&](const TensorList& in) { return op(v.view(in[0]), v.axes, false); }, {make_input(v.shape, dtype)},
                 tolerance);
  }
}

InputFn uniform(double lo, double hi) {
  return [lo, hi](const Shape& s, DType dtype) { return random_input(s, dtype, lo, hi); };
}
InputFn whole_numbers(int lo, int hi) {
  return [lo, hi](const Shape& s, DType dtype) { return random_input(s, DType::i64, lo, hi).to(dtype); };
}

// One rounding of the output for 16-bit dtypes; f32 accumulation against the CPU's f64 elsewhere.
Tolerance float_tolerance(DType dtype, double f32_rtol) {
  switch (dtype) {
    case DType::f64: return {1e-11, 1e-12};
    case DType::f32: return {f32_rtol, 1e-6};
    case DType::f16: return {2e-3, 1e-4};
    default: return {1e-2, 1e-3};
  }
}

// The same CUDA computation twice gives the same bits, on split rows and split columns.
void check_deterministic(const ReduceFn& op) {
  for (const Case& c : {Case{{1, 1000003}, {}}, Case{{2, 3000, 24}, {1}}, Case{{4096, 96}, {0}}}) {
    Tensor x = random_input(c.shape, DType::f32, 0.5, 1.0).to(kCuda0);
    require_close(op(x, c.axes, false), op(x, c.axes, false), 0.0, 0.0);
  }
}

// Gradients on a transpose, a keepdim reduction, the as_rows fallback and a full reduction.
void check_gradients(const ReduceFn& op, double lo, double hi) {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tolerance tolerance = dtype == DType::f64 ? Tolerance{1e-10, 1e-12} : Tolerance{1e-4, 1e-5};
    check_backward_parity([&](const TensorList& in) { return op(in[0].t(), {1}, false); },
                          {random_input({37, 129}, dtype, lo, hi)}, tolerance);
    check_backward_parity([&](const TensorList& in) { return op(in[0], {1}, true); },
                          {random_input({3, 5, 7}, dtype, lo, hi)}, tolerance);
    check_backward_parity([&](const TensorList& in) { return op(in[0], {0, 2}, false); },
                          {random_input({3, 5, 7}, dtype, lo, hi)}, tolerance);
    check_backward_parity([&](const TensorList& in) { return op(in[0], {}, false); },
                          {random_input({5, 301}, dtype, lo, hi)}, tolerance);
  }
}

// A copy of x (f64 values) with the given flat positions set to `value`.
Tensor with_values(const Tensor& x, std::initializer_list<int64_t> positions, double value) {
  std::vector<double> v = x.to_vector<double>();
  for (int64_t p : positions) v[static_cast<size_t>(p)] = value;
  return from_vector(v, x.shape(), {.dtype = DType::f64}).to(x.dtype());
}

}  // namespace

TEST_CASE("strided_layout reads reduced blocks in place and refuses other layouts", "[cpu]") {
  auto layout = [](const Tensor& x, const Axes& axes) {
    return detail::strided_layout(x, detail::reduction_axes(axes, x.dim(), "test"));
  };
  auto require_layout = [&](const Tensor& x, const Axes& axes, int64_t outer, int64_t extent, int64_t inner) {
    std::optional<detail::ReductionLayout> l = layout(x, axes);
    REQUIRE(l.has_value());
    CHECK(l->outer == outer);
    CHECK(l->extent == extent);
    CHECK(l->inner == inner);
  };
  Tensor x = zeros({4, 5, 6});
  require_layout(x, {}, 1, 120, 1);
  require_layout(x, {2}, 20, 6, 1);
  require_layout(x, {1}, 4, 5, 6);
  require_layout(x, {0}, 1, 4, 30);
  require_layout(x, {0, 1}, 1, 20, 6);
  require_layout(x, {1, 2}, 4, 30, 1);
  CHECK_FALSE(layout(x, {0, 2}).has_value());
  // Size-1 axes do not break a block; a transpose is read in memory order.
  require_layout(zeros({4, 1, 6}), {0, 1}, 1, 4, 6);
  require_layout(zeros({4, 1, 6}), {1}, 24, 1, 1);
  Tensor t = zeros({5, 7}).t();
  require_layout(t, {0}, 5, 7, 1);
  require_layout(t, {1}, 1, 5, 7);
  require_layout(t, {}, 1, 35, 1);
  // Kept axes out of their logical order, gaps, and empty tensors.
  CHECK_FALSE(layout(zeros({3, 4, 5}).permute({2, 0, 1}), {1}).has_value());
  require_layout(zeros({3, 4, 5}).permute({2, 0, 1}), {0}, 12, 5, 1);
  CHECK_FALSE(layout(zeros({7, 10}).slice(1, 0, 10, 2), {1}).has_value());
  require_layout(zeros({0, 5}), {1}, 0, 5, 1);
  require_layout(zeros({}), {}, 1, 1, 1);
}

// sum and mean have their registered parity tests in test_cuda_ops.cpp; these cover the geometries.
TEST_CASE("cuda sum over every reduction geometry", "[cuda]") {
  if (!cuda_ready()) return;
  const ReduceFn op = [](const Tensor& x, const Axes& a, bool k) { return sum(x, a, k); };
  for (DType dtype : kAllDTypes) check_cases(op, dtype, whole_numbers(-3, 4), {0.0, 0.0});
  for (DType dtype : kFloatDTypes) check_cases(op, dtype, uniform(0.5, 1.0), float_tolerance(dtype, 1e-5));
  check_deterministic(op);
}

TEST_CASE("cuda mean over every reduction geometry", "[cuda]") {
  if (!cuda_ready()) return;
  const ReduceFn op = [](const Tensor& x, const Axes& a, bool k) { return mean(x, a, k); };
  for (DType dtype : kAllDTypes) {
    check_cases(op, dtype, is_floating(dtype) ? uniform(0.5, 1.0) : whole_numbers(-3, 4), float_tolerance(dtype, 1e-5));
  }
  check_gradients(op, -1.0, 1.0);
}

GENESIS_CUDA_PARITY("prod") {
  const ReduceFn op = [](const Tensor& x, const Axes& a, bool k) { return prod(x, a, k); };
  // Integer products wrap around identically on both devices.
  for (DType dtype : kAllDTypes) check_cases(op, dtype, whole_numbers(-3, 4), {0.0, 0.0});
  for (DType dtype : kFloatDTypes) check_cases(op, dtype, uniform(0.999, 1.001), float_tolerance(dtype, 3e-4));
  check_deterministic(op);
  check_gradients(op, 0.5, 1.5);
  // Zeros: the gradient of a row with one zero goes to that element only; two zeros give zeros.
  Tensor x = with_values(random_input({4, 37}, DType::f64, 0.5, 1.5), {3, 40, 41, 147}, 0.0);
  check_backward_parity([](const TensorList& in) { return prod(in[0], {1}); }, {x}, {1e-12, 1e-12});
  check_backward_parity([](const TensorList& in) { return prod(in[0], {1}); }, {x.to(DType::f32)}, {1e-5, 1e-6});
  check_backward_parity([](const TensorList& in) { return prod(in[0], {1}); }, {x.to(DType::bf16)}, {2e-2, 1e-2});
}

namespace {

using ExtremeFn = std::function<ValuesIndices(const Tensor&, int64_t, bool)>;

// Single-axis cases of kCases and kViews for max/min/argmax/argmin (non-empty reduced axis).
void check_extreme_cases(const std::function<Tensor(const Tensor&, int64_t, bool)>& op) {
  const ReduceFn as_reduce = [&](const Tensor& x, const Axes& axes, bool keepdim) {
    return op(x, axes.empty() ? 0 : axes[0], keepdim);
  };
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    for (const Case& c : kCases) {
      if (c.axes.size() > 1 || (c.axes.empty() && c.shape.size() > 1) || has_empty_axis(c)) continue;
      INFO("shape " << shape_str(c.shape) << ", keepdim " << c.keepdim);
      for (const InputFn& input : {uniform(-1.0, 1.0), whole_numbers(-2, 3)}) {
        check_parity([&](const TensorList& in) { return as_reduce(in[0], c.axes, c.keepdim); },
                     {input(c.shape, dtype)}, {0.0, 0.0});
      }
    }
    for (const ViewCase& v : kViews) {
      if (v.axes.size() != 1) continue;
      check_parity([&](const TensorList& in) { return as_reduce(v.view(in[0]), v.axes, false); },
                   {whole_numbers(-2, 3)(v.shape, dtype)}, {0.0, 0.0});
    }
  }
  // NaNs: the first NaN of a line wins wherever it sits (rows, split rows, columns); -inf and +inf.
  for (DType dtype : kFloatDTypes) {
    Tensor rows = with_values(random_input({4, 3001}, dtype), {5, 7, 3001 + 3000, 2 * 3001 + 1500}, kNaN);
    rows = with_values(rows, {3 * 3001 + 10}, kInf);
    rows = with_values(rows, {3 * 3001 + 11}, -kInf);
    for (int64_t axis : {0, 1})
      check_parity([&](const TensorList& in) { return op(in[0], axis, false); }, {rows}, {0.0, 0.0});
    Tensor longest = with_values(random_input({1, 500000}, dtype), {400000, 499999}, kNaN);
    check_parity([&](const TensorList& in) { return op(in[0], 1, false); }, {longest}, {0.0, 0.0});
    Tensor columns = with_values(random_input({3000, 40}, dtype), {40 * 2000 + 3, 40 * 2500 + 3, 40 * 10 + 39}, kNaN);
    check_parity([&](const TensorList& in) { return op(in[0], 0, true); }, {columns}, {0.0, 0.0});
  }
}

void check_extreme_along(const ExtremeFn& op) {
  check_extreme_cases([&](const Tensor& x, int64_t axis, bool keepdim) { return op(x, axis, keepdim).values; });
  check_extreme_cases([&](const Tensor& x, int64_t axis, bool keepdim) { return op(x, axis, keepdim).indices; });
  const ReduceFn values = [&](const Tensor& x, const Axes& axes, bool keepdim) {
    return op(x, axes.empty() ? 0 : axes[0], keepdim).values;
  };
  check_deterministic([&](const Tensor& x, const Axes& axes, bool keepdim) {
    return axes.empty() ? values(x.flatten(), {0}, keepdim) : values(x, axes, keepdim);
  });
  check_gradients([&](const Tensor& x, const Axes& axes, bool keepdim) {
    return axes.size() == 1 ? values(x, axes, keepdim) : values(x.flatten(), {0}, keepdim);
  }, -1.0, 1.0);
}

// The all-elements overload: values on every shape with elements, and its gradient with ties.
void check_extreme_all(const std::function<Tensor(const Tensor&)>& op) {
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{37, 129}, Shape{3, 5, 7}, Shape{1, 1000003}, Shape{}, Shape{4096, 5}}) {
      check_parity([&](const TensorList& in) { return op(in[0]); }, {whole_numbers(-50, 50)(shape, dtype)}, {0.0, 0.0});
    }
    check_parity([&](const TensorList& in) { return op(in[0].t()); }, {whole_numbers(-50, 50)({129, 37}, dtype)},
                 {0.0, 0.0});
  }
  Tensor with_nan = with_values(random_input({37, 129}, DType::f32), {1000}, kNaN);
  check_parity([&](const TensorList& in) { return op(in[0]); }, {with_nan}, {0.0, 0.0});
  check_backward_parity([&](const TensorList& in) { return op(in[0]); },
                        {whole_numbers(-3, 4)({5, 301}, DType::f64)}, {1e-12, 1e-12});
  check_backward_parity([&](const TensorList& in) { return op(in[0].t()); },
                        {random_input({37, 129}, DType::f32)}, {1e-6, 1e-7});
}

}  // namespace

GENESIS_CUDA_PARITY("max") {
  check_extreme_along([](const Tensor& x, int64_t axis, bool keepdim) { return max(x, axis, keepdim); });
  check_extreme_all([](const Tensor& x) { return max(x); });
}

GENESIS_CUDA_PARITY("min") {
  check_extreme_along([](const Tensor& x, int64_t axis, bool keepdim) { return min(x, axis, keepdim); });
  check_extreme_all([](const Tensor& x) { return min(x); });
}

GENESIS_CUDA_PARITY("argmax") {
  check_extreme_cases([](const Tensor& x, int64_t axis, bool keepdim) { return argmax(x, axis, keepdim); });
}

GENESIS_CUDA_PARITY("argmin") {
  check_extreme_cases([](const Tensor& x, int64_t axis, bool keepdim) { return argmin(x, axis, keepdim); });
}

namespace {

void check_variance(bool take_sqrt) {
  for (bool unbiased : {true, false}) {
    INFO("unbiased " << unbiased);
    const ReduceFn op = [=](const Tensor& x, const Axes& a, bool k) {
      return take_sqrt ? genesis::std(x, a, unbiased, k) : var(x, a, unbiased, k);
    };
    for (DType dtype : kFloatDTypes) check_cases(op, dtype, uniform(-1.0, 1.0), float_tolerance(dtype, 1e-4));
    // Integers compute in f32.
    check_cases(op, DType::i32, whole_numbers(-5, 6), float_tolerance(DType::f32, 1e-4));
    // A large mean: single-pass Welford updates stay accurate where sum(x^2) - n mean^2 would not.
    for (DType dtype : {DType::f32, DType::f64}) {
      for (const Case& c : {Case{{5, 3001}, {1}}, Case{{1, 100003}, {}}, Case{{3000, 40}, {0}}}) {
        check_parity([&](const TensorList& in) { return op(in[0], c.axes, false); },
                     {random_input(c.shape, dtype, 1000.0, 1001.0)}, float_tolerance(dtype, 5e-3));
      }
    }
    check_deterministic(op);
    check_gradients(op, -1.0, 1.0);
  }
  // NaN and infinity make the result NaN on both devices.
  Tensor specials = with_values(with_values(random_input({3, 129}, DType::f32), {5}, kNaN), {200}, kInf);
  check_parity([&](const TensorList& in) { return take_sqrt ? genesis::std(in[0], {1}) : var(in[0], {1}); },
               {specials}, {1e-4, 1e-6});
}

}  // namespace

GENESIS_CUDA_PARITY("var") { check_variance(false); }
GENESIS_CUDA_PARITY("std") { check_variance(true); }

GENESIS_CUDA_PARITY("logsumexp") {
  const ReduceFn op = [](const Tensor& x, const Axes& a, bool k) { return logsumexp(x, a, k); };
  for (DType dtype : kFloatDTypes) check_cases(op, dtype, uniform(-5.0, 5.0), float_tolerance(dtype, 1e-5));
  check_cases(op, DType::i64, whole_numbers(-5, 6), float_tolerance(DType::f32, 1e-5));
  // Rows of -inf, a +inf, a NaN, and large values (no overflow thanks to the running max).
  for (DType dtype : kFloatDTypes) {
    Tensor x = with_values(with_values(random_input({5, 3001}, DType::f64, -5.0, 5.0), {7}, kInf), {3101}, kNaN);
    x.narrow(0, 2, 1).fill_(-kInf);
    x = x.to(dtype);
    for (int64_t axis : {0, 1})
      check_parity([&](const TensorList& in) { return logsumexp(in[0], {axis}); }, {x}, float_tolerance(dtype, 1e-5));
    check_parity([](const TensorList& in) { return logsumexp(in[0], {1}); },
                 {random_input({4, 4096}, dtype, 500.0, 600.0)}, float_tolerance(dtype, 1e-5));
    // The same specials on rows of whole 16-byte packs, which the register-row kernel takes.
    Tensor packed = with_values(with_values(random_input({5, 1024}, DType::f64, -5.0, 5.0), {7}, kInf), {1027}, kNaN);
    packed.narrow(0, 2, 1).fill_(-kInf);
    check_parity([](const TensorList& in) { return logsumexp(in[0], {1}); }, {packed.to(dtype)},
                 float_tolerance(dtype, 1e-5));
  }
  check_deterministic(op);
  check_gradients(op, -3.0, 3.0);
}

GENESIS_CUDA_PARITY("norm") {
  for (double p : {2.0, 1.0, kInf, -kInf, 0.0, 3.0, 0.5}) {
    INFO("p " << p);
    const ReduceFn op = [p](const Tensor& x, const Axes& a, bool k) { return norm(x, p, a, k); };
    for (DType dtype : kFloatDTypes) check_cases(op, dtype, uniform(-1.0, 1.0), float_tolerance(dtype, 1e-5));
    check_cases(op, DType::i32, whole_numbers(-3, 4), float_tolerance(DType::f32, 1e-5));
    Tensor with_nan = with_values(random_input({3, 129}, DType::f32), {5}, kNaN);
    check_parity([&](const TensorList& in) { return op(in[0], {1}, false); }, {with_nan}, {1e-5, 1e-6});
    check_deterministic(op);
    check_gradients(op, 0.1, 1.0);
  }
  // The gradient of an all-zero row is zero.
  check_backward_parity([](const TensorList& in) { return norm(in[0], 2.0, {1}); }, {zeros({3, 17})},
                        {1e-6, 1e-7});
}
