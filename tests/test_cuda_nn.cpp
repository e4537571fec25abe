// CUDA parity of the neural-network functions: softmax family, layer/RMS norm and embedding
// against the CPU on odd sizes, warp-per-row and block-per-row lengths, empty inputs,
// non-contiguous operands, every floating dtype, the norms' mixed dtypes (f32 parameters, 16-bit
// x or y), gradients and determinism.
#include <optional>

#include "libgenesis/autograd/autocast.h"
#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

// Row statistics summed in another order: the CPU adds f32 rows sequentially, so the mean of a
// 3000-long row differs by ~1e-6, which stays absolute where w * xhat + b cancels; in 16-bit
// outputs the last bit may flip.
Tolerance forward_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-12, 1e-12};
    case DType::f32:
      return {1e-5, 1e-5};
    case DType::f16:
      return {2e-3, 2e-3};
    default:
      return {2e-2, 2e-2};
  }
}

// Gradients of 16-bit types start from forward outputs that may differ by one rounding step
// between the devices (log_softmax: exp(y) of it, times a row sum), so they get a few of them.
Tolerance backward_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-11, 1e-12};
    case DType::f32:
      return {1e-4, 2e-5};
    case DType::f16:
      return {1e-2, 1e-2};
    default:
      return {6e-2, 6e-2};
  }
}

using AxisFn = std::function<Tensor(const Tensor&, int64_t)>;

struct SoftmaxCase {
  Shape shape;
  int64_t axis;
};
// Warp-per-row (<= 1024) and block-per-row lengths, other axes, a 0-d input and empty inputs;
// rows of 16-byte packs held in registers by a warp (200, 768, 1024: 2 to 8 packs per lane) or
// a block (1536, 4096, 8192, 16384), row counts off the 8-rows-per-block boundary.
const SoftmaxCase kSoftmaxCases[] = {{{37, 129}, -1}, {{3, 5, 7}, 2},   {{5, 3001}, 1},  {{2, 1025}, -1},
                                     {{1, 1}, 1},     {{}, 0},          {{37, 129}, 0},  {{3, 5, 7}, 1},
                                     {{3, 5, 7}, -3}, {{0, 5}, 1},      {{4, 0}, 1},     {{21, 200}, -1},
                                     {{19, 768}, 1},  {{9, 1024}, -1},  {{5, 1536}, -1}, {{3, 4096}, -1},
                                     {{2, 8192}, 1},  {{2, 16384}, -1}, {{17, 8}, -1}};

void check_softmax_family(const AxisFn& op) {
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    const Tolerance tolerance = forward_tolerance(dtype);
    for (const SoftmaxCase& c : kSoftmaxCases) {
      INFO("shape " << shape_str(c.shape) << ", axis " << c.axis);
      const int64_t axis = c.axis;
      check_parity([&op, axis](const TensorList& in) { return op(in[0], axis); }, {random_input(c.shape, dtype, -5, 5)},
                   tolerance);
    }
    // Non-contiguous inputs: transposed, strided, and a large spread of values.
    check_parity([&op](const TensorList& in) { return op(in[0].t(), -1); }, {random_input({129, 37}, dtype, -5, 5)},
                 tolerance);
    check_parity([&op](const TensorList& in) { return op(in[0].slice(1, 1, 2049, 2), 1); },
                 {random_input({7, 2049}, dtype, -5, 5)}, tolerance);
    check_parity(
        [&op](const TensorList& in) {
          return op(in[0].permute({2, 0, 1}), 0);
        },
        {random_input({3, 5, 7}, dtype, -30, 30)}, tolerance);
    if (dtype == DType::f32) {
      check_parity([&op](const TensorList& in) { return op(in[0], 1); }, {random_input({1000, 1001}, dtype, -5, 5)},
                   tolerance);
    }
    const Tolerance grad_tolerance = backward_tolerance(dtype);
    check_backward_parity([&op](const TensorList& in) { return op(in[0], -1); }, {random_input({37, 129}, dtype)},
                          grad_tolerance);
    check_backward_parity([&op](const TensorList& in) { return op(in[0].t(), 1); }, {random_input({3001, 3}, dtype)},
                          grad_tolerance);
    check_backward_parity([&op](const TensorList& in) { return op(in[0], 1); }, {random_input({3, 5, 7}, dtype)},
                          grad_tolerance);
    for (const Shape& packed : {Shape{19, 768}, Shape{9, 1024}, Shape{3, 4096}, Shape{2, 8192}}) {
      INFO("packed rows " << shape_str(packed));
      check_backward_parity([&op](const TensorList& in) { return op(in[0], -1); }, {random_input(packed, dtype)},
                            grad_tolerance);
    }
    // Contiguous rows 4 bytes off a 16-byte boundary take the scalar path.
    check_parity(
        [&op](const TensorList& in) {
          return op(in[0].slice(0, 1, 1 + 6 * 768).view({6, 768}), -1);
        },
        {random_input({1 + 6 * 768}, dtype, -5, 5)}, tolerance);
  }
  check_deterministic([&op](const TensorList& in) { return op(in[0], 1); }, {random_input({8, 5000}, DType::f32)});
}

