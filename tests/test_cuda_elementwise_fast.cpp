// The fast CUDA elementwise paths against the CPU: scalar forms (the scalar a kernel argument)
// for every dtype and promotion rule, binary broadcast patterns on both sides, tiled transposed
// copies, widened strided copies, casts between all dtypes and the in-place ops. Odd sizes
// leave tails beyond the vector width; views offset by one element make the 16-byte alignment
// fail so that the fallbacks run. Allocation counts check that no temporary is made.
#include <cmath>
#include <vector>

#include "libgenesis/ops/elementwise.h"
#include "tests/cuda_testing.h"

#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/caching_allocator.h"
#endif

using namespace genesis;
using namespace genesis::testing;

namespace {

using ScalarFn = std::function<Tensor(const Tensor&, double)>;

struct NamedScalarOp {
  const char* name;
  ScalarFn fn;
};

const std::vector<NamedScalarOp>& scalar_ops() {
  static const std::vector<NamedScalarOp> ops = {
      {"add", [](const Tensor& x, double v) { return add(x, v); }},
      {"sub", [](const Tensor& x, double v) { return sub(x, v); }},
      {"sub (scalar first)", [](const Tensor& x, double v) { return sub(v, x); }},
      {"mul", [](const Tensor& x, double v) { return mul(x, v); }},
      {"div", [](const Tensor& x, double v) { return div(x, v); }},
      {"div (scalar first)", [](const Tensor& x, double v) { return div(v, x); }},
      {"pow (scalar first)", [](const Tensor& x, double v) { return pow(v, x); }},
      {"maximum", [](const Tensor& x, double v) { return maximum(x, v); }},
      {"minimum", [](const Tensor& x, double v) { return minimum(x, v); }},
      {"eq", [](const Tensor& x, double v) { return eq(x, v); }},
      {"ne", [](const Tensor& x, double v) { return ne(x, v); }},
      {"lt", [](const Tensor& x, double v) { return lt(x, v); }},
      {"le", [](const Tensor& x, double v) { return le(x, v); }},
      {"gt", [](const Tensor& x, double v) { return gt(x, v); }},
      {"ge", [](const Tensor& x, double v) { return ge(x, v); }},
  };
  return ops;
}

// Whole numbers in [-3, 3] (ties with whole scalars, exact integer arithmetic), nonzero so that
// division by the tensor stays finite.
Tensor small_whole(const Shape& shape, DType dtype) {
  Tensor w = random_input(shape, DType::i64, -3, 4);
  Tensor nonzero = add(w, mul(eq(w, 0.0).to(DType::i64), 2.0));
  return dtype == DType::boolean ? gt(nonzero, 0.0) : nonzero.to(dtype);
}

Tolerance result_tolerance(DType input) {
  return elementwise_tolerance(is_floating(input) ? input : DType::f32);
}

// The number of device allocations `fn` makes.
uint64_t allocations_during(const std::function<void()>& fn) {
#if GENESIS_WITH_CUDA
  const uint64_t before = cuda::memory_stats(0).num_allocs;
  fn();
  return cuda::memory_stats(0).num_allocs - before;
#else
  fn();
  return 0;
#endif
}

}  // namespace

TEST_CASE("cuda fast path: scalar forms match the CPU for every dtype", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dtype : kAllDTypes) {
    for (const NamedScalarOp& op : scalar_ops()) {
      for (double value : {2.0, -1.5, 0.5, 3.0}) {
        INFO("dtype " << dtype_name(dtype) << ", " << op.name << ", scalar " << value);
        const ScalarFn& fn = op.fn;
        auto apply = [&fn, value](const TensorList& in) { return fn(in[0], value); };
        const Tolerance tolerance = result_tolerance(dtype);
        check_parity(apply, {small_whole({37, 129}, dtype)}, tolerance);
        check_parity(apply, {small_whole({}, dtype)}, tolerance);
        // Offset by one element: the packed loop's alignment fails.
        check_parity([&fn, value](const TensorList& in) { return fn(in[0].narrow(0, 1, 4772), value); },
                     {small_whole({4773}, dtype)}, tolerance);
        check_parity([&fn, value](const TensorList& in) { return fn(in[0].t(), value); },
                     {small_whole({129, 37}, dtype)}, tolerance);
        if (is_floating(dtype) && std::string(op.name).find("pow") == std::string::npos) {
          check_parity(apply, {random_input({1000, 1001}, dtype, -4, 4)}, tolerance);
        }
      }
    }
  }
  // Beside 16-bit floats the scalar keeps f32 range: 0.001 * 70000 does not overflow.
  for (DType dtype : {DType::f16, DType::bf16}) {
    check_parity([](const TensorList& in) { return mul(mul(in[0], 70000.0), 0.001); },
                 {random_input({37, 129}, dtype, 0.5, 1)}, elementwise_tolerance(dtype));
    check_parity([](const TensorList& in) { return div(in[0], 1e-3); }, {random_input({37, 129}, dtype, 0.5, 1)},
                 elementwise_tolerance(dtype));
  }
}

