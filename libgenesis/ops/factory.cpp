#include "libgenesis/ops/factory.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/random.h"
#include "libgenesis/ops/dispatch.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/elementwise.h"
#endif

namespace genesis {

Tensor full(const Shape& shape, double value, TensorOptions options) {
  bool requires_grad = options.requires_grad;
  options.requires_grad = false;
  Tensor t = empty(shape, options);
  t.fill_(value);
  if (requires_grad) t.requires_grad_(true);
  return t;
}

Tensor zeros(const Shape& shape, TensorOptions options) { return full(shape, 0.0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, {.dtype = t.dtype(), .device = t.device()}); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor scalar_tensor(double value, TensorOptions options) { return full({}, value, options); }

// Ranges are computed on the host in double, then copied to the target dtype and device.
static Tensor from_doubles(const std::vector<double>& values, const Shape& shape, TensorOptions options) {
  Tensor host = from_data<double>(values.data(), shape, {.dtype = DType::f64});
  Tensor t = host.to(options.dtype).to(options.device);
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor arange(double start, double end, double step, TensorOptions options) {
  GENESIS_CHECK(step != 0.0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step), ValueError,
                "arange: start, end and step must be finite and step non-zero (got ", start, ", ", end, ", ", step, ")");
  double count = std::ceil((end - start) / step);
  GENESIS_CHECK(count < 1e12, ValueError, "arange: too many elements (", count, ")");
  auto n = static_cast<int64_t>(std::max(0.0, count));
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<double>(i) * step;
  return from_doubles(v, {n}, options);
}

Tensor arange(int64_t end, TensorOptions options) { return arange(0.0, static_cast<double>(end), 1.0, options); }

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  GENESIS_CHECK(steps >= 0, ValueError, "linspace: steps must be >= 0 (got ", steps, ")");
  std::vector<double> v(static_cast<size_t>(steps));
  double delta = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  // Fill from both ends so the last value is exactly `end`, as PyTorch does.
  for (int64_t i = 0; i < steps; ++i) {
    v[static_cast<size_t>(i)] = i < steps / 2 ? start + delta * static_cast<double>(i)
                                              : end - delta * static_cast<double>(steps - 1 - i);
  }
  return from_doubles(v, {steps}, options);
}

Tensor eye(int64_t n, int64_t m, TensorOptions options) {
  if (m < 0) m = n;
  GENESIS_CHECK(n >= 0, ValueError, "eye: n must be >= 0 (got ", n, ")");
  std::vector<double> v(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < std::min(n, m); ++i) v[static_cast<size_t>(i * m + i)] = 1.0;
  return from_doubles(v, {n, m}, options);
}

template <class T>
Tensor from_data(const T* data, const Shape& shape, TensorOptions options) {
  Tensor host = empty(shape, {.dtype = dtype_of<T>()});
  if (host.numel() > 0) std::memcpy(host.data_ptr(), data, static_cast<size_t>(host.numel()) * sizeof(T));
  Tensor t = options.device.is_cpu() ? host : host.to(options.device);
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}
#define GENESIS_INSTANTIATE_FROM_DATA(name, type, str) \
  template Tensor from_data<type>(const type*, const Shape&, TensorOptions);
GENESIS_FORALL_DTYPES(GENESIS_INSTANTIATE_FROM_DATA)
#undef GENESIS_INSTANTIATE_FROM_DATA

Tensor tensor(std::initializer_list<double> values, const Shape& shape, TensorOptions options) {
  Shape s = shape.empty() ? Shape{static_cast<int64_t>(values.size())} : shape;
  GENESIS_CHECK(numel_of(s) == static_cast<int64_t>(values.size()), ShapeError, "tensor: ", values.size(),
                " values do not fill shape ", s);
  return from_doubles(std::vector<double>(values), s, options);
}

static Tensor random_tensor(kernels::RandomKind kind, const Shape& shape, TensorOptions options, Generator* gen,
                            double a, double b) {
  bool requires_grad = options.requires_grad;
  options.requires_grad = false;
  Tensor t = empty(shape, options);
  int64_t n = t.numel();
  GeneratorState s = (gen ? *gen : default_generator()).advance(static_cast<uint64_t>((n + 3) / 4));
  if (t.device().is_cpu()) {
    kernels::cpu::random_fill(kind, t.dtype(), n, t.data_ptr(), s.seed, s.offset, a, b);
  } else {
    GENESIS_ON_CUDA(kernels::cuda::random_fill(kind, t.dtype(), n, t.data_ptr(), s.seed, s.offset, a, b,
                                               cuda::current_stream()));
  }
  if (requires_grad) t.requires_grad_(true);
  return t;
}

Tensor rand(const Shape& shape, TensorOptions options, Generator* gen) {
  GENESIS_CHECK(is_floating(options.dtype), DTypeError, "rand: dtype must be floating, got ", dtype_name(options.dtype));
  return random_tensor(kernels::RandomKind::uniform, shape, options, gen, 0.0, 1.0);
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* gen) {
  GENESIS_CHECK(is_floating(options.dtype), DTypeError, "randn: dtype must be floating, got ", dtype_name(options.dtype));
  return random_tensor(kernels::RandomKind::normal, shape, options, gen, 0.0, 1.0);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options, Generator* gen) {
  GENESIS_CHECK(high > low, ValueError, "randint: high (", high, ") must be greater than low (", low, ")");
  GENESIS_CHECK(high - low <= (int64_t{1} << 32), ValueError, "randint: range ", high - low, " exceeds 2^32");
  GENESIS_CHECK(options.dtype != DType::boolean, DTypeError, "randint: dtype bool is not allowed");
  return random_tensor(kernels::RandomKind::randint, shape, options, gen, static_cast<double>(low),
                       static_cast<double>(high));
}

Tensor bernoulli(const Shape& shape, double p, TensorOptions options, Generator* gen) {
  GENESIS_CHECK(p >= 0.0 && p <= 1.0, ValueError, "bernoulli: p must be in [0, 1] (got ", p, ")");
  return random_tensor(kernels::RandomKind::bernoulli, shape, options, gen, p, 0.0);
}

Tensor uniform_like(const Tensor& like, double low, double high, Generator* gen) {
  return random_tensor(kernels::RandomKind::uniform, like.shape(), {.dtype = like.dtype(), .device = like.device()},
                       gen, low, high);
}

// Declared in core/tensor.h; defined here because requires_grad is autograd's.
Tensor empty(const Shape& shape, TensorOptions options) {
  for (int64_t d : shape)
    GENESIS_CHECK(d >= 0, ShapeError, "empty: negative dimension in shape ", shape);
  size_t nbytes = static_cast<size_t>(numel_of(shape)) * dtype_size(options.dtype);
  auto storage = std::make_shared<Storage>(nbytes, options.device);
  Tensor t(std::make_shared<TensorImpl>(std::move(storage), shape, contiguous_strides(shape), 0, options.dtype));
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace genesis