struct NormCase {
  Shape x;
  Shape normalized;
};
// Warp-per-row and block-per-row row lengths, several trailing dims, a single element, no rows;
// register rows of a warp (200, 768, 1024) or a block (1536, 4096, 8192), row counts off the
// 8-rows-per-block boundary.
const NormCase kNormCases[] = {{{37, 129}, {129}},  {{3, 5, 7}, {5, 7}}, {{4, 3001}, {3001}},    {{2, 1025}, {1025}},
                               {{1, 1}, {1}},       {{0, 16}, {16}},     {{5, 2, 3}, {2, 3}},    {{300, 20}, {20}},
                               {{21, 200}, {200}},  {{19, 768}, {768}},  {{3, 3, 1024}, {1024}}, {{5, 1536}, {1536}},
                               {{6, 2048}, {2048}}, {{3, 4096}, {4096}}, {{2, 8192}, {8192}}};

using NormFn = std::function<Tensor(const Tensor& x, const Shape& normalized, const Tensor& w, const Tensor& b)>;

// op with weight and, when `has_bias`, bias from inputs 1 and 2.
Fn with_weight(const NormFn& op, bool has_bias, const Shape& normalized) {
  return [op, has_bias, normalized](const TensorList& in) {
    return op(in[0], normalized, in[1], has_bias ? in[2] : Tensor());
  };
}

