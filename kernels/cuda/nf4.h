#pragma once
// CUDA kernels of NF4 with double-quantized statistics: the contracts of kernels/cpu/nf4.h, the
// same bits (the format: kernels/common/nf4_format.h). Buffers are contiguous; nothing here
// synchronizes the stream.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cuda {

// Quantizes x [n] (f32, bf16 or f16): codes [ceil(n / 2)] bytes, absmax_codes [ceil(n / 64)]
// bytes, scale [ceil(n / 16384)] f32 and *offset (f32, device memory: the absmax's mean, summed
// in the CPU kernel's order; NaN or infinite when x has such an element). Workspace: absmax
// [ceil(n / 64)] f32 (ends holding every block's exact absmax) and partial [ceil(n / 16384)] f64.
void nf4_quantize(DType dtype, int64_t n, const void* x, uint8_t* codes, uint8_t* absmax_codes, float* scale,
                  float* offset, float* absmax, double* partial, cudaStream_t stream);
// Every block's absmax back from its 8-bit code: absmax [blocks] f32.
void nf4_dequantize_absmax(int64_t blocks, const uint8_t* absmax_codes, const float* scale, float offset, float* absmax,
                           cudaStream_t stream);
// out [n] of `dtype` (f32, bf16 or f16) = level[code] * absmax, the product rounded once to dtype.
void nf4_dequantize(DType dtype, int64_t n, const uint8_t* codes, const uint8_t* absmax_codes, const float* scale,
                    float offset, void* out, cudaStream_t stream);

}  // namespace genesis::kernels::cuda
