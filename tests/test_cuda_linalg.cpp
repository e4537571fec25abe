// CUDA parity of matmul, bmm and linear (cuBLAS) against the CPU (OpenBLAS): odd sizes,
// transposed operands, batch broadcasting, every floating dtype, and gradients.
#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

// GEMM sums k products: tolerances grow with the reduction length and the input precision.
Tolerance gemm_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-12, 1e-12};
    case DType::f32:
      return {1e-5, 1e-5};
    case DType::f16:
      return {5e-3, 5e-3};
    default:
      return {2e-2, 2e-2};
  }
}

}  // namespace

GENESIS_CUDA_PARITY("matmul") {
  auto product = [](const TensorList& in) { return matmul(in[0], in[1]); };
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    Tolerance tolerance = gemm_tolerance(dtype);
    check_parity(product, {random_input({37, 53}, dtype), random_input({53, 129}, dtype)}, tolerance);
    check_parity(product, {random_input({1, 1}, dtype), random_input({1, 1}, dtype)}, tolerance);
    check_parity(product, {random_input({53}, dtype), random_input({53}, dtype)}, tolerance);     // dot
    check_parity(product, {random_input({53}, dtype), random_input({53, 7}, dtype)}, tolerance);  // vector-matrix
    check_parity(product, {random_input({3, 37, 53}, dtype), random_input({53, 5}, dtype)},
                 tolerance);  // batch x matrix
    check_parity(product, {random_input({2, 1, 5, 7}, dtype), random_input({3, 7, 4}, dtype)}, tolerance);  // broadcast
    check_parity([](const TensorList& in) { return matmul(in[0].t(), in[1].t()); },
                 {random_input({53, 37}, dtype), random_input({129, 53}, dtype)}, tolerance);
    check_parity([](const TensorList& in) { return matmul(in[0].slice(1, 0, 106, 2), in[1]); },
                 {random_input({37, 106}, dtype), random_input({53, 9}, dtype)}, tolerance);
  }
  check_backward_parity([](const TensorList& in) { return matmul(in[0].t(), in[1]); },
                        {random_input({53, 37}, DType::f64), random_input({3, 53, 5}, DType::f64)}, {1e-11, 1e-12});
  check_backward_parity(product, {random_input({37, 53}, DType::f32), random_input({53, 129}, DType::f32)},
                        {1e-4, 1e-5});
}

GENESIS_CUDA_PARITY("bmm") {
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    Tolerance tolerance = gemm_tolerance(dtype);
    check_parity([](const TensorList& in) { return bmm(in[0], in[1]); },
                 {random_input({3, 37, 53}, dtype), random_input({3, 53, 129}, dtype)}, tolerance);
    check_parity([](const TensorList& in) { return bmm(in[0].transpose(1, 2), in[1]); },
                 {random_input({4, 53, 37}, dtype), random_input({4, 53, 5}, dtype)}, tolerance);
    check_parity([](const TensorList& in) { return bmm(in[0], in[1]); },
                 {random_input({1, 1, 1}, dtype), random_input({1, 1, 1}, dtype)}, tolerance);
  }
  check_backward_parity([](const TensorList& in) { return bmm(in[0], in[1].transpose(1, 2)); },
                        {random_input({3, 37, 53}, DType::f64), random_input({3, 5, 53}, DType::f64)}, {1e-11, 1e-12});
}

GENESIS_CUDA_PARITY("linear") {
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    Tolerance tolerance = gemm_tolerance(dtype);
    check_parity([](const TensorList& in) { return linear(in[0], in[1], in[2]); },
                 {random_input({37, 53}, dtype), random_input({129, 53}, dtype), random_input({129}, dtype)},
                 tolerance);
    check_parity([](const TensorList& in) { return linear(in[0], in[1]); },
                 {random_input({3, 5, 53}, dtype), random_input({7, 53}, dtype)}, tolerance);
    check_parity([](const TensorList& in) { return linear(in[0].t(), in[1], in[2]); },
                 {random_input({53, 37}, dtype), random_input({1, 53}, dtype), random_input({1}, dtype)}, tolerance);
  }
  check_backward_parity(
      [](const TensorList& in) { return linear(in[0], in[1], in[2]); },
      {random_input({3, 5, 53}, DType::f64), random_input({7, 53}, DType::f64), random_input({7}, DType::f64)},
      {1e-11, 1e-12});
}