// op with weight and bias (when `has_bias`), with weight only and with neither, over kNormCases,
// non-contiguous operands, every floating dtype; gradients of x, weight and bias.
void check_norm(const NormFn& op, bool has_bias) {
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    const Tolerance tolerance = forward_tolerance(dtype);
    const Tolerance grad_tolerance = backward_tolerance(dtype);
    for (const NormCase& c : kNormCases) {
      INFO("shape " << shape_str(c.x) << ", normalized " << shape_str(c.normalized));
      const Shape normalized = c.normalized;
      Tensor x = random_input(c.x, dtype, -2, 3);
      Tensor w = random_input(normalized, dtype, 0.5, 1.5);
      Tensor b = random_input(normalized, dtype, -1, 1);
      auto with_params = [&op, normalized, has_bias](const TensorList& in) {
        return op(in[0], normalized, in[1], has_bias ? in[2] : Tensor());
      };
      TensorList params = has_bias ? TensorList{x, w, b} : TensorList{x, w};
      check_parity(with_params, params, tolerance);
      check_parity([&op, normalized](const TensorList& in) { return op(in[0], normalized, Tensor(), Tensor()); }, {x},
                   tolerance);
      check_backward_parity(with_params, params, grad_tolerance);
      check_backward_parity(
          [&op, normalized](const TensorList& in) { return op(in[0], normalized, Tensor(), Tensor()); }, {x},
          grad_tolerance);
    }
    // Transposed input, strided weight and bias.
    auto strided = [&op, has_bias](const TensorList& in) {
      return op(in[0].t(), {129}, in[1].slice(0, 1, 259, 2), has_bias ? in[2].slice(0, 0, 258, 2) : Tensor());
    };
    TensorList strided_params = {random_input({129, 37}, dtype, -2, 3), random_input({259}, dtype, 0.5, 1.5)};
    if (has_bias) strided_params.push_back(random_input({258}, dtype, -1, 1));
    check_parity(strided, strided_params, tolerance);
    check_backward_parity(strided, strided_params, grad_tolerance);
    // Rows 4 bytes off a 16-byte boundary take the scalar path.
    auto misaligned = [&op](const TensorList& in) {
      return op(in[0].slice(0, 1, 1 + 6 * 768).view({6, 768}), {768}, in[1], Tensor());
    };
    check_backward_parity(misaligned, {random_input({1 + 6 * 768}, dtype, -2, 3), random_input({768}, dtype, 0.5, 1.5)},
                          grad_tolerance);
    // Many rows per block of the fused backward: 2500 rows over at most 3 x 132 blocks of 8
    // warps; 1280 columns of 16-bit rows fit only two blocks' column sums per multiprocessor.
    for (int64_t cols : {768, 1280}) {
      TensorList tall = {random_input({2500, cols}, dtype, -2, 3), random_input({cols}, dtype, 0.5, 1.5)};
      if (has_bias) tall.push_back(random_input({cols}, dtype, -1, 1));
      check_backward_parity(with_weight(op, has_bias, {cols}), tall,
                            dtype == DType::f32 || dtype == DType::f64 ? Tolerance{1e-4, 1e-4} : grad_tolerance);
    }
  }
  // Many rows: the weight gradient adds many row chunks; the same bits every run.
  TensorList many_rows = {random_input({3000, 64}, DType::f32, -2, 3), random_input({64}, DType::f32, 0.5, 1.5),
                          random_input({64}, DType::f32, -1, 1)};
  auto full = [&op, has_bias](const TensorList& in) { return op(in[0], {64}, in[1], has_bias ? in[2] : Tensor()); };
  check_backward_parity(full, has_bias ? many_rows : TensorList{many_rows[0], many_rows[1]}, {1e-4, 1e-4});
  check_deterministic(
      [&full](const TensorList& in) {
        Tensor x = in[0].detach().requires_grad_(true), w = in[1].detach().requires_grad_(true);
        Tensor b = in[2].detach().requires_grad_(true);
        sum(mul(full({x, w, b}), in[3])).backward();
        return w.grad();
      },
      {many_rows[0], many_rows[1], many_rows[2], random_input({3000, 64}, DType::f32)});
  // Mismatched devices are refused.
  Tensor x = random_input({4, 8}, DType::f32).to(kCuda0);
  CHECK_THROWS_AS(op(x, {8}, random_input({8}, DType::f32), Tensor()), DeviceError);
}

