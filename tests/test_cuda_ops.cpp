// CUDA parity of the unary, binary, comparison, selection and reduction ops: odd sizes,
// broadcast and non-contiguous operands, every dtype the op accepts, and gradients.
#include <cmath>
#include <optional>

#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

using UnaryFn = std::function<Tensor(const Tensor&)>;
using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;

Tolerance tolerance_of_result(DType input) {
  return elementwise_tolerance(is_floating(input) ? input : DType::f32);
}

// op over inputs in [lo, hi): every dtype, the parity shapes, transposed, strided, permuted and
// misaligned inputs, a grid-stride-sized input, and the gradient in f32 and f64.
void check_unary(const UnaryFn& op, double lo, double hi) {
  for (DType dtype : kAllDTypes) {
    if (dtype == DType::boolean) continue;
    INFO("dtype " << dtype_name(dtype));
    Tolerance tolerance = tolerance_of_result(dtype);
    auto apply = [&](const UnaryFn& view) { return [&op, view](const TensorList& in) { return op(view(in[0])); }; };
    UnaryFn same = [](const Tensor& x) { return x; };
    for (const Shape& shape : kParityShapes) check_parity(apply(same), {random_input(shape, dtype, lo, hi)}, tolerance);
    check_parity(apply([](const Tensor& x) { return x.t(); }), {random_input({129, 37}, dtype, lo, hi)}, tolerance);
    check_parity(apply([](const Tensor& x) { return x.slice(1, 1, 129, 3); }), {random_input({37, 129}, dtype, lo, hi)},
                 tolerance);
    check_parity(apply([](const Tensor& x) {
                   return x.permute({2, 0, 1});
                 }),
                 {random_input({3, 5, 7}, dtype, lo, hi)}, tolerance);
    check_parity(apply([](const Tensor& x) { return x.narrow(0, 1, 4772); }), {random_input({4773}, dtype, lo, hi)},
                 tolerance);
    if (dtype == DType::f32 || dtype == DType::f16) {
      check_parity(apply(same), {random_input({1000, 1001}, dtype, lo, hi)}, tolerance);
    }
  }
  auto transposed = [&op](const TensorList& in) { return op(in[0].t()); };
  check_backward_parity(transposed, {random_input({37, 129}, DType::f32, lo, hi)}, {1e-5, 1e-6});
  check_backward_parity(transposed, {random_input({37, 129}, DType::f64, lo, hi)}, {1e-11, 1e-12});
}

// Small whole numbers stored in `dtype`: ties and zeros for comparisons, sign and relu.
Tensor whole_numbers(const Shape& shape, DType dtype, int lo, int hi) {
  return random_input(shape, DType::i64, lo, hi).to(dtype);
}

struct BinaryInputs {
  Shape a, b;
};
const BinaryInputs kBroadcastCases[] = {{{37, 129}, {37, 129}},
                                        {{37, 129}, {129}},
                                        {{37, 1}, {1, 129}},
                                        {{3, 5, 7}, {5, 1}},
                                        {{}, {3, 5, 7}},
                                        {{1, 1}, {1, 1}},
                                        {{}, {}}};

// op(a, b) for `dtypes`, a and b drawn by `make_a` and `make_b`: broadcast pairs, transposed and
// strided operands, mixed dtypes, and the gradient when `differentiable`.
void check_binary(const BinaryFn& op, std::initializer_list<DType> dtypes,
                  const std::function<Tensor(const Shape&, DType)>& make_a,
                  const std::function<Tensor(const Shape&, DType)>& make_b, bool differentiable) {
  auto apply = [&op](const TensorList& in) { return op(in[0], in[1]); };
  for (DType dtype : dtypes) {
    INFO("dtype " << dtype_name(dtype));
    Tolerance tolerance = tolerance_of_result(dtype);
    for (const BinaryInputs& c : kBroadcastCases) {
      INFO("shapes " << shape_str(c.a) << " and " << shape_str(c.b));
      check_parity(apply, {make_a(c.a, dtype), make_b(c.b, dtype)}, tolerance);
    }
    check_parity([&op](const TensorList& in) { return op(in[0].t(), in[1].slice(1, 0, 257, 2)); },
                 {make_a({129, 37}, dtype), make_b({37, 257}, dtype)}, tolerance);
    check_parity([&op](const TensorList& in) { return op(in[0].narrow(0, 1, 4772), in[1].narrow(0, 1, 4772)); },
                 {make_a({4773}, dtype), make_b({4773}, dtype)}, tolerance);
  }
  // Mixed dtypes: promotion happens on the GPU through the casting copy.
  check_parity(apply, {make_a({37, 129}, DType::f16), make_b({129}, DType::bf16)}, elementwise_tolerance(DType::f32));
  check_parity(apply, {make_a({37, 129}, DType::i32), make_b({37, 129}, DType::f32)},
               elementwise_tolerance(DType::f32));
  if (differentiable) {
    // b's gradient sums 37 terms of size ~2 in f32, on the GPU in another order than on the CPU:
    // the absolute error of such a cancelling sum reaches ~37 * 2 * 6e-8, hence atol 1e-5 (1e-6
    // once failed by 1.3e-6, in a compute-sanitizer run).
    check_backward_parity(apply, {make_a({37, 129}, DType::f32), make_b({129}, DType::f32)}, {1e-5, 1e-5});
    check_backward_parity([&op](const TensorList& in) { return op(in[0].t(), in[1]); },
                          {make_a({129, 37}, DType::f64), make_b({37, 1}, DType::f64)}, {1e-11, 1e-12});
  }
}

