// CUDA parity of conv2d, max/avg pooling and dropout against the CPU: odd sizes, strides,
// padding, dilation, groups, with and without bias, every floating dtype, non-contiguous
// operands, gradients of every input, several column blocks, determinism. Pooling and dropout
// repeat the CPU's arithmetic step for step, so they must match it bit for bit.
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

// cuBLAS and OpenBLAS sum the products in different orders (errors grow with the partial sums,
// not with the result); 16-bit outputs are rounded once from f32 on both devices, so they differ
// by at most one rounding step.
Tolerance conv_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-12, 1e-12};
    case DType::f32:
      return {2e-5, 5e-5};
    case DType::f16:
      return {2e-3, 2e-3};
    default:
      return {1e-2, 1e-2};
  }
}

// Weight gradients sum about 500 products per element.
Tolerance conv_grad_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-11, 1e-11};
    case DType::f32:
      return {1e-4, 3e-4};
    case DType::f16:
      return {4e-3, 4e-3};
    default:
      return {2e-2, 2e-2};
  }
}

constexpr Tolerance kExact{0.0, 0.0};

// conv2d of in[0] with weight in[1] and, when present, bias in[2].
Fn conv_with(Conv2dOptions options) {
  return [options](const TensorList& in) { return conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), options); };
}

struct ConvCase {
  Shape x, w;
  Conv2dOptions options;
};

const ConvCase kConvCases[] = {
    {{3, 5, 13, 13}, {7, 5, 3, 3}, {}},
    {{3, 5, 13, 13}, {4, 5, 3, 3}, {.padding = {1, 1}}},
    {{3, 5, 13, 13}, {6, 5, 5, 5}, {.stride = {2, 2}, .padding = {2, 2}}},
    {{3, 5, 28, 28}, {4, 5, 3, 3}, {.stride = {2, 1}, .padding = {0, 1}, .dilation = {2, 3}}},
    {{3, 5, 28, 13}, {3, 5, 5, 3}, {.stride = {1, 2}, .padding = {2, 0}, .dilation = {1, 2}}},
    {{3, 6, 13, 11}, {9, 2, 3, 3}, {.padding = {1, 1}, .groups = 3}},
    {{3, 5, 13, 13}, {10, 1, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 5}},  // depthwise, 2 per channel
    {{2, 4, 9, 10}, {5, 4, 1, 1}, {}},                                                    // pointwise
    {{2, 4, 9, 10}, {5, 4, 1, 1}, {.stride = {2, 3}, .padding = {1, 0}}},                 // 1x1 over padding
    {{1, 1, 28, 28}, {8, 1, 3, 3}, {.padding = {1, 1}}},                                  // the CNN's first layer
    {{3, 5, 4, 6}, {2, 5, 4, 6}, {}},                                                     // one output position
};

struct PoolCase {
  Shape x;
  Pool2dOptions options;
};

const PoolCase kPoolCases[] = {
    {{3, 5, 13, 13}, {.kernel = {2, 2}}},  // the last row and column belong to no window
    {{3, 5, 28, 28}, {.kernel = {2, 2}}},
    {{3, 5, 13, 13}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
    {{3, 5, 13, 28}, {.kernel = {3, 2}, .stride = {1, 2}, .padding = {1, 0}}},
    {{3, 5, 13, 13}, {.kernel = {5, 5}, .stride = {1, 1}, .padding = {2, 2}}},  // up to 25 windows per pixel
    {{2, 3, 7, 9}, {.kernel = {4, 3}, .stride = {3, 1}, .padding = {2, 1}}},
    {{3, 5, 4, 6}, {.kernel = {4, 6}}},
};

using PoolFn = Tensor (*)(const Tensor&, Pool2dOptions);

// Forward and backward of a pooling op, exactly equal to the CPU's.
void check_pool(PoolFn op) {
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    for (const PoolCase& c : kPoolCases) {
      INFO("input " << shape_str(c.x) << ", kernel " << c.options.kernel[0] << "x" << c.options.kernel[1]);
      const Pool2dOptions options = c.options;
      auto pool = [op, options](const TensorList& in) { return op(in[0], options); };
      check_parity(pool, {random_input(c.x, dtype, -3, 3)}, kExact);
      check_backward_parity(pool, {random_input(c.x, dtype, -3, 3)}, kExact);
      // Few distinct values: many ties, broken towards the first maximum.
      Tensor ties = random_input(c.x, DType::i64, 0, 4).to(dtype);
      check_parity(pool, {ties}, kExact);
      check_backward_parity(pool, {ties}, kExact);
    }
    // Non-contiguous inputs: transposed, channels-last, strided.
    const Pool2dOptions overlapping{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
    const std::pair<Fn, Shape> views[] = {
        {[op, overlapping](const TensorList& in) { return op(in[0].transpose(2, 3), overlapping); }, {3, 5, 13, 28}},
        {[op, overlapping](const TensorList& in) {
           return op(in[0].permute({0, 3, 1, 2}), overlapping);
         },
         {3, 13, 28, 5}},
        {[op, overlapping](const TensorList& in) { return op(in[0].slice(3, 1, 28, 2), overlapping); }, {3, 5, 13, 28}},
    };
    for (const auto& [fn, shape] : views) {
      check_parity(fn, {random_input(shape, dtype, -3, 3)}, kExact);
      check_backward_parity(fn, {random_input(shape, dtype, -3, 3)}, kExact);
    }
    // An empty batch.
    auto pool = [op](const TensorList& in) { return op(in[0], {.kernel = {2, 2}}); };
    check_parity(pool, {random_input({0, 5, 13, 13}, dtype)}, kExact);
  }
  check_deterministic(
      [op](const TensorList& in) {
        return op(in[0], {.kernel = {3, 3}, .stride = {2, 2}});
      },
      {random_input({16, 32, 57, 57}, DType::f32)});
}

// x with NaN and -inf at scattered positions.
Tensor with_nan_and_inf(const Shape& shape, DType dtype) {
  std::vector<double> v = random_input(shape, DType::f64, -3, 3).to_vector<double>();
  for (size_t i = 0; i < v.size(); i += 7) v[i] = std::numeric_limits<double>::quiet_NaN();
  for (size_t i = 3; i < v.size(); i += 11) v[i] = -std::numeric_limits<double>::infinity();
  return from_vector(v, shape).to(dtype);
}

}  // namespace

