#pragma once
// Helpers for CUDA-vs-CPU tests: run one function on CPU inputs and on copies of them on
// cuda:0, then compare every element. From the first check on, cuda:0's allocator hands out
// poisoned memory (0xFF bytes: NaN in floating dtypes), so an output element a kernel never
// writes fails the comparison.
// Compiles in every build; the tests using it skip without a GPU (GENESIS_CUDA_PARITY).
#include <functional>
#include <vector>

#include "tests/testing.h"

namespace genesis::testing {

inline constexpr Device kCuda0{DeviceType::cuda, 0};

inline constexpr DType kFloatDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
inline constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16,    DType::bf16,
                                       DType::i32, DType::i64, DType::boolean};

struct Tolerance {
  double rtol = 0.0;
  double atol = 0.0;
};

// Elementwise results: a few ulps between CUDA's and the host's math libraries, plus one
// rounding step of a 16-bit output. Exact for integers and bool.
Tolerance elementwise_tolerance(DType dtype);

// Random values of `dtype` in [lo, hi) on the CPU (integers: truncated towards zero).
Tensor random_input(const Shape& shape, DType dtype, double lo = -1.0, double hi = 1.0);

// fn(inputs) on the CPU against fn(inputs moved to cuda:0): device, dtype, shape, all elements.
void check_parity(const Fn& fn, const TensorList& inputs, Tolerance tolerance);
// Gradients of sum(fn(x) * w), w random, with respect to every input, computed on both devices.
void check_backward_parity(const Fn& fn, const TensorList& inputs, Tolerance tolerance);
// fn run twice on copies of the inputs on cuda:0 gives the same bits.
void check_deterministic(const Fn& fn, const TensorList& inputs);
// `op` never reads from the device: a fault left pending by an earlier kernel (cuda::KernelFault)
// would be raised by any host read inside it (a copy to the host, synchronize()), so it must
// surface only at the copy of the result afterwards.
void check_no_host_read(const std::function<Tensor()>& op);

// Shapes every elementwise parity test runs over: odd sizes, a single element, a 0-d tensor.
inline const std::vector<Shape> kParityShapes = {{37, 129}, {1, 1}, {3, 5, 7}, {}};

}  // namespace genesis::testing