TEST_CASE("cuda fast path: scalar forms keep the promotion rules", "[cuda]") {
  if (!cuda_ready()) return;
  struct Case {
    DType input;
    double value;
    ScalarFn fn;
    DType result;
  };
  const Case cases[] = {
      {DType::i32, 2.0, [](const Tensor& x, double v) { return add(x, v); }, DType::i32},
      {DType::i32, 0.5, [](const Tensor& x, double v) { return add(x, v); }, DType::f32},
      {DType::i64, 2.0, [](const Tensor& x, double v) { return div(x, v); }, DType::f32},
      {DType::i64, 3.0, [](const Tensor& x, double v) { return pow(v, x); }, DType::i64},
      {DType::boolean, 1.0, [](const Tensor& x, double v) { return add(x, v); }, DType::i64},
      {DType::boolean, 0.5, [](const Tensor& x, double v) { return mul(x, v); }, DType::f32},
      {DType::boolean, 1.0, [](const Tensor& x, double v) { return eq(x, v); }, DType::boolean},
      {DType::f16, 0.1, [](const Tensor& x, double v) { return sub(v, x); }, DType::f16},
      {DType::bf16, 3.0, [](const Tensor& x, double v) { return maximum(x, v); }, DType::bf16},
      {DType::f64, 0.1, [](const Tensor& x, double v) { return mul(x, v); }, DType::f64},
  };
  for (const Case& c : cases) {
    INFO("input " << dtype_name(c.input) << ", scalar " << c.value);
    Tensor x = small_whole({37, 129}, c.input);
    Tensor gpu = c.fn(x.to(kCuda0), c.value);
    REQUIRE(gpu.dtype() == c.result);
    // The same values as the tensor form with the scalar wrapped as a 0-d tensor.
    Tensor reference = c.fn(x, c.value);
    require_close(gpu.to(kCPU), reference, result_tolerance(c.result).rtol, result_tolerance(c.result).atol);
  }
}

TEST_CASE("cuda fast path: gradients of the scalar forms", "[cuda]") {
  if (!cuda_ready()) return;
  for (const NamedScalarOp& op : scalar_ops()) {
    if (std::string(op.name).size() == 2) continue;  // comparisons have no gradient
    INFO(op.name);
    const ScalarFn& fn = op.fn;
    auto transposed = [&fn](const TensorList& in) { return fn(in[0].t(), 1.5); };
    check_backward_parity(transposed, {random_input({129, 37}, DType::f32, 0.5, 2)}, {1e-5, 1e-6});
    check_backward_parity(transposed, {random_input({129, 37}, DType::f64, 0.5, 2)}, {1e-11, 1e-12});
    check_backward_parity(transposed, {random_input({129, 37}, DType::bf16, 0.5, 2)}, {2e-2, 2e-2});
    // Whole numbers tie with the scalar: maximum and minimum split those gradients.
    check_backward_parity([&fn](const TensorList& in) { return fn(in[0], 1.0); }, {small_whole({37, 129}, DType::f32)},
                          {1e-5, 1e-6});
  }
  check_backward_parity([](const TensorList& in) { return pow(0.0, in[0]); }, {random_input({37, 129}, DType::f32)},
                        {});
}