GENESIS_CUDA_PARITY("conv2d") {
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    const Tolerance tolerance = conv_tolerance(dtype), grad_tolerance = conv_grad_tolerance(dtype);
    for (const ConvCase& c : kConvCases) {
      INFO("input " << shape_str(c.x) << ", weight " << shape_str(c.w) << ", groups " << c.options.groups);
      Tensor x = random_input(c.x, dtype), w = random_input(c.w, dtype), b = random_input({c.w[0]}, dtype);
      const Fn conv = conv_with(c.options);
      check_parity(conv, {x, w}, tolerance);
      check_parity(conv, {x, w, b}, tolerance);
      check_backward_parity(conv, {x, w}, grad_tolerance);
      check_backward_parity(conv, {x, w, b}, grad_tolerance);
    }
    // Non-contiguous input, weight and bias: transposed, channels-last, strided.
    const Conv2dOptions padded{.stride = {2, 1}, .padding = {1, 2}};
    auto transposed = [padded](const TensorList& in) {
      return conv2d(in[0].transpose(1, 2), in[1].transpose(2, 3), in[2].slice(0, 0, 14, 2), padded);
    };
    TensorList transposed_in = {random_input({3, 13, 5, 13}, dtype), random_input({7, 5, 3, 3}, dtype),
                                random_input({14}, dtype)};
    check_parity(transposed, transposed_in, tolerance);
    check_backward_parity(transposed, transposed_in, grad_tolerance);
    auto channels_last = [padded](const TensorList& in) {
      return conv2d(in[0].permute({0, 3, 1, 2}).slice(3, 1, 27, 2), in[1], Tensor(), padded);
    };
    TensorList channels_last_in = {random_input({3, 13, 27, 5}, dtype), random_input({4, 5, 3, 5}, dtype)};
    check_parity(channels_last, channels_last_in, tolerance);
    check_backward_parity(channels_last, channels_last_in, grad_tolerance);
    // An empty batch: no output, a zero weight gradient.
    TensorList empty_batch = {random_input({0, 5, 13, 13}, dtype), random_input({7, 5, 3, 3}, dtype),
                              random_input({7}, dtype)};
    check_parity(conv_with({.padding = {1, 1}}), empty_batch, tolerance);
    check_backward_parity(conv_with({.padding = {1, 1}}), empty_batch, grad_tolerance);
  }
  // 27 samples of 32 x 9 x 96 x 96 column entries overflow the 2^26-entry column buffer: two
  // blocks, whose weight gradients add up. Weight gradients sum 27 * 9216 products of partial
  // sums near 300, hence the absolute tolerance; a lost sample would be off by about 20.
  TensorList large = {random_input({27, 32, 96, 96}, DType::f32), random_input({3, 32, 3, 3}, DType::f32),
                      random_input({3}, DType::f32)};
  check_parity(conv_with({.padding = {1, 1}}), large, {1e-5, 1e-4});
  check_backward_parity(conv_with({.padding = {1, 1}}), large, {1e-4, 3e-2});
  // Forward and every gradient: the same bits each run.
  const Conv2dOptions options{.stride = {2, 2}, .padding = {1, 1}, .groups = 2};
  check_deterministic(
      [options](const TensorList& in) {
        Tensor x = in[0].detach().requires_grad_(true), w = in[1].detach().requires_grad_(true);
        Tensor b = in[2].detach().requires_grad_(true);
        Tensor y = conv2d(x, w, b, options);
        sum(mul(y, in[3])).backward();
        return cat({y.detach().to(kCPU).flatten(), x.grad().to(kCPU).flatten(), w.grad().to(kCPU).flatten(),
                    b.grad().to(kCPU).flatten()});
      },
      {random_input({8, 16, 29, 29}, DType::f32), random_input({12, 8, 3, 3}, DType::f32),
       random_input({12}, DType::f32), random_input({8, 12, 15, 15}, DType::f32)});
  // Operands on different devices are refused.
  CHECK_THROWS_AS(conv2d(random_input({1, 2, 5, 5}, DType::f32).to(kCuda0), random_input({3, 2, 3, 3}, DType::f32)),
                  DeviceError);
}

