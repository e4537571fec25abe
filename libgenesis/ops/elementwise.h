#pragma once
// Elementwise ops: unary math, binary arithmetic and comparisons with NumPy broadcasting
// and type promotion (docs/ops.md), where / masked_fill, and their scalar forms.
#include <optional>

#include "libgenesis/core/tensor.h"

namespace genesis {

// --- unary ---------------------------------------------------------------
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApproximation { none, tanh };  // none = exact erf form
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::none);
Tensor silu(const Tensor& x);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor pow(const Tensor& x, double exponent);
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
Tensor sign(const Tensor& x);

// --- binary (broadcasting) -------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division: integers give f32
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// Comparisons return bool tensors.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);

// Scalar forms: the scalar adopts the tensor's dtype (a float scalar with an integer
// tensor gives f32), like a Python number in PyTorch. Beside f16/bf16 it keeps f32 precision
// and the result is rounded once. One kernel; the scalar is a kernel argument.
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor sub(double a, const Tensor& b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor div(double a, const Tensor& b);
Tensor pow(double a, const Tensor& b);
Tensor maximum(const Tensor& a, double b);
Tensor minimum(const Tensor& a, double b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

// where(cond, a, b): a where cond is true, else b (cond is bool; all three broadcast).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
// x with `value` wherever mask (bool, broadcast to x) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// In place: dst += src, dst *= src (src broadcast to dst and cast to its dtype; a number as
// the scalar forms wrap it, then cast to dst's dtype). One kernel when dst is contiguous. No
// autograd; used by gradient accumulation, clipping and optimizers (under NoGradGuard).
Tensor& add_(Tensor& dst, const Tensor& src);
Tensor& mul_(Tensor& dst, const Tensor& src);
Tensor& add_(Tensor& dst, double value);
Tensor& mul_(Tensor& dst, double value);

// A 0-d tensor holding `value` in the dtype that `value` takes next to x (see above).
Tensor wrap_scalar(const Tensor& x, double value);

// Operators for readable formulas.
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(double a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(double a, const Tensor& b) { return div(a, b); }

}  // namespace genesis
