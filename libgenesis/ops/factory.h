#pragma once
// Tensor factories: constant fills, ranges, identity, host data, and random draws from
// the Philox generator.
#include <vector>

#include "libgenesis/core/generator.h"
#include "libgenesis/core/tensor.h"

namespace genesis {

Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor empty_like(const Tensor& t);
// A 0-d tensor holding `value`.
Tensor scalar_tensor(double value, TensorOptions options = {});
// [start, end) with `step` (like numpy.arange); default dtype i64 when all arguments are
// whole numbers is NOT inferred: pass options.dtype explicitly (default f32).
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
Tensor arange(int64_t end, TensorOptions options = {.dtype = DType::i64});
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
Tensor eye(int64_t n, int64_t m = -1, TensorOptions options = {});

// Copies host data (interpreted as T) into a new tensor of dtype_of<T>() on options.device.
template <class T>
Tensor from_data(const T* data, const Shape& shape, TensorOptions options = {});
template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, TensorOptions options = {}) {
  return from_data<T>(data.data(), shape, options);
}
// Convenience: tensor({1, 2, 3}) is a 1-D f32 tensor; pass a shape to reshape it.
Tensor tensor(std::initializer_list<double> values, const Shape& shape = {}, TensorOptions options = {});

// Random draws (floating dtypes unless stated). `gen` defaults to default_generator().
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);   // U[0, 1)
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);  // N(0, 1)
// Uniform integers in [low, high); dtype defaults to i64.
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options = {.dtype = DType::i64},
               Generator* gen = nullptr);
// Each element is 1 with probability p (dtype of options: f32 by default, or bool).
Tensor bernoulli(const Shape& shape, double p, TensorOptions options = {}, Generator* gen = nullptr);
// Uniform in [low, high) with the shape, dtype and device of `like`.
Tensor uniform_like(const Tensor& like, double low, double high, Generator* gen = nullptr);

}  // namespace genesis