GENESIS_CUDA_PARITY("max_pool2d") {
  check_pool(max_pool2d);
  // NaN wins its window (the first one seen), -inf never beats a real value; gradients follow.
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    auto pool = [](const TensorList& in) { return max_pool2d(in[0], {.kernel = {3, 3}, .stride = {2, 2}}); };
    check_parity(pool, {with_nan_and_inf({3, 5, 13, 13}, dtype)}, kExact);
    check_backward_parity(pool, {with_nan_and_inf({3, 5, 13, 13}, dtype)}, kExact);
  }
}

GENESIS_CUDA_PARITY("avg_pool2d") {
  check_pool(avg_pool2d);
}

GENESIS_CUDA_PARITY("dropout") {
  const std::vector<Shape> shapes = {{37, 129}, {3, 5, 7}, {1, 1}, {}, {0, 5}, {1001}};
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    for (double p : {0.1, 0.5, 0.9, 1.0}) {
      INFO("p " << p);
      // A fresh generator with one seed on each device: the same mask, the same scaled values.
      auto drop = [p](const TensorList& in) {
        Generator gen(1234);
        return dropout(in[0], p, true, &gen);
      };
      for (const Shape& shape : shapes) check_parity(drop, {random_input(shape, dtype, -2, 2)}, kExact);
      check_parity(
          [p](const TensorList& in) {
            Generator gen(77);
            return dropout(in[0].t().slice(1, 1, 37, 3), p, true, &gen);
          },
          {random_input({37, 129}, dtype, -2, 2)}, kExact);
      check_backward_parity(drop, {random_input({37, 129}, dtype, -2, 2)}, kExact);
      check_backward_parity(
          [p](const TensorList& in) {
            Generator gen(5);
            return dropout(in[0].t(), p, true, &gen);
          },
          {random_input({13, 31}, dtype, -2, 2)}, kExact);
    }
  }
  Tensor x = random_input({1001, 17}, DType::f32, -2, 2);
  Tensor xg = x.to(kCuda0);
  // The kept elements are those of the CPU's bernoulli draw at the same generator state.
  {
    Generator cpu_gen(3), cuda_gen(3);
    Tensor keep = bernoulli(x.shape(), 0.7, {.dtype = DType::boolean}, &cpu_gen);
    Tensor y = dropout(xg, 0.3, true, &cuda_gen).to(kCPU);
    require_close(ne(y, 0.0), keep, 0.0, 0.0);
    CHECK(cpu_gen.state() == cuda_gen.state());
    // Kept values are scaled by 1 / (1 - p); about 70% are kept.
    require_close(y, where(keep, mul(x, scalar_tensor(1.0 / (1.0 - 0.3))), 0.0), 0.0, 0.0);
    const double kept = sum(keep.to(DType::f64)).item() / static_cast<double>(x.numel());
    CHECK(std::abs(kept - 0.7) < 0.02);
  }
  // Draws alternate between devices on one generator: the offsets advance alike, so replaying
  // the same sequence with the devices swapped gives the same masks.
  {
    Generator first(9), second(9);
    Tensor a1 = dropout(x, 0.4, true, &first), b1 = dropout(xg, 0.4, true, &first);
    Tensor a2 = dropout(xg, 0.4, true, &second), b2 = dropout(x, 0.4, true, &second);
    require_close(a2, a1, 0.0, 0.0);
    require_close(b1, b2, 0.0, 0.0);
    CHECK(sum(ne(a1, b2)).item() > 0);  // successive draws differ
    CHECK(first.state() == second.state());
  }
  // The default generator, too.
  manual_seed(11);
  Tensor on_cpu = dropout(x, 0.5);
  manual_seed(11);
  require_close(dropout(xg, 0.5), on_cpu, 0.0, 0.0);
  // p = 0 and evaluation mode return the input itself; p = 1 zeroes values and gradients.
  CHECK(dropout(xg, 0.0).is_same(xg));
  CHECK(dropout(xg, 0.7, false).is_same(xg));
  Tensor leaf = xg.detach().requires_grad_(true);
  Tensor dropped = dropout(leaf, 1.0);
  sum(dropped).backward();
  CHECK(sum(abs(dropped)).item() == 0.0);
  CHECK(sum(abs(leaf.grad())).item() == 0.0);
  // The same generator state gives the same bits.
  check_deterministic(
      [](const TensorList& in) {
        Generator gen(21);
        return dropout(in[0], 0.25, true, &gen);
      },
      {random_input({4099}, DType::bf16)});
}
