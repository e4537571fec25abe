#include "tests/cuda_testing.h"

#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/caching_allocator.h"
#endif

namespace genesis::testing {

namespace {

void poison_gpu_allocations() {
#if GENESIS_WITH_CUDA
  cuda::set_poison_allocations(true, 0);
#endif
}

}  // namespace

Tolerance elementwise_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-12, 1e-12};
    case DType::f32:
      return {1e-6, 1e-6};
    case DType::f16:
      return {1e-3, 1e-3};
    case DType::bf16:
      return {1e-2, 1e-2};
    default:
      return {0.0, 0.0};
  }
}

Tensor random_input(const Shape& shape, DType dtype, double lo, double hi) {
  if (dtype == DType::boolean) return lt(rand_values(shape, DType::f64), 0.5);
  return rand_values(shape, dtype, lo, hi);
}

void check_parity(const Fn& fn, const TensorList& inputs, Tolerance tolerance) {
  poison_gpu_allocations();
  TensorList on_gpu;
  for (const Tensor& t : inputs) on_gpu.push_back(t.defined() ? t.to(kCuda0) : t);
  Tensor expected = fn(inputs);
  Tensor actual = fn(on_gpu);
  INFO("dtype " << dtype_name(expected.dtype()) << ", shape " << shape_str(expected.shape()));
  REQUIRE(actual.device() == kCuda0);
  REQUIRE(actual.dtype() == expected.dtype());
  require_close(actual, expected, tolerance.rtol, tolerance.atol);
}

void check_deterministic(const Fn& fn, const TensorList& inputs) {
  TensorList on_gpu;
  for (const Tensor& t : inputs) on_gpu.push_back(t.to(kCuda0));
  require_close(fn(on_gpu), fn(on_gpu), 0.0, 0.0);
}

void check_backward_parity(const Fn& fn, const TensorList& inputs, Tolerance tolerance) {
  poison_gpu_allocations();
  TensorList cpu_leaves, gpu_leaves;
  for (const Tensor& t : inputs) {
    cpu_leaves.push_back(t.detach().clone().requires_grad_(true));
    gpu_leaves.push_back(t.detach().to(kCuda0).requires_grad_(true));
  }
  Tensor cpu_out = fn(cpu_leaves);
  Tensor weight = rand_values(cpu_out.shape(), cpu_out.dtype(), 0.5, 1.5);
  sum(mul(cpu_out, weight)).backward();
  Tensor gpu_out = fn(gpu_leaves);
  sum(mul(gpu_out, weight.to(gpu_out.device()))).backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("gradient of input " << i << " (shape " << shape_str(inputs[i].shape()) << ")");
    REQUIRE(gpu_leaves[i].grad().defined());
    REQUIRE(gpu_leaves[i].grad().device() == kCuda0);
    require_close(gpu_leaves[i].grad(), cpu_leaves[i].grad(), tolerance.rtol, tolerance.atol);
  }
}

void check_no_host_read(const std::function<Tensor()>& op) {
  Tensor pending = one_hot(tensor({7}, {1}, {.dtype = DType::i64}).to(kCuda0), 3);
  Tensor out;
  REQUIRE_NOTHROW(out = op());
  CHECK_THROWS_WITH(out.to(kCPU), Catch::Contains("one_hot: index 7 is out of range [0, 3)"));
  REQUIRE_NOTHROW(out.to(kCPU));
}

}  // namespace genesis::testing
