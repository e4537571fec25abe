// The CUDA contiguous elementwise loop (one 16-byte pack per thread, one thread per pack) and the
// one-thread-per-unit grid of cat, against the CPU. Sizes straddle the block and pack boundaries:
// a single partial block, one element past whole blocks, thousands of blocks with a tail shorter
// than a pack; cat pieces of a million elements and more.
#include <vector>

#include "libgenesis/ops/elementwise.h"
#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

// Blocks of 128 threads, one pack of 2 f64 / 4 f32 / 8 bf16 elements each: 256 / 512 / 1024 elements.
const std::vector<Shape> kBlockShapes = {{3}, {31}, {255}, {513}, {1025}, {4097}, {3, 4099}, {1 << 20}, {517, 2053}};

const DType kBlockDTypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::boolean};

}  // namespace

TEST_CASE("cuda contiguous loop: unary, binary, scalar and comparison ops at block boundaries", "[cuda]") {
  if (!cuda_ready()) return;
  for (const Shape& shape : kBlockShapes) {
    INFO("shape " << shape_str(shape));
    for (DType dtype : kBlockDTypes) {
      INFO("dtype " << dtype_name(dtype));
      const Tolerance tolerance = elementwise_tolerance(dtype);
      const TensorList pair = {random_input(shape, dtype, -2, 2), random_input(shape, dtype, -2, 2)};
      check_parity([](const TensorList& in) { return add(in[0], in[1]); }, pair, tolerance);
      check_parity([](const TensorList& in) { return mul(in[0], 1.5); }, {pair[0]}, tolerance);
      check_parity([](const TensorList& in) { return lt(in[0], in[1]); }, pair, {});
      if (is_floating(dtype)) {
        check_parity([](const TensorList& in) { return gelu(in[0], GeluApproximation::tanh); }, {pair[0]}, tolerance);
        check_parity([](const TensorList& in) { return exp(in[0]); }, {pair[0]}, tolerance);
      }
    }
  }
}

TEST_CASE("cuda contiguous loop: unary backward and in-place ops at block boundaries", "[cuda]") {
  if (!cuda_ready()) return;
  for (const Shape& shape : kBlockShapes) {
    INFO("shape " << shape_str(shape));
    for (DType dtype : kFloatDTypes) {
      INFO("dtype " << dtype_name(dtype));
      const Tolerance tolerance = elementwise_tolerance(dtype);
      check_backward_parity([](const TensorList& in) { return gelu(in[0], GeluApproximation::tanh); },
                            {random_input(shape, dtype, -3, 3)}, tolerance);
      check_backward_parity([](const TensorList& in) { return silu(in[0]); }, {random_input(shape, dtype, -3, 3)},
                            tolerance);
      // The output aliases the first input.
      Tensor dst = random_input(shape, dtype, -2, 2), src = random_input(shape, dtype, -2, 2);
      Tensor dst_gpu = dst.to(kCuda0);
      add_(dst, src);
      add_(dst_gpu, src.to(kCuda0));
      require_close(dst_gpu, dst, tolerance.rtol, tolerance.atol);
    }
  }
}

TEST_CASE("cuda cat: large pieces along the outer and an inner axis", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
    INFO("dtype " << dtype_name(dtype));
    const TensorList pieces = {random_input({1024, 512}, dtype), random_input({1024, 384}, dtype),
                               random_input({0, 512}, dtype), random_input({1024, 0}, dtype)};
    check_parity([](const TensorList& in) { return cat({in[0], in[1], in[3]}, 1); }, pieces, {});
    check_parity([](const TensorList& in) { return cat({in[1], in[0], in[1]}, -1); }, pieces, {});
    check_parity([](const TensorList& in) { return cat({in[0], in[2], in[0]}, 0); }, pieces, {});
    check_parity([](const TensorList& in) { return cat({in[0].t(), in[1].t()}, 0); }, pieces, {});
    check_parity([](const TensorList& in) { return stack({in[0], in[0]}, 1); }, pieces, {});
  }
  check_backward_parity(
      [](const TensorList& in) {
        return cat({in[0], in[1]}, 1);
      },
      {random_input({1024, 512}, DType::f32), random_input({1024, 384}, DType::f32)}, {});
}