std::function<Tensor(const Shape&, DType)> uniform(double lo, double hi) {
  return [lo, hi](const Shape& s, DType dt) { return random_input(s, dt, lo, hi); };
}
std::function<Tensor(const Shape&, DType)> whole(int lo, int hi) {
  return [lo, hi](const Shape& s, DType dt) { return whole_numbers(s, dt, lo, hi); };
}

void check_arithmetic(const BinaryFn& op, double lo, double hi) {
  check_binary(op, {DType::f32, DType::f64, DType::f16, DType::bf16}, uniform(lo, hi), uniform(lo, hi), true);
  check_binary(op, {DType::i32, DType::i64, DType::boolean}, whole(-5, 6), whole(-5, 6), false);
}

void check_compare(const BinaryFn& op) {
  // Whole numbers give many ties; uniform values none.
  check_binary(op, {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::boolean},
               whole(-2, 3), whole(-2, 3), false);
  check_binary(op, {DType::f32, DType::f16}, uniform(-1, 1), uniform(-1, 1), false);
  Tensor special = tensor({std::nan(""), INFINITY, -INFINITY, 0.0, -0.0, 1.0});
  check_parity([&op](const TensorList& in) { return op(in[0], in[0].unsqueeze(1)); }, {special}, {});
  check_parity([&op](const TensorList& in) { return op(in[0], wrap_scalar(in[0], 0.5)); },
               {whole_numbers({37, 129}, DType::i32, -2, 3)}, {});
}

}  // namespace

// --- unary -----------------------------------------------------------------

