#pragma once
// The NF4 format with double-quantized statistics (QLoRA, Dettmers et al. 2023, as bitsandbytes
// stores it): its two code tables and the scalar rules of encoding and decoding, shared by the
// CPU and CUDA kernels (kernels/cpu/nf4.h, kernels/cuda/nf4.h) so that both give the same bits.
//
//   element i of the flattened weight belongs to block i / 64; absmax[b] = max |x| of block b
//   code(x)   = the NF4 level nearest to x * (1 / absmax[b])               (4 bits)
//   absmax[b] - offset is stored as the dynamic-map entry nearest to it / scale[b / 256] (8 bits),
//               offset = mean of all absmax, scale[j] = max |absmax - offset| of its 256 blocks
//   x'        = level[code] * (map[absmax code] * scale + offset)
#include <cstdint>

#include "kernels/common/math.h"
#include "libgenesis/core/dtype.h"

namespace genesis::kernels::nf4 {

inline constexpr int64_t kBlock = 64;        // elements that share one absmax
inline constexpr int64_t kStatsBlock = 256;  // absmax values that share one scale
inline constexpr int kZeroCode = 7;          // the level 0.0: all-zero blocks, and an odd count's last nibble

// The 16 NormalFloat levels, ascending: the QLoRA paper's appendix (arXiv 2305.14314), and the
// table of bitsandbytes' dDequantizeNF4 (csrc/kernels.cu) and create_normal_map(offset=0.9677083),
// whose decimals these are (each is an exact float).
inline constexpr float kLevels[16] = {-1.0f,
                                      -0.6961928009986877f,
                                      -0.5250730514526367f,
                                      -0.39491748809814453f,
                                      -0.28444138169288635f,
                                      -0.18477343022823334f,
                                      -0.09105003625154495f,
                                      0.0f,
                                      0.07958029955625534f,
                                      0.16093020141124725f,
                                      0.24611230194568634f,
                                      0.33791524171829224f,
                                      0.44070982933044434f,
                                      0.5626170039176941f,
                                      0.7229568362236023f,
                                      1.0f};

// The upper half of bitsandbytes' dynamic 8-bit map, create_dynamic_map(signed=True,
// max_exponent_bits=7, total_bits=8), which quantize_4bit(compress_statistics=True) uses for
// the absmax: entries 128..255 (the last is 1.0). Entry 127 is 0 and entry 126 - j is
// -kMapUpperHalf[j]. The map is built by torch.linspace in f32, whose rounding depends on the
// CPU kernels torch picks: these are the bits torch 2.11 gives with its AVX2 and AVX-512 kernels
// (identical); with ATEN_CPU_CAPABILITY=default 42 of the 256 entries differ by one ulp, and
// the exact decimal formula rounded once to f32 differs from these in 72 entries by one ulp.
inline constexpr float kMapUpperHalf[128] = {5.5000004e-07f, 3.2500002e-06f, 7.75e-06f,      2.1249998e-05f,
                                             4.375e-05f,     6.625e-05f,     8.875e-05f,     0.00015625001f,
                                             0.00026875004f, 0.00038125002f, 0.00049375003f, 0.0006062501f,
                                             0.00071875006f, 0.00083125f,    0.0009437501f,  0.0012812499f,
                                             0.00184375f,    0.00240625f,    0.00296875f,    0.0035312497f,
                                             0.00409375f,    0.0046562497f,  0.0052187503f,  0.00578125f,
                                             0.00634375f,    0.00690625f,    0.00746875f,    0.00803125f,
                                             0.00859375f,    0.009156249f,   0.00971875f,    0.01140625f,
                                             0.01421875f,    0.01703125f,    0.019843752f,   0.02265625f,
                                             0.02546875f,    0.028281251f,   0.03109375f,    0.03390625f,
                                             0.036718752f,   0.03953125f,    0.042343747f,   0.04515625f,
                                             0.04796875f,    0.05078125f,    0.05359375f,    0.05640625f,
                                             0.059218753f,   0.06203125f,    0.06484375f,    0.067656256f,
                                             0.070468746f,   0.07328125f,    0.07609375f,    0.07890625f,
                                             0.08171876f,    0.08453125f,    0.08734375f,    0.09015625f,
                                             0.092968754f,   0.09578126f,    0.09859375f,    0.107031256f,
                                             0.12109375f,    0.13515624f,    0.14921875f,    0.16328125f,
                                             0.17734376f,    0.19140625f,    0.20546874f,    0.21953125f,
                                             0.23359375f,    0.24765624f,    0.26171875f,    0.27578127f,
                                             0.28984374f,    0.30390626f,    0.31796873f,    0.33203125f,
                                             0.34609374f,    0.36015624f,    0.37421876f,    0.38828123f,
                                             0.40234375f,    0.41640624f,    0.43046874f,    0.44453126f,
                                             0.45859373f,    0.47265625f,    0.4867187f,     0.50078124f,
                                             0.5148437f,     0.5289062f,     0.54296875f,    0.5570313f,
                                             0.5710938f,     0.58515626f,    0.5992187f,     0.61328125f,
                                             0.6273438f,     0.6414063f,     0.65546876f,    0.6695312f,
                                             0.68359375f,    0.6976563f,     0.7117188f,     0.72578126f,
                                             0.7398437f,     0.75390625f,    0.7679688f,     0.78203124f,
                                             0.79609376f,    0.8101562f,     0.82421875f,    0.8382813f,
                                             0.85234374f,    0.86640626f,    0.8804687f,     0.89453125f,
                                             0.9085938f,     0.92265624f,    0.93671876f,    0.9507812f,
                                             0.96484375f,    0.9789063f,     0.99296874f,    1.0f};

// f(T{}) with T the element type of an NF4 weight or of its dequantized copy (f32, bf16, f16), the
// 16-bit types being the device's own (genesis::bfloat16 on the CPU, __nv_bfloat16 on CUDA).
template <class BFloat16, class Half, class F>
void dispatch_weight_dtype(DType dtype, const char* what, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(float{});
    case DType::bf16:
      return f(BFloat16{});
    case DType::f16:
      return f(Half{});
    default:
      throw_unsupported_dtype(what, dtype);
  }
}