TEST_CASE("cuda fast path: broadcast operands on either side", "[cuda]") {
  if (!cuda_ready()) return;
  using BinaryFn = std::function<Tensor(const Tensor&, const Tensor&)>;
  const BinaryFn ops[] = {[](const Tensor& a, const Tensor& b) { return add(a, b); },
                          [](const Tensor& a, const Tensor& b) { return sub(a, b); },
                          [](const Tensor& a, const Tensor& b) { return div(a, b); },
                          [](const Tensor& a, const Tensor& b) { return lt(a, b); }};
  struct Pattern {
    Shape full, other;
  };
  // Bias rows (odd and vector-multiple widths), columns, 0-d and single-element operands, an
  // attention mask over a batch of heads, and a 3-d case left to the strided loop.
  const Pattern patterns[] = {
      {{37, 129}, {129}},  {{37, 128}, {128}},     {{37, 129}, {37, 1}},   {{37, 128}, {37, 1}}, {{37, 129}, {}},
      {{37, 129}, {1, 1}}, {{1000, 1001}, {1001}}, {{2, 3, 9, 9}, {9, 9}}, {{3, 5, 7}, {5, 1}},  {{5}, {}},
      {{3}, {1}}};
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    const Tolerance tolerance = result_tolerance(dtype);
    for (const BinaryFn& op : ops) {
      auto apply = [&op](const TensorList& in) { return op(in[0], in[1]); };
      for (const Pattern& p : patterns) {
        INFO("shapes " << shape_str(p.full) << " and " << shape_str(p.other));
        check_parity(apply, {small_whole(p.full, dtype), small_whole(p.other, dtype)}, tolerance);
        check_parity(apply, {small_whole(p.other, dtype), small_whole(p.full, dtype)}, tolerance);
      }
      // The full operand one element off 16-byte alignment (row-major still), and a transposed
      // small operand.
      auto misaligned = [](const Tensor& t) { return t.narrow(0, 1, 37 * 128).view({37, 128}); };
      check_parity([&op, misaligned](const TensorList& in) { return op(misaligned(in[0]), in[1]); },
                   {small_whole({37 * 128 + 1}, dtype), small_whole({128}, dtype)}, tolerance);
      check_parity([&op, misaligned](const TensorList& in) { return op(in[1], misaligned(in[0])); },
                   {small_whole({37 * 128 + 1}, dtype), small_whole({37, 1}, dtype)}, tolerance);
      check_parity([&op](const TensorList& in) { return op(in[0], in[1].t()); },
                   {small_whole({37, 129}, dtype), small_whole({129, 37}, dtype)}, tolerance);
    }
  }
  check_backward_parity([](const TensorList& in) { return mul(in[0], in[1]); },
                        {random_input({37, 129}, DType::f32), random_input({37, 1}, DType::f32)}, {1e-5, 1e-5});
}

TEST_CASE("cuda fast path: transposed and permuted copies", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    auto transposed = [](const TensorList& in) { return in[0].t().contiguous(); };
    for (const Shape& shape : std::vector<Shape>{{37, 129}, {1, 1}, {1025, 3}, {3, 1025}, {129, 37}, {64, 64}}) {
      INFO("shape " << shape_str(shape));
      check_parity(transposed, {random_input(shape, dtype, -3, 3)}, {});
    }
    check_parity([](const TensorList& in) { return in[0].transpose(1, 2).contiguous(); },
                 {random_input({3, 37, 129}, dtype, -3, 3)}, {});
    check_parity([](const TensorList& in) { return in[0].narrow(0, 1, 37).t().contiguous(); },
                 {random_input({38, 129}, dtype, -3, 3)}, {});
    // Head split: [B, T, H, D] -> [B, H, T, D], dense inner runs of 16 and of 7 elements, and
    // an offset source.
    auto heads = [](const TensorList& in) { return in[0].permute({0, 2, 1, 3}).contiguous(); };
    check_parity(heads, {random_input({2, 33, 3, 16}, dtype, -3, 3)}, {});
    check_parity(heads, {random_input({2, 33, 3, 7}, dtype, -3, 3)}, {});
    check_parity(
        [](const TensorList& in) {
          return in[0].narrow(3, 1, 16).permute({0, 2, 1, 3}).contiguous();
        },
        {random_input({2, 33, 3, 17}, dtype, -3, 3)}, {});
    check_parity(
        [](const TensorList& in) {
          return in[0].expand({37, 129}).contiguous();
        },
        {random_input({129}, dtype, -3, 3)}, {});
    // Into a transposed destination.
    check_parity(
        [](const TensorList& in) {
          Tensor dst = zeros({129, 37}, {.dtype = in[0].dtype(), .device = in[0].device()});
          Tensor view = dst.t();
          view.copy_(in[0]);
          return dst;
        },
        {random_input({37, 129}, dtype, -3, 3)}, {});
  }
  // Gradients flow through the copy.
  check_backward_parity([](const TensorList& in) { return in[0].transpose(1, 2).contiguous(); },
                        {random_input({3, 37, 129}, DType::f32)}, {});
}

