// matmul, bmm, linear and linear_gelu through cuBLASLt against the CPU: odd sizes, single
// elements, transposed and sliced operands, broadcast batches, every floating dtype, the
// bias / GELU / bias-gradient epilogues (and their fallbacks) with gradients, TF32 off giving
// f32 accuracy; and linear_gelu's gradient check and its equality with the composition.
// (tests/test_cuda_linalg.cpp holds the op-table parity entries of matmul, bmm and linear.)
#include "tests/cuda_testing.h"

#if GENESIS_WITH_CUDA
#include "kernels/cpu/linalg.h"
#include "kernels/cuda/linalg.h"
#include "libgenesis/cuda/blas.h"
#include "libgenesis/cuda/runtime.h"
#endif

using namespace genesis;
using namespace genesis::testing;

namespace {

// GEMM sums k products: tolerances grow with the reduction length and the input precision.
Tolerance gemm_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-12, 1e-12};
    case DType::f32:
      return {2e-5, 2e-5};
    case DType::f16:
      return {5e-3, 5e-3};
    default:
      return {2e-2, 2e-2};
  }
}

// The CPU rounds the pre-activation to the dtype before GELU, the epilogue does not; and
// cuBLASLt may evaluate tanh with the hardware approximation (relative error up to ~5e-4,
// so up to ~2.5e-4 of a large output).
Tolerance gelu_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-12, 1e-12};
    case DType::f32:
      return {1e-3, 1e-3};
    case DType::f16:
      return {1e-2, 1e-2};
    default:
      return {4e-2, 4e-2};
  }
}

Tolerance backward_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-11, 1e-12};
    case DType::f32:
      return {1e-4, 1e-4};
    case DType::f16:
      return {2e-2, 2e-2};
    default:
      return {8e-2, 8e-2};
  }
}

Tensor linear3(const TensorList& in) {
  return linear(in[0], in[1], in[2]);
}
Tensor linear_gelu3(const TensorList& in) {
  return linear_gelu(in[0], in[1], in[2]);
}

}  // namespace

TEST_CASE("cuda parity matmul through cuBLASLt", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  auto product = [](const TensorList& in) { return matmul(in[0], in[1]); };
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    Tolerance t = gemm_tolerance(dtype);
    check_parity(product, {random_input({37, 129}, dtype), random_input({129, 65}, dtype)}, t);
    check_parity(product, {random_input({1, 1}, dtype), random_input({1, 1}, dtype)}, t);
    // Both operands transposed views (no copies), and a column-sliced (strided) operand.
    check_parity([](const TensorList& in) { return matmul(in[0].t(), in[1].t()); },
                 {random_input({129, 37}, dtype), random_input({65, 129}, dtype)}, t);
    check_parity([](const TensorList& in) { return matmul(in[0], in[1].slice(1, 0, 130, 2)); },
                 {random_input({37, 129}, dtype), random_input({129, 130}, dtype)}, t);
    // Batched: both sides batched (strided-batched), broadcast batch dimensions, and a shared A.
    check_parity(product, {random_input({3, 37, 129}, dtype), random_input({3, 129, 65}, dtype)}, t);
    check_parity(product, {random_input({2, 1, 37, 17}, dtype), random_input({3, 17, 65}, dtype)}, t);
    check_parity(product, {random_input({37, 17}, dtype), random_input({4, 17, 65}, dtype)}, t);
    check_parity([](const TensorList& in) { return matmul(in[0].transpose(1, 2), in[1]); },
                 {random_input({3, 129, 37}, dtype), random_input({3, 129, 65}, dtype)}, t);
  }
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    INFO("backward, dtype " << dtype_name(dtype));
    check_backward_parity(product, {random_input({37, 129}, dtype), random_input({129, 65}, dtype)},
                          backward_tolerance(dtype));
    check_backward_parity([](const TensorList& in) { return matmul(in[0].t(), in[1]); },
                          {random_input({129, 37}, dtype), random_input({2, 129, 65}, dtype)},
                          backward_tolerance(dtype));
  }
}

TEST_CASE("cuda parity bmm through cuBLASLt", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    Tolerance t = gemm_tolerance(dtype);
    check_parity([](const TensorList& in) { return bmm(in[0], in[1]); },
                 {random_input({5, 37, 129}, dtype), random_input({5, 129, 65}, dtype)}, t);
    check_parity([](const TensorList& in) { return bmm(in[0].transpose(1, 2), in[1].transpose(1, 2)); },
                 {random_input({5, 129, 37}, dtype), random_input({5, 65, 129}, dtype)}, t);
    check_parity([](const TensorList& in) { return bmm(in[0], in[1]); },
                 {random_input({1, 1, 1}, dtype), random_input({1, 1, 1}, dtype)}, t);
  }
  check_backward_parity([](const TensorList& in) { return bmm(in[0], in[1].transpose(1, 2)); },
                        {random_input({3, 37, 129}, DType::f32), random_input({3, 65, 129}, DType::f32)},
                        backward_tolerance(DType::f32));
}