// op with f32 parameters and x of f32, bf16 or f16, under no autocast (y of x's dtype) or bf16 or
// f16 autocast (y of that dtype): register rows of a warp or a block, the scalar path (odd
// widths, rows off a 16-byte boundary, a transposed x), and many rows per block of the fused
// backward; gradients of x (x's dtype) and the parameters (f32), and of x alone without them.
void check_mixed_norm(const NormFn& op, bool has_bias) {
  const Shape kShapes[] = {{37, 129}, {21, 200}, {19, 768}, {5, 1536}, {2, 8192}, {4, 3001}, {2500, 768}, {2500, 1280}};
  for (DType x_dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (std::optional<DType> autocast :
         {std::optional<DType>(), std::optional(DType::bf16), std::optional(DType::f16)}) {
      if (x_dtype == DType::f32 && !autocast) continue;  // one dtype throughout: check_norm
      INFO("x " << dtype_name(x_dtype) << ", autocast " << (autocast ? dtype_name(*autocast) : "off"));
      const DType y_dtype = autocast.value_or(x_dtype);
      const Tolerance tolerance = forward_tolerance(y_dtype);
      // f32 gradients of x and of the parameters summed over 2500 rows: as check_norm's tall rows.
      const Tolerance grad_tolerance = x_dtype == DType::f32 ? Tolerance{1e-4, 1e-4} : backward_tolerance(x_dtype);
      // The parameters are inputs 1 and 2 when given.
      auto under_autocast = [&op, has_bias, autocast](std::function<Tensor(const Tensor&)> view, Shape normalized) {
        return [=](const TensorList& in) {
          AutocastGuard guard(autocast);
          const Tensor w = in.size() > 1 ? in[1] : Tensor(), b = has_bias && in.size() > 2 ? in[2] : Tensor();
          Tensor y = op(view(in[0]), normalized, w, b);
          REQUIRE(y.dtype() == autocast.value_or(in[0].dtype()));
          return y;
        };
      };
      auto params = [has_bias](Tensor x, int64_t cols) {
        TensorList in = {std::move(x), random_input({cols}, DType::f32, 0.5, 1.5)};
        if (has_bias) in.push_back(random_input({cols}, DType::f32, -1, 1));
        return in;
      };
      auto as_is = [](const Tensor& x) { return x; };
      for (const Shape& shape : kShapes) {
        INFO("shape " << shape_str(shape));
        const int64_t cols = shape[1];
        const TensorList in = params(random_input(shape, x_dtype, -2, 3), cols);
        if (shape[0] < 1000) check_parity(under_autocast(as_is, {cols}), in, tolerance);
        check_backward_parity(under_autocast(as_is, {cols}), in, grad_tolerance);
        check_backward_parity(under_autocast(as_is, {cols}), {in[0]}, grad_tolerance);
      }
      // A transposed x, and contiguous rows 4 bytes off a 16-byte boundary.
      auto transposed = under_autocast([](const Tensor& x) { return x.t(); }, {129});
      const TensorList transposed_in = params(random_input({129, 37}, x_dtype, -2, 3), 129);
      check_parity(transposed, transposed_in, tolerance);
      check_backward_parity(transposed, transposed_in, grad_tolerance);
      auto misaligned = under_autocast(
          [](const Tensor& x) {
            return x.slice(0, 1, 1 + 6 * 768).view({6, 768});
          },
          {768});
      const TensorList misaligned_in = params(random_input({1 + 6 * 768}, x_dtype, -2, 3), 768);
      check_parity(misaligned, misaligned_in, tolerance);
      check_backward_parity(misaligned, misaligned_in, grad_tolerance);
    }
  }
}

}  // namespace

GENESIS_CUDA_PARITY("softmax") {
  check_softmax_family([](const Tensor& x, int64_t axis) { return softmax(x, axis); });
}

GENESIS_CUDA_PARITY("log_softmax") {
  check_softmax_family([](const Tensor& x, int64_t axis) { return log_softmax(x, axis); });
}

GENESIS_CUDA_PARITY("layer_norm") {
  auto op = [](const Tensor& x, const Shape& normalized, const Tensor& w, const Tensor& b) {
    return layer_norm(x, normalized, w, b);
  };
  check_norm(op, true);
  check_mixed_norm(op, true);
}

GENESIS_CUDA_PARITY("rms_norm") {
  auto op = [](const Tensor& x, const Shape& normalized, const Tensor& w, const Tensor&) {
    return rms_norm(x, normalized, w);
  };
  check_norm(op, false);
  check_mixed_norm(op, false);
}