TEST_CASE("cuda fast path: casts between all dtypes", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      auto cast = [to](const TensorList& in) { return in[0].to(to); };
      check_parity(cast, {random_input({37, 129}, from, -3, 3)}, {});
      check_parity([to](const TensorList& in) { return in[0].narrow(0, 1, 4772).to(to); },
                   {random_input({4773}, from, -3, 3)}, {});
      check_parity([to](const TensorList& in) { return in[0].t().to(to); }, {random_input({129, 37}, from, -3, 3)}, {});
    }
  }
}

TEST_CASE("cuda fast path: in-place add_ and mul_", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    const Tolerance tolerance = elementwise_tolerance(dtype);
    auto run_both = [&](const Shape& shape, const std::function<void(Tensor&)>& update) {
      Tensor cpu = small_whole(shape, dtype);
      Tensor gpu = cpu.to(kCuda0);
      update(cpu);
      update(gpu);
      require_close(gpu.to(kCPU), cpu, tolerance.rtol, tolerance.atol);
    };
    for (double value : {2.0, 0.5, -1.5}) {
      INFO("scalar " << value);
      run_both({37, 129}, [value](Tensor& t) { add_(t, value); });
      run_both({37, 129}, [value](Tensor& t) { mul_(t, value); });
      run_both({4773}, [value](Tensor& t) {
        Tensor view = t.narrow(0, 1, 4772);
        mul_(view, value);
      });
      run_both({129, 37}, [value](Tensor& t) {
        Tensor view = t.t();
        add_(view, value);
      });
    }
    for (const Shape& src_shape : std::vector<Shape>{{37, 129}, {129}, {37, 1}, {}}) {
      INFO("source " << shape_str(src_shape));
      Tensor src = small_whole(src_shape, dtype);
      run_both({37, 129}, [&src](Tensor& t) { add_(t, src.to(t.device())); });
      run_both({37, 129}, [&src](Tensor& t) { mul_(t, src.to(t.device())); });
    }
  }
}

TEST_CASE("cuda fast path: scalar forms, in-place ops and copies make no temporaries", "[cuda]") {
  if (!cuda_ready()) return;
  Tensor x = random_input({37, 129}, DType::f32).to(kCuda0);
  Tensor h = random_input({37, 129}, DType::bf16).to(kCuda0);
  Tensor mask = random_input({37, 129}, DType::boolean).to(kCuda0);
  Tensor row = random_input({129}, DType::f32).to(kCuda0);
  CHECK(allocations_during([&] { add(x, 2.0); }) == 1);
  CHECK(allocations_during([&] { mul(h, 0.1); }) == 1);
  CHECK(allocations_during([&] { lt(h, 0.5); }) == 1);
  CHECK(allocations_during([&] { masked_fill(x, mask, -INFINITY); }) == 1);
  CHECK(allocations_during([&] { where(mask, x, 0.0); }) == 1);
  CHECK(allocations_during([&] { add(x, row); }) == 1);
  CHECK(allocations_during([&] { x.t().contiguous(); }) == 1);
  CHECK(allocations_during([&] { add_(x, 1.0); }) == 0);
  CHECK(allocations_during([&] { mul_(h, 0.5); }) == 0);
  CHECK(allocations_during([&] { add_(x, row); }) == 0);
  CHECK(allocations_during([&] { mul_(x, x.clone()); }) == 1);  // the clone
}

// --- the CPU route of the scalar forms -------------------------------------------------------

namespace {

using BinaryTensorFn = std::function<Tensor(const Tensor&, const Tensor&)>;

// Each scalar form beside the tensor form it must reproduce (scalar wrapped as a 0-d tensor).
struct ScalarAndTensorForm {
  const char* name;
  BinaryTensorFn tensor_form;
  bool scalar_first;
};

const std::vector<ScalarAndTensorForm>& tensor_forms() {
  static const std::vector<ScalarAndTensorForm> forms = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, false},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, false},
      {"sub (scalar first)", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, true},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, false},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, false},
      {"div (scalar first)", [](const Tensor& a, const Tensor& b) { return div(a, b); }, true},
      {"pow (scalar first)", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, true},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, false},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, false},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, false},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, false},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, false},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, false},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, false},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, false},
  };
  return forms;
}

}  // namespace

