#pragma once
// Float math that compilers vectorize: exp, tanh, the normal distribution and the unary ops
// built on them, written without branches or library calls (selects, polynomials, exponent
// bits), so a loop over them becomes AVX-512 / AVX2 code inside with_cpu_isa
// (kernels/cpu/isa.h). libm's scalar calls made gelu 9x and exp 4x slower than PyTorch's
// vectorized kernels. Accuracy: exp within 2 ulp (Cephes's reduction and polynomial), tanh
// within 3, the normal distribution's tail about 2e-7 relative plus exp's; double keeps
// kernels/common/math.h's libm formulas.
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/math.h"

namespace genesis::kernels::cpu::vec {

inline float from_bits(int32_t bits) { return std::bit_cast<float>(bits); }

// e^x = 2^n e^r: n = round(x / ln 2) by the 1.5 * 2^23 trick, r = x - n ln 2 in two parts, e^r
// by Cephes's polynomial. For x within [-104, 89].
struct ExpParts {
  int32_t n;
  float er;
};
inline ExpParts exp_parts(float x) {
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = n * -0.693359375f + x;
  r = n * 2.12194440e-4f + r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return {static_cast<int32_t>(n), p * (r * r) + (r + 1.0f)};
}

// e^x: +inf above 88.72, 0 below -103.97 (through the subnormals), NaN kept.
inline float exp(float x) {
  const ExpParts e = exp_parts(x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x));
  // 2^n as two factors, each a normal float for n in [-150, 128].
  const int32_t k1 = e.n >> 1, k2 = e.n - k1;
  const float y = e.er * from_bits((k1 + 127) << 23) * from_bits((k2 + 127) << 23);
  return x != x ? x : y;
}

// e^x for x <= 0 (softmax's shifted terms, the normal distribution's tail) with one scale
// factor instead of exp's two: results below 2^-126 e^r (x below about -87.7, where e^x < 8.5e-39)
// flush to 0, which no sum or product they join can tell from 0. NaN stays NaN. About 10%
// faster than exp in softmax on a Xeon.
inline float exp_nonpositive(float x) {
  const ExpParts e = exp_parts(x < -88.0f ? -88.0f : x);  // n = -127 there: a zero scale factor
  return e.er * from_bits((e.n + 127) << 23);
}

// tanh: an odd polynomial below 0.625 (Cephes), 1 - 2 / (e^2|x| + 1) above, the sign restored.
inline float tanh(float x) {
  const float a = x < 0.0f ? -x : x;
  const float z = x * x;
  float s = -5.70498872745e-3f;
  s = s * z + 2.06390887954e-2f;
  s = s * z - 5.37397155531e-2f;
  s = s * z + 1.33314422036e-1f;
  s = s * z - 3.33332819422e-1f;
  const float small = s * z * x + x;
  const float large = 1.0f - 2.0f / (exp(2.0f * a) + 1.0f);
  return a < 0.625f ? small : (x < 0.0f ? -large : large);
}

// erfc(z) e^{z^2} / t for z >= 0, as a polynomial in t = 1 / (1 + z / 2) (in Estrin's form): a
// fit for relative error, 4.3e-8 on z in [0, 10] (about 2e-7 evaluated in float); past z = 10,
// Phi = erfc / 2 is below float's smallest subnormal.
inline float erfc_scaled(float t) {
  const float t2 = t * t, t4 = t2 * t2;
  const float c01 = 0.282375357f * t + 0.282086415f;
  const float c23 = 0.202688476f * t + 0.243103384f;
  const float c45 = 0.278073317f * t - 0.0266296967f;
  const float c67 = 0.284577782f * t - 0.48720552f;
  return (-0.0590695568f * t4 + (c67 * t2 + c45)) * t4 + (c23 * t2 + c01);
}

