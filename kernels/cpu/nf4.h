#pragma once
// CPU kernels of NF4 with double-quantized statistics (the format: kernels/common/nf4_format.h).
// Buffers are contiguous; the weight is any number n of elements in f32, bf16 or f16. The CUDA
// kernels (kernels/cuda/nf4.h) give the same bits.
#include <cstdint>

#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cpu {

// Quantizes x [n]: codes [ceil(n / 2)] bytes, absmax_codes [ceil(n / 64)] bytes and
// scale [ceil(n / 16384)] f32; `absmax` [ceil(n / 64)] f32 is workspace (it ends holding every
// block's exact absmax). Returns the offset, the mean of the absmax (accumulated in double, each
// run of 256 blocks first, then those sums in order): NaN or infinite when x has such an element.
float nf4_quantize(DType dtype, int64_t n, const void* x, uint8_t* codes, uint8_t* absmax_codes, float* scale,
                   float* absmax);
// Every block's absmax back from its 8-bit code: absmax [blocks] f32.
void nf4_dequantize_absmax(int64_t blocks, const uint8_t* absmax_codes, const float* scale, float offset,
                           float* absmax);
// out [n] of `dtype` (f32, bf16 or f16) = level[code] * absmax, the product rounded once to dtype.
void nf4_dequantize(DType dtype, int64_t n, const uint8_t* codes, const uint8_t* absmax_codes, const float* scale,
                    float offset, void* out);

}  // namespace genesis::kernels::cpu