// Both tables by value: what the CUDA kernels take as an argument (device code cannot index a
// host constexpr array) and copy to shared memory.
struct Tables {
  float levels[16];
  float map[256];  // ascending, map[127] == 0, map[255] == 1
};

constexpr Tables make_tables() {
  Tables t{};
  for (int i = 0; i < 16; ++i) t.levels[i] = kLevels[i];
  t.map[127] = 0.0f;
  for (int j = 0; j < 128; ++j) t.map[128 + j] = kMapUpperHalf[j];
  for (int j = 0; j < 127; ++j) t.map[126 - j] = -kMapUpperHalf[j];
  return t;
}

// The index of the entry of the ascending `table` nearest to r: the number of midpoints between
// neighbouring entries that lie strictly below r, so a value exactly halfway takes the lower
// entry. The midpoints are exact (two neighbouring floats add exactly in double). bitsandbytes
// compares with the midpoints rounded to f32 instead: where that rounding goes up, the one float
// equal to it gets the lower entry there and the upper one here.
GENESIS_HD int nearest_index(float r, const float* table, int size) {
  int lo = 0, hi = size - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    const double midpoint = (static_cast<double>(table[mid]) + static_cast<double>(table[mid + 1])) * 0.5;
    if (static_cast<double>(r) > midpoint) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// x scaled into [-1, 1] by its block's absmax as bitsandbytes does, x * (1 / absmax) with
// `inverse` = 1 / absmax rounded once; an all-zero block gives 0 (bitsandbytes' 0 * inf would
// be NaN), and a subnormal absmax whose reciprocal overflows divides instead.
GENESIS_HD float normalized(float x, float absmax, float inverse) {
  if (absmax == 0.0f) return 0.0f;
  if (inverse > 3.4028234663852886e38f) return x / absmax;
  return x * inverse;
}

// The larger magnitude, NaN winning (a block with a NaN must not look finite).
GENESIS_HD float max_magnitude(float current, float x) {
  const float a = x < 0.0f ? -x : x;
  return (a != a || a > current) ? a : current;
}

// A block's absmax back from its 8-bit code: map[code] * scale, rounded, then + offset, rounded
// (bitsandbytes' dequantize_blockwise followed by += offset). Never one fused multiply-add:
// CUDA rounds each step explicitly, and the host reads the product back from a volatile, which
// no compiler contracts across whatever its FMA flags (once per 64 elements).
GENESIS_HD float absmax_from_code(float map_value, float scale, float offset) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(__fmul_rn(map_value, scale), offset);
#else
  const volatile float product = map_value * scale;
  return product + offset;
#endif
}

// The 4-bit codes of elements 2k and 2k + 1 in byte k: the even element in the high nibble, as
// bitsandbytes packs them.
GENESIS_HD uint8_t pack_pair(int even, int odd) {
  return static_cast<uint8_t>((even << 4) | odd);
}

}  // namespace genesis::kernels::nf4
