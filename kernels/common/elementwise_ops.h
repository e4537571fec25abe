#pragma once
// Elementwise operation codes shared by the CPU and CUDA kernels (no dependencies:
// .cu files include this). Scalar parameters travel in `ElementwiseParams`.
#include <cstdint>

namespace genesis::kernels {

#define GENESIS_FORALL_UNARY_OPS(X) \
  X(neg) X(abs) X(exp) X(log) X(log1p) X(sqrt) X(rsqrt) X(sin) X(cos) X(tanh) X(sigmoid) X(relu) \
  X(gelu_tanh) X(gelu_erf) X(silu) X(softplus) X(pow_scalar) X(clamp) X(sign)

enum class UnaryOp : uint8_t {
#define GENESIS_UNARY_ENUM(name) name,
  GENESIS_FORALL_UNARY_OPS(GENESIS_UNARY_ENUM)
#undef GENESIS_UNARY_ENUM
};

#define GENESIS_FORALL_BINARY_OPS(X) \
  X(add) X(sub) X(mul) X(div) X(pow) X(maximum) X(minimum) X(eq) X(ne) X(lt) X(le) X(gt) X(ge)

enum class BinaryOp : uint8_t {
#define GENESIS_BINARY_ENUM(name) name,
  GENESIS_FORALL_BINARY_OPS(GENESIS_BINARY_ENUM)
#undef GENESIS_BINARY_ENUM
};

constexpr bool is_comparison(BinaryOp op) { return op >= BinaryOp::eq; }

// a, b: pow_scalar exponent (a); clamp bounds (a = min, b = max; NaN = unbounded);
// softplus beta (a) and threshold (b).
struct ElementwiseParams {
  double a = 0.0;
  double b = 0.0;
};

// Maximum rank the strided kernels accept (after collapsing contiguous dimensions).
inline constexpr int kMaxDims = 16;  // equals genesis::kMaxTensorDims

// Row-major element strides of a contiguous tensor of `shape` (host code: outputs of the
// elementwise kernels are contiguous).
struct ContiguousStrides {
  int64_t s[kMaxDims];
  ContiguousStrides(int ndim, const int64_t* shape) {
    int64_t acc = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      s[d] = acc;
      acc *= shape[d];
    }
  }
};

}  // namespace genesis::kernels