GENESIS_CUDA_PARITY("neg") {
  check_unary([](const Tensor& x) { return neg(x); }, -3, 3);
}
GENESIS_CUDA_PARITY("abs") {
  check_unary([](const Tensor& x) { return abs(x); }, -3, 3);
}
GENESIS_CUDA_PARITY("exp") {
  check_unary([](const Tensor& x) { return exp(x); }, -3, 3);
}
GENESIS_CUDA_PARITY("log") {
  check_unary([](const Tensor& x) { return log(x); }, 0.1, 3);
}
GENESIS_CUDA_PARITY("log1p") {
  check_unary([](const Tensor& x) { return log1p(x); }, -0.5, 3);
}
GENESIS_CUDA_PARITY("sqrt") {
  check_unary([](const Tensor& x) { return sqrt(x); }, 0.1, 3);
}
GENESIS_CUDA_PARITY("rsqrt") {
  check_unary([](const Tensor& x) { return rsqrt(x); }, 0.1, 3);
}
GENESIS_CUDA_PARITY("sin") {
  check_unary([](const Tensor& x) { return sin(x); }, -3, 3);
}
GENESIS_CUDA_PARITY("cos") {
  check_unary([](const Tensor& x) { return cos(x); }, -3, 3);
}
GENESIS_CUDA_PARITY("tanh") {
  check_unary([](const Tensor& x) { return tanh(x); }, -3, 3);
}
GENESIS_CUDA_PARITY("sigmoid") {
  check_unary([](const Tensor& x) { return sigmoid(x); }, -5, 5);
}
GENESIS_CUDA_PARITY("relu") {
  check_unary([](const Tensor& x) { return relu(x); }, -3, 3);
  check_parity([](const TensorList& in) { return relu(in[0]); }, {whole_numbers({37, 129}, DType::f32, -2, 3)}, {});
}
GENESIS_CUDA_PARITY("gelu") {
  check_unary([](const Tensor& x) { return gelu(x); }, -3, 3);
  // The lower tail in relative terms: x Phi(x) reaches 1e-32 (f32) and 1e-88 (f64) here, where
  // Phi computed as (1 + erf) / 2 is 0. Rounding x / sqrt 2 moves the result by about x^2 ulp.
  const auto gelu_erf = [](const TensorList& in) { return gelu(in[0]); };
  check_parity(gelu_erf, {random_input({1031}, DType::f32, -12, -2)}, {3e-5, 0.0});
  check_backward_parity(gelu_erf, {random_input({37, 129}, DType::f32, -12, -2)}, {5e-5, 0.0});
  check_parity(gelu_erf, {random_input({1031}, DType::f64, -20, -2)}, {1e-12, 0.0});
  check_backward_parity(gelu_erf, {random_input({37, 129}, DType::f64, -20, -2)}, {1e-12, 0.0});
}
GENESIS_CUDA_PARITY("gelu_tanh") {
  check_unary([](const Tensor& x) { return gelu(x, GeluApproximation::tanh); }, -3, 3);
  // 16-bit inputs take the x * sigmoid(2u) form on CUDA: both tails, and its gradient.
  const auto gelu_tanh = [](const TensorList& in) { return gelu(in[0], GeluApproximation::tanh); };
  for (DType dtype : {DType::f16, DType::bf16}) {
    INFO("dtype " << dtype_name(dtype));
    check_parity(gelu_tanh, {random_input({4097}, dtype, -12, 12)}, tolerance_of_result(dtype));
    check_backward_parity(gelu_tanh, {random_input({37, 129}, dtype, -6, 6)}, tolerance_of_result(dtype));
  }
}
GENESIS_CUDA_PARITY("silu") {
  check_unary([](const Tensor& x) { return silu(x); }, -4, 4);
}
GENESIS_CUDA_PARITY("softplus") {
  check_unary([](const Tensor& x) { return softplus(x); }, -3, 3);
  check_unary([](const Tensor& x) { return softplus(x, 2.0, 3.0); }, -3, 3);  // crosses the linear threshold
}
GENESIS_CUDA_PARITY("pow_scalar") {
  check_unary([](const Tensor& x) { return pow(x, 2.5); }, 0.1, 2);
  check_unary([](const Tensor& x) { return pow(x, -1.5); }, 0.1, 2);
  check_unary([](const Tensor& x) { return pow(x, 3.0); }, -2, 2);
}
GENESIS_CUDA_PARITY("clamp") {
  check_unary([](const Tensor& x) { return clamp(x, -0.5, 0.25); }, -1, 1);
  check_unary([](const Tensor& x) { return clamp(x, std::nullopt, 0.25); }, -1, 1);
  check_unary([](const Tensor& x) { return clamp(x, -1.5, std::nullopt); }, -3, 3);
  // NaN stays NaN; fractional bounds on integers round inwards.
  check_parity([](const TensorList& in) { return clamp(in[0], -0.5, 0.5); },
               {tensor({std::nan(""), INFINITY, -INFINITY, 0.0, 2.0})}, {});
  check_parity([](const TensorList& in) { return clamp(in[0], -1.5, 1.5); },
               {whole_numbers({37, 129}, DType::i32, -4, 5)}, {});
}
GENESIS_CUDA_PARITY("sign") {
  check_unary([](const Tensor& x) { return sign(x); }, -3, 3);
  for (DType dtype : kFloatDTypes) {
    check_parity([](const TensorList& in) { return sign(in[0]); }, {whole_numbers({37, 129}, dtype, -2, 3)}, {});
  }
}

// --- binary ----------------------------------------------------------------------

GENESIS_CUDA_PARITY("add") {
  check_arithmetic([](const Tensor& a, const Tensor& b) { return add(a, b); }, -2, 2);
  // In place: the kernel's output is its first input.
  for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
    Tensor dst = random_input({37, 129}, dtype, -2, 2), src = random_input({129}, dtype, -2, 2);
    Tensor dst_gpu = dst.to(kCuda0);
    add_(dst, src);
    add_(dst_gpu, src.to(kCuda0));
    require_close(dst_gpu, dst, elementwise_tolerance(dtype).rtol, elementwise_tolerance(dtype).atol);
  }
}
// An f32 operand with a 16-bit one (policy promote_math: the CUDA kernel widens on load) gives
// the CPU's cast-then-compute result bit for bit, in either order, broadcast (a bias row) or
// through strides, and its gradients reach each operand in its own dtype.
TEST_CASE("cuda add, sub and mul of f32 and 16-bit operands widen on load", "[cuda][elementwise]") {
  if (!cuda_ready()) return;
  using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);
  for (BinaryFn op : {static_cast<BinaryFn>(&add), static_cast<BinaryFn>(&sub), static_cast<BinaryFn>(&mul)}) {
    for (DType half : {DType::bf16, DType::f16}) {
      Tensor wide = random_input({37, 129}, DType::f32, -2, 2), narrow = random_input({37, 129}, half, -2, 2);
      Tensor row = random_input({129}, half, -2, 2);
      check_parity([op](const TensorList& in) { return op(in[0], in[1]); }, {wide, narrow}, {0, 0});
      check_parity([op](const TensorList& in) { return op(in[1], in[0]); }, {wide, narrow}, {0, 0});
      check_parity([op](const TensorList& in) { return op(in[0], in[1]); }, {wide, row}, {0, 0});
      check_parity([op](const TensorList& in) { return op(in[0].t(), in[1].t()); }, {wide, narrow}, {0, 0});
      check_backward_parity([op](const TensorList& in) { return op(in[0], in[1]); }, {wide, narrow},
                            elementwise_tolerance(half));
    }
  }
}