TEST_CASE("cuda parity linear through cuBLASLt", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    Tolerance t = gemm_tolerance(dtype);
    // Bias epilogue: odd and multiple-of-8 output widths, batched input, a transposed input.
    check_parity(linear3, {random_input({37, 129}, dtype), random_input({65, 129}, dtype), random_input({65}, dtype)},
                 t);
    check_parity(linear3, {random_input({2, 3, 129}, dtype), random_input({64, 129}, dtype), random_input({64}, dtype)},
                 t);
    check_parity([](const TensorList& in) { return linear(in[0].t(), in[1], in[2]); },
                 {random_input({129, 37}, dtype), random_input({65, 129}, dtype), random_input({65}, dtype)}, t);
    check_parity(linear3, {random_input({1, 1}, dtype), random_input({1, 1}, dtype), random_input({1}, dtype)}, t);
    // A bias sliced out of a larger buffer (not 16-byte aligned).
    check_parity([](const TensorList& in) { return linear(in[0], in[1], in[2].slice(0, 1, 66)); },
                 {random_input({37, 129}, dtype), random_input({65, 129}, dtype), random_input({66}, dtype)}, t);
    check_parity([](const TensorList& in) { return linear(in[0], in[1]); },
                 {random_input({37, 129}, dtype), random_input({65, 129}, dtype)}, t);
    // Gradients: the bias gradient from the weight gradient's GEMM (BGRADB), and the paths
    // where only some inputs need gradients.
    Tolerance bt = backward_tolerance(dtype);
    check_backward_parity(
        linear3, {random_input({37, 129}, dtype), random_input({65, 129}, dtype), random_input({65}, dtype)}, bt);
    check_backward_parity(
        linear3, {random_input({2, 3, 129}, dtype), random_input({64, 129}, dtype), random_input({64}, dtype)}, bt);
  }
  // Only the weight and bias need gradients.
  Tensor x = random_input({37, 129}, DType::f32);
  check_backward_parity([&](const TensorList& in) { return linear(x.to(in[0].device()), in[0], in[1]); },
                        {random_input({65, 129}, DType::f32), random_input({65}, DType::f32)},
                        backward_tolerance(DType::f32));
}

GENESIS_CUDA_PARITY("linear_gelu") {
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    Tolerance t = gelu_tolerance(dtype);
    // Forward only (GELU + bias epilogue), then with gradients (the epilogue also stores the
    // pre-activation when the width is a multiple of 8; other widths take the composition).
    for (int64_t out : {64, 65}) {
      INFO("out features " << out);
      TensorList inputs{random_input({37, 129}, dtype), random_input({out, 129}, dtype), random_input({out}, dtype)};
      check_parity(linear_gelu3, inputs, t);
      check_parity([](const TensorList& in) { return linear_gelu(in[0], in[1]); }, {inputs[0], inputs[1]}, t);
      check_backward_parity(linear_gelu3, inputs, backward_tolerance(dtype));
    }
    check_parity([](const TensorList& in) { return linear_gelu(in[0].transpose(0, 1), in[1], in[2]); },
                 {random_input({5, 2, 129}, dtype), random_input({16, 129}, dtype), random_input({16}, dtype)}, t);
    check_parity(linear_gelu3, {random_input({1, 1}, dtype), random_input({1, 1}, dtype), random_input({1}, dtype)}, t);
  }
  // The fused CUDA result equals the unfused composition on the same device.
  TensorList inputs{random_input({37, 129}, DType::f32).to(kCuda0), random_input({64, 129}, DType::f32).to(kCuda0),
                    random_input({64}, DType::f32).to(kCuda0)};
  require_close(linear_gelu3(inputs), gelu(linear3(inputs), GeluApproximation::tanh), 1e-3, 1e-3);
}

TEST_CASE("cuda matmul: f32 stays f32-accurate unless TF32 is allowed", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  Tensor a = random_input({96, 512}, DType::f32), b = random_input({512, 80}, DType::f32);
  Tensor exact = matmul(a.to(DType::f64), b.to(DType::f64));
  Tensor a_gpu = a.to(kCuda0), b_gpu = b.to(kCuda0);
  // |C| is about sqrt(512) / 3 ~ 7.5: atol is 1e-5 of that scale.
  require_close(matmul(a_gpu, b_gpu).to(DType::f64), exact, 1e-5, 1e-4);
  set_allow_tf32(true);
  Tensor fast = matmul(a_gpu, b_gpu).to(DType::f64);
  set_allow_tf32(false);
  require_close(fast, exact, 1e-2, 5e-2);
  // Switching back gives full accuracy again (the descriptor cache keys on the setting).
  require_close(matmul(a_gpu, b_gpu).to(DType::f64), exact, 1e-5, 1e-4);
}

