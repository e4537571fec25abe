#pragma once
// NF4 storage of frozen weights with double-quantized statistics, as QLoRA (Dettmers et al.
// 2023) defines it and bitsandbytes stores it (quantize_4bit(quant_type="nf4", blocksize=64,
// compress_statistics=True)): the base weights of QLoRA fine-tuning.
//
// The flattened row-major weight is cut into blocks of 64 elements (the last may be shorter).
// Each element becomes the 4-bit index of the NF4 level nearest to x * (1 / absmax), absmax the
// block's largest |x|; a value exactly halfway between two levels takes the lower one. The
// absmax values are stored as 8 bits each: their mean (the offset) is subtracted, and each run
// of 256 is scaled by its largest |absmax - offset| into bitsandbytes' dynamic 8-bit map (nearest
// entry, the same halfway rule). Dequantization: level[code] * (map[code8] * scale + offset),
// the product rounded once to the output dtype. 4.127 bits an element (4 + 8/64 + 32/16384).
// The decoded absmax is within 0.00704 x its 256-block's scale of the exact one (half the widest
// gap of the map, 0.9/128, plus roundings); a normal(0, 1) weight comes back with a relative RMS
// error of 0.092.
//
// The same as bitsandbytes (its kernels and functional.py, read in its public source):
//  - the NF4 levels, the 64-element blocks, absmax = max |x| in f32, x * (1 / absmax);
//  - the packing: element 2k in the high nibble of byte k, 2k + 1 in the low one; an odd
//    element count pads the last low nibble with the level 0 (code 7), as bitsandbytes' padded 0;
//  - the 8-bit map (bitsandbytes builds it with torch.linspace, whose last bit depends on the
//    CPU kernels torch picks: ours is what AVX2 and AVX-512 machines build, see
//    kernels/common/nf4_format.h), the 256-block scales, and the dequantization arithmetic
//    (level * absmax in f32, then one rounding): a bitsandbytes state (codes, absmax codes,
//    scales, offset) whose nested map is that one dequantizes to the same bits.
// Not bit-compatible:
//  - the nearest level (and map entry) is decided on exact midpoints; bitsandbytes compares with
//    the midpoints rounded to f32 (its 8-bit search also sends a value equal to one to the entry
//    of even index), so a normalized value equal to a rounded midpoint may take the other
//    neighbour: at most one float per pair of neighbours;
//  - an all-zero block: bitsandbytes computes 0 * (1 / 0) = NaN and stores code 0 (-1.0), here
//    it is code 7 (0.0); both dequantize to zero (-0 there, +0 here);
//  - the offset: torch's mean (its own summation order) against a sum in double in a fixed
//    order here, so its last bit may differ, and the absmax codes with it where that moves a
//    value across a midpoint;
//  - storage dtype: genesis has no u8 dtype, so the byte tensors are DType::boolean (which
//    parse_dtype also names "u8") holding raw bytes: read them through data_ptr(), never as bool.
//
// Quantization and dequantization run on the CPU and on CUDA with the same bits.
#include <cstdint>

#include "libgenesis/core/tensor.h"

namespace genesis {

struct Nf4Weight {
  // [ceil(n / 2)] bytes: the 4-bit codes, element 2k in the high nibble of byte k.
  Tensor codes;
  // [ceil(n / 64)] bytes: each block's absmax - absmax_offset, as an index into the dynamic map
  // scaled by its 256-block's absmax_scale.
  Tensor absmax_codes;
  // [ceil(n / 16384)] f32: the largest |absmax - absmax_offset| of each 256 blocks.
  Tensor absmax_scale;
  // The mean of all blocks' absmax.
  float absmax_offset = 0.0f;
  // The weight's shape, [out, in].
  Shape shape;
  // The dtype nf4_linear dequantizes to (bf16, f16 or f32).
  DType compute_dtype = DType::bf16;

  int64_t numel() const { return numel_of(shape); }
  Device device() const { return codes.device(); }
  // Memory held: codes, absmax codes, scales and the offset (about 0.5159 bytes an element).
  int64_t bytes() const;
  // What bytes() holds for a weight of `numel` elements, known without quantizing one (memory estimates).
  static int64_t bytes_for(int64_t numel);
  // The same weight on `device` (the tensors copied).
  Nf4Weight to(Device device) const;
};

// Quantizes a 2-D weight [out, in] of f32, bf16 or f16 on its device. Throws ShapeError for
// another rank, DTypeError for another dtype, ValueError for a NaN or infinite element (read
// back from the device: quantization synchronizes the stream once, for the offset).
Nf4Weight quantize_nf4(const Tensor& weight, DType compute_dtype = DType::bf16);
// The weight [out, in] in `dtype` (f32, bf16 or f16), on the weight's device.
Tensor dequantize_nf4(const Nf4Weight& weight, DType dtype);
// Every block's absmax as dequantization uses it (decoded from 8 bits): [ceil(n / 64)] f32.
Tensor nf4_absmax(const Nf4Weight& weight);
// linear(x, dequantize_nf4(weight, weight.compute_dtype), bias): x [..., in] -> [..., out] with
// linear's dtype rules and autocast. Differentiable in x and bias; the weight is frozen (no
// gradient), and its dequantized copy is freed after the forward and made again by the backward.
Tensor nf4_linear(const Tensor& x, const Nf4Weight& weight, const Tensor& bias = Tensor());

}  // namespace genesis
