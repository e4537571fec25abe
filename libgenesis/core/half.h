#pragma once
// 16-bit floating-point storage types for the CPU side. Arithmetic goes through
// float; conversions from float round to nearest, ties to even (as CUDA and PyTorch do).
#include <bit>
#include <cstdint>

namespace genesis {

namespace detail {

inline uint16_t float_to_half_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x0200u | ((abs >> 13) & 0x3FFu) : 0u));
  }
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero in half
    // Add 0.5 (as a float) so the FPU does the round-to-nearest-even of the mantissa shift.
    float shifted = std::bit_cast<float>(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3F000000u));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xC8000FFFu + mant_odd;  // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (abs >> 13));
}

inline float half_bits_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline float bf16_bits_to_float(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

}  // namespace detail

struct float16 {
  uint16_t bits = 0;
  float16() = default;
  float16(float f) : bits(detail::float_to_half_bits(f)) {}  // NOLINT: implicit like a builtin float type
  operator float() const { return detail::half_bits_to_float(bits); }
  static float16 from_bits(uint16_t b) { float16 h; h.bits = b; return h; }
};

struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  bfloat16(float f) : bits(detail::float_to_bf16_bits(f)) {}  // NOLINT: implicit like a builtin float type
  operator float() const { return detail::bf16_bits_to_float(bits); }
  static bfloat16 from_bits(uint16_t b) { bfloat16 h; h.bits = b; return h; }
};

static_assert(sizeof(float16) == 2 && sizeof(bfloat16) == 2);

}  // namespace genesis