GENESIS_CUDA_PARITY("embedding") {
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    for (DType index_dtype : {DType::i64, DType::i32}) {
      INFO("index dtype " << dtype_name(index_dtype));
      // Few rows for many positions: most rows are picked several times.
      Tensor indices = random_input({7, 13}, DType::i64, 0, 50).to(index_dtype);
      Tensor weight = random_input({50, 33}, dtype, -2, 2);
      for (std::optional<int64_t> pad :
           {std::optional<int64_t>(), std::optional<int64_t>(3), std::optional<int64_t>(-1)}) {
        INFO("padding_idx " << (pad ? *pad : -100));
        auto lookup = [pad](const TensorList& in) { return embedding(in[0], in[1], pad); };
        check_parity(lookup, {indices, weight}, {});
        check_parity([pad](const TensorList& in) { return embedding(in[0].t(), in[1].t(), pad); },
                     {indices, random_input({33, 50}, dtype, -2, 2)}, {});
        auto gradient = [indices, pad](const TensorList& in) {
          return embedding(indices.to(in[0].device()), in[0], pad);
        };
        check_backward_parity(gradient, {weight}, forward_tolerance(dtype));
        check_backward_parity(
            [indices, pad](const TensorList& in) { return embedding(indices.t().to(in[0].device()), in[0].t(), pad); },
            {random_input({33, 50}, dtype, -2, 2)}, forward_tolerance(dtype));
      }
      // A 0-d index, no indices, wide rows, and more rows than positions.
      check_parity([](const TensorList& in) { return embedding(in[0], in[1]); },
                   {random_input({}, DType::i64, 0, 50).to(index_dtype), weight}, {});
      check_parity([](const TensorList& in) { return embedding(in[0], in[1]); },
                   {random_input({0}, DType::i64, 0, 50).to(index_dtype), weight}, {});
      check_parity([](const TensorList& in) { return embedding(in[0], in[1]); },
                   {random_input({5, 3}, DType::i64, 0, 1000).to(index_dtype), random_input({1000, 1027}, dtype)}, {});
      // Rows of 16-byte packs, picked several times each.
      Tensor packed_ids = random_input({9, 11}, DType::i64, 0, 40).to(index_dtype);
      check_parity([](const TensorList& in) { return embedding(in[0], in[1]); },
                   {packed_ids, random_input({40, 768}, dtype)}, {});
      check_backward_parity(
          [packed_ids](const TensorList& in) { return embedding(packed_ids.to(in[0].device()), in[0], 5); },
          {random_input({40, 768}, dtype)}, forward_tolerance(dtype));
      Tensor sparse = random_input({5, 3}, DType::i64, 0, 1000).to(index_dtype);
      check_backward_parity([sparse](const TensorList& in) { return embedding(sparse.to(in[0].device()), in[0]); },
                            {random_input({1000, 1027}, dtype)}, forward_tolerance(dtype));
    }
  }
  // A large table picked at few positions (most rows zero, the device sort's row starts found by
  // binary search), and no positions at all.
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor few = random_input({37}, DType::i64, 0, 5000);
    check_backward_parity([few](const TensorList& in) { return embedding(few.to(in[0].device()), in[0]); },
                          {random_input({5000, 24}, dtype)}, forward_tolerance(dtype));
    Tensor none = random_input({0}, DType::i64, 0, 7);
    check_backward_parity([none](const TensorList& in) { return embedding(none.to(in[0].device()), in[0]); },
                          {random_input({7, 16}, dtype)}, forward_tolerance(dtype));
  }
  // Many positions into few rows: long in-order sums, the same bits every run.
  Tensor indices = random_input({4000}, DType::i64, 0, 10);
  check_backward_parity([indices](const TensorList& in) { return embedding(indices.to(in[0].device()), in[0]); },
                        {random_input({10, 96}, DType::f32)}, {1e-5, 1e-5});
  check_deterministic(
      [indices](const TensorList& in) {
        Tensor w = in[0].detach().requires_grad_(true);
        sum(mul(embedding(indices.to(w.device()), w), in[1])).backward();
        return w.grad();
      },
      {random_input({10, 96}, DType::f32), random_input({4000, 96}, DType::f32)});
  // Devices must match; a bad index:
  Tensor weight = random_input({10, 4}, DType::f32).to(kCuda0);
  // Reported by the kernel, raised at the next synchronization (here the copy to the host).
  CHECK_THROWS_AS(embedding(tensor({1, 10}, {2}, {.dtype = DType::i64}).to(kCuda0), weight).to(kCPU), IndexError);
  CHECK_THROWS_AS(embedding(tensor({-1, 2}, {2}, {.dtype = DType::i32}).to(kCuda0), weight).to(kCPU), IndexError);
  CHECK_THROWS_AS(embedding(tensor({1, 2}, {2}, {.dtype = DType::i64}), weight), DeviceError);
}