TEST_CASE("scalar forms equal the tensor forms with a wrapped scalar", "[cpu]") {
  REQUIRE(tensor_forms().size() == scalar_ops().size());
  for (DType dtype : kAllDTypes) {
    for (size_t k = 0; k < scalar_ops().size(); ++k) {
      const ScalarAndTensorForm& form = tensor_forms()[k];
      for (double value : {2.0, -1.5, 0.5, 3.0, 1e-3}) {
        INFO("dtype " << dtype_name(dtype) << ", " << form.name << ", scalar " << value);
        for (const Tensor& x :
             {small_whole({37, 129}, dtype), small_whole({129, 37}, dtype).t(), small_whole({}, dtype)}) {
          Tensor actual = scalar_ops()[k].fn(x, value);
          Tensor expected;
          if (is_half(dtype)) {  // the scalar keeps f32 precision; the result is rounded once
            Tensor xf = x.to(DType::f32), s = scalar_tensor(value, {.dtype = DType::f32});
            expected = form.scalar_first ? form.tensor_form(s, xf) : form.tensor_form(xf, s);
            if (expected.dtype() != DType::boolean) expected = expected.to(dtype);
          } else {
            Tensor s = wrap_scalar(x, value);
            expected = form.scalar_first ? form.tensor_form(s, x) : form.tensor_form(x, s);
          }
          REQUIRE(actual.dtype() == expected.dtype());
          require_close(actual, expected, 0.0, 0.0);
        }
      }
    }
  }
}

TEST_CASE("in-place scalar ops use the value the tensor form would", "[cpu]") {
  for (DType dtype : kAllDTypes) {
    for (double value : {2.0, -1.5, 0.5, 0.1}) {
      INFO("dtype " << dtype_name(dtype) << ", scalar " << value);
      Tensor x = small_whole({37, 129}, dtype);
      Tensor s = wrap_scalar(x, value).to(dtype);
      Tensor added = x.clone(), multiplied = x.clone(), strided = x.t().contiguous();
      add_(added, value);
      mul_(multiplied, value);
      Tensor strided_view = strided.t();
      mul_(strided_view, value);
      require_close(added, add(x, s), 0.0, 0.0);
      require_close(multiplied, mul(x, s), 0.0, 0.0);
      require_close(strided_view, mul(x, s), 0.0, 0.0);
    }
  }
}

TEST_CASE("where with a scalar and masked_fill equal their tensor forms", "[cpu]") {
  for (DType dtype : kAllDTypes) {
    for (double value : {2.5, -1.0, 3.0}) {
      INFO("dtype " << dtype_name(dtype) << ", scalar " << value);
      Tensor x = small_whole({37, 129}, dtype);
      Tensor mask = random_input({37, 129}, DType::boolean), column = random_input({37, 1}, DType::boolean);
      require_close(where(mask, x, value), where(mask, x, wrap_scalar(x, value)), 0.0, 0.0);
      require_close(where(column, x.t().t(), value), where(column, x, wrap_scalar(x, value)), 0.0, 0.0);
      require_close(masked_fill(x, column, value), where(column, scalar_tensor(value, {.dtype = dtype}), x), 0.0, 0.0);
      REQUIRE(where(mask, x, value).dtype() == where(mask, x, wrap_scalar(x, value)).dtype());
    }
  }
}

TEST_CASE("gradients of the scalar forms, where with a scalar and masked_fill", "[cpu]") {
  for (const NamedScalarOp& op : scalar_ops()) {
    if (std::string(op.name).size() == 2) continue;  // comparisons have no gradient
    INFO(op.name);
    const ScalarFn& fn = op.fn;
    // Inputs in [0.5, 2) stay clear of the scalar 0.3 (maximum/minimum have a kink there).
    gradcheck([&fn](const TensorList& in) { return fn(in[0].t(), 0.3); }, {rand_leaf({5, 7}, 0.5, 2)});
  }
  Tensor mask = random_input({5, 7}, DType::boolean);
  gradcheck([mask](const TensorList& in) { return where(mask, in[0], -2.0); }, {rand_leaf({7})});
  gradcheck([mask](const TensorList& in) { return masked_fill(in[0], mask, -2.0); }, {rand_leaf({5, 7})});
  // Ties split the gradient evenly, as between two tensors.
  Tensor x = tensor({1.0, 2.0, 3.0}).requires_grad_(true);
  sum(maximum(x, 2.0)).backward();
  require_close(x.grad(), tensor({0.0, 0.5, 1.0}), 0.0, 0.0);
}