GENESIS_CUDA_PARITY("sub") {
  check_arithmetic([](const Tensor& a, const Tensor& b) { return sub(a, b); }, -2, 2);
}
GENESIS_CUDA_PARITY("mul") {
  check_arithmetic([](const Tensor& a, const Tensor& b) { return mul(a, b); }, -2, 2);
}
GENESIS_CUDA_PARITY("div") {
  check_binary([](const Tensor& a, const Tensor& b) { return div(a, b); },
               {DType::f32, DType::f64, DType::f16, DType::bf16}, uniform(-2, 2), uniform(0.5, 2), true);
  check_binary([](const Tensor& a, const Tensor& b) { return div(a, b); }, {DType::i32, DType::i64, DType::boolean},
               whole(-5, 6), whole(1, 4), false);
}
GENESIS_CUDA_PARITY("pow") {
  check_binary([](const Tensor& a, const Tensor& b) { return pow(a, b); },
               {DType::f32, DType::f64, DType::f16, DType::bf16}, uniform(0.5, 2), uniform(-2, 2), true);
  check_binary([](const Tensor& a, const Tensor& b) { return pow(a, b); }, {DType::i32, DType::i64, DType::boolean},
               whole(-3, 4), whole(-1, 6), false);
}
GENESIS_CUDA_PARITY("maximum") {
  check_arithmetic([](const Tensor& a, const Tensor& b) { return maximum(a, b); }, -2, 2);
  Tensor special = tensor({std::nan(""), INFINITY, -INFINITY, 0.0, 1.0});
  check_parity([](const TensorList& in) { return maximum(in[0], in[0].unsqueeze(1)); }, {special}, {});
}
GENESIS_CUDA_PARITY("minimum") {
  check_arithmetic([](const Tensor& a, const Tensor& b) { return minimum(a, b); }, -2, 2);
  Tensor special = tensor({std::nan(""), INFINITY, -INFINITY, 0.0, 1.0});
  check_parity([](const TensorList& in) { return minimum(in[0], in[0].unsqueeze(1)); }, {special}, {});
}

// --- comparisons ---------------------------------------------------------------

GENESIS_CUDA_PARITY("eq") {
  check_compare([](const Tensor& a, const Tensor& b) { return eq(a, b); });
}
GENESIS_CUDA_PARITY("ne") {
  check_compare([](const Tensor& a, const Tensor& b) { return ne(a, b); });
}
GENESIS_CUDA_PARITY("lt") {
  check_compare([](const Tensor& a, const Tensor& b) { return lt(a, b); });
}
GENESIS_CUDA_PARITY("le") {
  check_compare([](const Tensor& a, const Tensor& b) { return le(a, b); });
}
GENESIS_CUDA_PARITY("gt") {
  check_compare([](const Tensor& a, const Tensor& b) { return gt(a, b); });
}
GENESIS_CUDA_PARITY("ge") {
  check_compare([](const Tensor& a, const Tensor& b) { return ge(a, b); });
}

// --- selection -------------------------------------------------------------------

GENESIS_CUDA_PARITY("where") {
  auto select = [](const TensorList& in) { return where(in[0], in[1], in[2]); };
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    check_parity(
        select,
        {random_input({37, 129}, DType::boolean), random_input({37, 129}, dtype), random_input({37, 129}, dtype)}, {});
    check_parity(select, {random_input({37, 1}, DType::boolean), random_input({129}, dtype), random_input({}, dtype)},
                 {});
    check_parity(
        [](const TensorList& in) { return where(in[0].t(), in[1].slice(0, 0, 74, 2), in[2].t()); },
        {random_input({129, 37}, DType::boolean), random_input({74, 129}, dtype), random_input({129, 37}, dtype)}, {});
    check_parity(select,
                 {random_input({3, 5, 7}, DType::boolean), random_input({5, 1}, dtype), random_input({1, 7}, dtype)},
                 {});
  }
  check_parity(
      select,
      {random_input({37, 129}, DType::boolean), random_input({37, 129}, DType::f16), random_input({129}, DType::f32)},
      {});
  check_backward_parity([](const TensorList& in) { return where(gt(in[0], 0.0), in[0], in[1]); },
                        {random_input({37, 129}, DType::f32), random_input({129}, DType::f32)}, {1e-6, 1e-6});
}

