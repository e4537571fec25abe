#pragma once
// Scalar math shared by CPU and CUDA kernels: one definition of each formula.
#include <cmath>

#include "kernels/common/elementwise_ops.h"

#if defined(__CUDACC__)
#define GENESIS_HD __host__ __device__ __forceinline__
#else
#define GENESIS_HD inline
#endif

namespace genesis::kernels {

// sqrt(2/pi) and the cubic coefficient of GELU's tanh approximation.
inline constexpr double kGeluTanhScale = 0.7978845608028654;
inline constexpr double kGeluTanhCubic = 0.044715;

// Floating-point forward formulas, evaluated in the accumulator type T (float or double).
template <class T>
GENESIS_HD T unary_float(UnaryOp op, T x, T p, T q) {
  using std::abs, std::exp, std::log, std::log1p, std::sqrt, std::sin, std::cos, std::tanh, std::erfc, std::pow;
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::abs: return abs(x);
    case UnaryOp::exp: return exp(x);
    case UnaryOp::log: return log(x);
    case UnaryOp::log1p: return log1p(x);
    case UnaryOp::sqrt: return sqrt(x);
    case UnaryOp::rsqrt: return T(1) / sqrt(x);
    case UnaryOp::sin: return sin(x);
    case UnaryOp::cos: return cos(x);
    case UnaryOp::tanh: return tanh(x);
    case UnaryOp::sigmoid: return T(1) / (T(1) + exp(-x));
    case UnaryOp::relu: return (x > T(0) || x != x) ? x : T(0);  // NaN stays NaN
    case UnaryOp::gelu_tanh: {
      T inner = T(kGeluTanhScale) * (x + T(kGeluTanhCubic) * x * x * x);
      return T(0.5) * x * (T(1) + tanh(inner));
    }
    // Phi(x) = erfc(-x / sqrt 2) / 2 keeps its relative accuracy in the lower tail, where
    // (1 + erf(x / sqrt 2)) / 2 cancels to nothing (x below about -8 in double).
    case UnaryOp::gelu_erf: return T(0.5) * x * erfc(x * T(-0.7071067811865476));
    case UnaryOp::silu: return x / (T(1) + exp(-x));
    case UnaryOp::softplus: {  // p = beta, q = threshold: linear above threshold like PyTorch
      T bx = p * x;
      return bx > q ? x : log1p(exp(bx)) / p;
    }
    case UnaryOp::pow_scalar: return pow(x, p);
    case UnaryOp::clamp: {  // NaN bounds mean "unbounded"; NaN input stays NaN
      T y = x;
      if (!(p != p) && y < p) y = p;
      if (!(q != q) && y > q) y = q;
      return y;
    }
    case UnaryOp::sign: return x > T(0) ? T(1) : (x < T(0) ? T(-1) : x);
  }
  return x;
}

template <class T>
GENESIS_HD T binary_arith(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::pow: {
      using std::pow;
      return static_cast<T>(pow(a, b));
    }
    // maximum/minimum propagate NaN (a != a is true only for NaN).
    case BinaryOp::maximum: return (a != a || a > b) ? a : b;
    case BinaryOp::minimum: return (a != a || a < b) ? a : b;
    default: return T(0);
  }
}

template <class T>
GENESIS_HD bool binary_compare(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::eq: return a == b;
    case BinaryOp::ne: return a != b;
    case BinaryOp::lt: return a < b;
    case BinaryOp::le: return a <= b;
    case BinaryOp::gt: return a > b;
    case BinaryOp::ge: return a >= b;
    default: return false;
  }
}

// d op(x) / dx, evaluated from the input x (recomputing the forward where needed).
template <class T>
GENESIS_HD T unary_float_derivative(UnaryOp op, T x, T p, T q) {
  using std::exp, std::log1p, std::sqrt, std::sin, std::cos, std::tanh, std::erfc, std::pow;
  switch (op) {
    case UnaryOp::neg: return T(-1);
    case UnaryOp::abs: return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
    case UnaryOp::exp: return exp(x);
    case UnaryOp::log: return T(1) / x;
    case UnaryOp::log1p: return T(1) / (T(1) + x);
    case UnaryOp::sqrt: return T(0.5) / sqrt(x);
    case UnaryOp::rsqrt: return T(-0.5) / (x * sqrt(x));
    case UnaryOp::sin: return cos(x);
    case UnaryOp::cos: return -sin(x);
    case UnaryOp::tanh: {
      T t = tanh(x);
      return T(1) - t * t;
    }
    case UnaryOp::sigmoid: {
      T s = T(1) / (T(1) + exp(-x));
      return s * (T(1) - s);
    }
    case UnaryOp::relu: return x > T(0) ? T(1) : T(0);
    case UnaryOp::gelu_tanh: {
      T x2 = x * x;
      T inner = T(kGeluTanhScale) * (x + T(kGeluTanhCubic) * x2 * x);
      T t = tanh(inner);
      T dinner = T(kGeluTanhScale) * (T(1) + T(3 * kGeluTanhCubic) * x2);
      return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner;
    }
    case UnaryOp::gelu_erf: {
      T cdf = T(0.5) * erfc(x * T(-0.7071067811865476));
      T pdf = exp(T(-0.5) * x * x) * T(0.3989422804014327);
      return cdf + x * pdf;
    }
    case UnaryOp::silu: {
      T s = T(1) / (T(1) + exp(-x));
      return s * (T(1) + x * (T(1) - s));
    }
    case UnaryOp::softplus: {
      T bx = p * x;
      return bx > q ? T(1) : T(1) / (T(1) + exp(-bx));
    }
    case UnaryOp::pow_scalar: return p == T(0) ? T(0) : p * pow(x, p - T(1));
    case UnaryOp::clamp: {  // gradient passes where the input is inside [min, max]
      bool below = !(p != p) && x < p;
      bool above = !(q != q) && x > q;
      return (below || above) ? T(0) : T(1);
    }
    case UnaryOp::sign: return T(0);
  }
  return T(0);
}

}  // namespace genesis::kernels
