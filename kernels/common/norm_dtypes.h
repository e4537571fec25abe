#pragma once
// The dtypes of the layer/RMS norm kernels' operands and the combinations they take, shared by
// the CPU and CUDA kernels (kernels/cpu/nn.h, kernels/cuda/nn.h).
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include "libgenesis/core/dtype.h"

namespace genesis::kernels {

// The dtypes of a norm's operands (the CPU and CUDA kernels alike): x and grad_x; weight, bias
// and their gradients; y and grad_y.
struct NormDTypes {
  DType x;
  DType weight;
  DType y;
};
// The combinations the norm kernels take: one floating dtype for all, or f32 weights with an x of
// f32, f16 or bf16 and a 16-bit y (mixed precision: f32 parameters, the f32 residual stream or
// 16-bit activations in, the autocast dtype out).
constexpr bool norm_dtypes_supported(NormDTypes d) {
  const bool same = d.x == d.weight && d.x == d.y && is_floating(d.x);
  return same || (d.weight == DType::f32 && (d.x == DType::f32 || is_half(d.x)) && is_half(d.y));
}

// Calls f.template operator()<X, W, Y>() (f: a lambda `[&]<class X, class W, class Y>() {...}`)
// with the element types of x, the weights and y for a supported combination, Half and BFloat16
// standing for f16 and bf16 (each device's own types); throws for any other combination. Shared
// by the CPU and CUDA kernels, so both instantiate the same combinations.
template <class Half, class BFloat16, class F>
void with_norm_types(NormDTypes d, std::string_view what, F&& f) {
  if (!norm_dtypes_supported(d)) throw_unsupported_dtype(what, d.x == d.weight ? d.y : d.weight);
  auto half = [](DType t, auto&& g) {
    return t == DType::f16 ? g(std::type_identity<Half>{}) : g(std::type_identity<BFloat16>{});
  };
  auto f32_or_half = [&half](DType t, auto&& g) {
    return t == DType::f32 ? g(std::type_identity<float>{}) : half(t, g);
  };
  auto run = [&f](auto x, auto w, auto y) {
    f.template operator()<typename decltype(x)::type, typename decltype(w)::type, typename decltype(y)::type>();
  };
  if (d.x == DType::f64) {
    f.template operator()<double, double, double>();
  } else if (d.x == d.weight && d.x == d.y) {
    f32_or_half(d.x, [&](auto t) { run(t, t, t); });
  } else {
    f32_or_half(d.x, [&](auto x) { half(d.y, [&](auto y) { run(x, std::type_identity<float>{}, y); }); });
  }
}

}  // namespace genesis::kernels