GENESIS_CUDA_PARITY("masked_fill") {
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    for (double value : {2.5, -1.0, std::nan("")}) {
      if (!is_floating(dtype) && std::isnan(value)) continue;
      auto fill = [value](const TensorList& in) { return masked_fill(in[0], in[1], value); };
      check_parity(fill, {random_input({37, 129}, dtype), random_input({37, 129}, DType::boolean)}, {});
      check_parity(fill, {random_input({37, 129}, dtype), random_input({1, 129}, DType::boolean)}, {});
      check_parity([value](const TensorList& in) { return masked_fill(in[0].t(), in[1], value); },
                   {random_input({129, 37}, dtype), random_input({37, 1}, DType::boolean)}, {});
      check_parity(fill, {random_input({}, dtype), random_input({}, DType::boolean)}, {});
    }
  }
  Tensor mask = random_input({37, 129}, DType::boolean);
  check_backward_parity([mask](const TensorList& in) { return masked_fill(in[0], mask.to(in[0].device()), -3.0); },
                        {random_input({37, 129}, DType::f32)}, {1e-6, 1e-6});
}

// --- reductions --------------------------------------------------------------------

namespace {

struct Reduction {
  Shape shape;
  Axes axes;
  bool keepdim;
};
// Short rows (one warp each), long rows (one block each), empty rows and an empty batch.
const Reduction kReductions[] = {
    {{37, 129}, {}, false}, {{37, 129}, {0}, false}, {{37, 129}, {1}, true},   {{3, 5, 7}, {0, 2}, false},
    {{3, 5, 7}, {1}, true}, {{3, 5000}, {1}, false}, {{1, 100000}, {}, false}, {{5, 0}, {1}, false},
    {{0, 5}, {1}, false},   {{}, {}, false}};

using ReduceFn = std::function<Tensor(const Tensor&, const Axes&, bool)>;

void check_reduction(const ReduceFn& reduce) {
  for (DType dtype : kAllDTypes) {
    for (const Reduction& r : kReductions) {
      INFO("dtype " << dtype_name(dtype) << ", shape " << shape_str(r.shape) << ", " << r.axes.size() << " axes");
      auto apply = [&](const TensorList& in) { return reduce(in[0], r.axes, r.keepdim); };
      // Whole numbers: every partial sum is exact, so both devices agree bit for bit.
      check_parity(apply, {whole_numbers(r.shape, dtype, 1, 5)}, tolerance_of_result(dtype));
      if (is_floating(dtype)) {
        // f32 sums accumulate in f32 on the GPU and in f64 on the CPU; positive terms keep the
        // relative error small.
        Tolerance tolerance = dtype == DType::f32 ? Tolerance{1e-5, 1e-5} : elementwise_tolerance(dtype);
        check_parity(apply, {random_input(r.shape, dtype, 0.5, 1.0)}, tolerance);
      }
    }
    check_parity([&](const TensorList& in) { return reduce(in[0].t(), {0}, false); },
                 {whole_numbers({37, 129}, dtype, 1, 5)}, tolerance_of_result(dtype));
  }
  // Deterministic: the same input gives the same bits.
  Tensor x = random_input({1, 100000}, DType::f32).to(kCuda0);
  CHECK(reduce(x, {}, false).item() == reduce(x, {}, false).item());
  check_backward_parity([&](const TensorList& in) { return reduce(in[0].t(), {1}, false); },
                        {random_input({37, 129}, DType::f32)}, {1e-6, 1e-7});
  check_backward_parity(
      [&](const TensorList& in) {
        return reduce(in[0], {0, 2}, true);
      },
      {random_input({3, 5, 7}, DType::f64)}, {1e-12, 1e-12});
}

}  // namespace

GENESIS_CUDA_PARITY("sum") {
  check_reduction([](const Tensor& x, const Axes& axes, bool keepdim) { return sum(x, axes, keepdim); });
}
GENESIS_CUDA_PARITY("mean") {
  check_reduction([](const Tensor& x, const Axes& axes, bool keepdim) { return mean(x, axes, keepdim); });
}