#if GENESIS_WITH_CUDA
TEST_CASE("cuda linear: cuBLASLt has algorithms for the epilogues of transformer-like shapes", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    INFO("dtype " << dtype_name(dtype));
    const kernels::cuda::GemmPlanStats before = cuda::gemm_plan_stats();
    // Bias (forward), bias gradient (backward), GELU + bias keeping the pre-activation.
    for (auto fn : {linear3, linear_gelu3}) {
      Tensor x = random_input({2, 96, 256}, dtype).to(kCuda0).requires_grad_(true);
      Tensor w = random_input({512, 256}, dtype).to(kCuda0).requires_grad_(true);
      Tensor b = random_input({512}, dtype).to(kCuda0).requires_grad_(true);
      sum(fn({x, w, b})).backward();
      REQUIRE(b.grad().defined());
    }
    const kernels::cuda::GemmPlanStats after = cuda::gemm_plan_stats();
    CHECK(after.without_algorithm == before.without_algorithm);
  }
}
#endif

GENESIS_GRADCHECK("linear_gelu") {
  gradcheck(linear_gelu3, {rand_leaf({3, 4}), rand_leaf({2, 4}), rand_leaf({2})});
  gradcheck([](const TensorList& in) { return linear_gelu(in[0], in[1]); }, {rand_leaf({2, 3, 4}), rand_leaf({5, 4})});
  gradcheck([](const TensorList& in) { return linear_gelu(in[0].t(), in[1], in[2]); },
            {rand_leaf({4, 3}), rand_leaf({8, 4}), rand_leaf({8})});
}

#if GENESIS_WITH_CUDA
TEST_CASE("cuda gemm: the first-use algorithm timing leaves accumulating GEMMs exact", "[cuda][linalg]") {
  if (!cuda_ready()) return;
  // Timing a plan's candidates runs the GEMM several times into C, which only a GEMM that does
  // not read C (beta = 0) may do: C += A B on a fresh shape must accumulate exactly once,
  // before and after a beta = 0 call of the same shape chose its algorithm.
  const int64_t m = 96, n = 160, k = 72;
  for (DType dtype : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dtype));
    Tensor a = random_input({m, k}, dtype), b = random_input({k, n}, dtype), c = random_input({m, n}, dtype);
    Tensor a_gpu = a.to(kCuda0), b_gpu = b.to(kCuda0);
    auto args = [&](const Tensor& x, const Tensor& y, const Tensor& out, double beta) {
      return kernels::cpu::GemmArgs{.m = m,
                                    .n = n,
                                    .k = k,
                                    .a = x.data_ptr(),
                                    .lda = k,
                                    .b = y.data_ptr(),
                                    .ldb = n,
                                    .c = out.data_ptr(),
                                    .ldc = n,
                                    .beta = beta};
    };
    for (int round = 0; round < 2; ++round) {
      INFO("round " << round);
      Tensor expected = c.clone(), actual = c.to(kCuda0);
      kernels::cpu::gemm(dtype, args(a, b, expected, 1.0));
      kernels::cuda::gemm(dtype, args(a_gpu, b_gpu, actual, 1.0), cuda::current_stream());
      const Tolerance t = gemm_tolerance(dtype);
      require_close(actual.to(kCPU), expected, t.rtol, t.atol);
      Tensor overwritten = c.to(kCuda0);
      kernels::cuda::gemm(dtype, args(a_gpu, b_gpu, overwritten, 0.0), cuda::current_stream());
      require_close(overwritten.to(kCPU), matmul(a, b), t.rtol, t.atol);
    }
  }
}
#endif

TEST_CASE("linear_gelu equals gelu_tanh of linear on the CPU, and checks its arguments", "[cpu][linalg]") {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    INFO("dtype " << dtype_name(dtype));
    TensorList in{rand_values({5, 7}, dtype, -2.0, 2.0), rand_values({3, 7}, dtype), rand_values({3}, dtype)};
    require_close(linear_gelu3(in), gelu(linear3(in), GeluApproximation::tanh), 0.0, 0.0);
  }
  CHECK_THROWS_WITH(linear_gelu(zeros({2, 3}), zeros({4, 5})), Catch::Matchers::Contains("linear_gelu") &&
                                                                   Catch::Matchers::Contains("[2, 3]") &&
                                                                   Catch::Matchers::Contains("[4, 5]"));
  CHECK_THROWS_WITH(linear_gelu(zeros({2, 3}), zeros({4, 3}), zeros({5})),
                    Catch::Matchers::Contains("linear_gelu") && Catch::Matchers::Contains("[5]"));
}