// The standard normal distribution at x: Phi(x) with its relative accuracy kept in the lower
// tail (gelu's x Phi(x) for x << 0), and e^{-x^2/2}, which its density needs too. Phi(-|x|) is
// erfc(z) / 2, z = |x| / sqrt 2, computed as t erfc_scaled(t) e^{-z^2}: the polynomial and the
// exponential do not depend on each other, so their latencies overlap (an erfc whose exp took
// the polynomial's result ran gelu 1.3-1.7x slower). exp_nonpositive flushes the tail to 0
// below x = -13.2 (Phi < 4e-40), where gelu is below 6e-39 in magnitude.
struct Normal {
  float cdf;    // Phi(x)
  float gauss;  // e^{-x^2/2}
};
inline Normal normal(float x) {
  const float z = (x < 0.0f ? -x : x) * 0.70710678118654752f;
  const float t = 1.0f / (0.5f * z + 1.0f);
  const float gauss = exp_nonpositive(-z * z);
  const float lower = 0.5f * t * erfc_scaled(t) * gauss;  // Phi(-|x|)
  return {x < 0.0f ? lower : 1.0f - lower, gauss};
}

inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

// e^x for x <= 0 in an accumulator type: exp_nonpositive for float, libm's exp for double.
template <class A>
inline A exp_nonpositive_acc(A x) {
  if constexpr (std::is_same_v<A, float>) {
    return exp_nonpositive(x);
  } else {
    return std::exp(x);
  }
}

// The float forward formula of a unary op: the branch-free forms above where the op needs a
// transcendental function they cover, else math.h's formula (which the compiler folds for the
// constant op). GELU-tanh as x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3): the same value as
// 0.5 x (1 + tanh(u)) without its cancellation for x << 0.
template <UnaryOp OP>
inline float unary(float x, float p, float q) {
  if constexpr (OP == UnaryOp::exp) {
    return exp(x);
  } else if constexpr (OP == UnaryOp::tanh) {
    return tanh(x);
  } else if constexpr (OP == UnaryOp::sigmoid) {
    return sigmoid(x);
  } else if constexpr (OP == UnaryOp::silu) {
    return x * sigmoid(x);
  } else if constexpr (OP == UnaryOp::gelu_tanh) {
    const float u = static_cast<float>(kGeluTanhScale) * (x + static_cast<float>(kGeluTanhCubic) * x * x * x);
    return x * sigmoid(2.0f * u);
  } else if constexpr (OP == UnaryOp::gelu_erf) {
    return x * normal(x).cdf;
  } else {
    return unary_float<float>(OP, x, p, q);
  }
}

// d unary / dx in float, the same way.
template <UnaryOp OP>
inline float unary_derivative(float x, float p, float q) {
  if constexpr (OP == UnaryOp::exp) {
    return exp(x);
  } else if constexpr (OP == UnaryOp::tanh) {
    const float t = tanh(x);
    return 1.0f - t * t;
  } else if constexpr (OP == UnaryOp::sigmoid) {
    const float s = sigmoid(x);
    return s * (1.0f - s);
  } else if constexpr (OP == UnaryOp::silu) {
    const float s = sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
  } else if constexpr (OP == UnaryOp::gelu_tanh) {
    const float x2 = x * x;
    const float u = static_cast<float>(kGeluTanhScale) * (x + static_cast<float>(kGeluTanhCubic) * x2 * x);
    const float du = static_cast<float>(kGeluTanhScale) * (1.0f + static_cast<float>(3 * kGeluTanhCubic) * x2);
    const float s = sigmoid(2.0f * u);  // 0.5 (1 + tanh(u))
    return s + 2.0f * x * s * (1.0f - s) * du;
  } else if constexpr (OP == UnaryOp::gelu_erf) {
    const Normal n = normal(x);
    return n.cdf + x * n.gauss * 0.39894228040143268f;
  } else {
    return unary_float_derivative<float>(OP, x, p, q);
  }
}

}  // namespace genesis::kernels::cpu::vec
