#include "kernels/cpu/nf4.h"

#include <algorithm>
#include <vector>

#include "kernels/common/nf4_format.h"
#include "kernels/cpu/loops.h"

namespace genesis::kernels::cpu {

namespace {

using nf4::kBlock;
using nf4::kStatsBlock;

constexpr nf4::Tables kTables = nf4::make_tables();

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// One 64-block per iteration: its absmax, then each pair of elements into a byte.
template <class T>
void quantize_blocks(int64_t n, const T* x, uint8_t* codes, float* absmax) {
  parallel_for(ceil_div(n, kBlock), kBlock * 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t first = b * kBlock, last = std::min(n, first + kBlock);
      float block_max = 0.0f;
      for (int64_t i = first; i < last; ++i) block_max = nf4::max_magnitude(block_max, static_cast<float>(x[i]));
      absmax[b] = block_max;
      const float inverse = block_max != 0.0f ? 1.0f / block_max : 0.0f;
      auto code_of = [&](int64_t i) {
        return nf4::nearest_index(nf4::normalized(static_cast<float>(x[i]), block_max, inverse), kTables.levels, 16);
      };
      for (int64_t i = first; i < last; i += 2)
        codes[i / 2] = nf4::pack_pair(code_of(i), i + 1 < last ? code_of(i + 1) : nf4::kZeroCode);
    }
  });
}

// The absmax's mean, then each run of 256 blocks: its scale and the 8-bit codes.
float quantize_absmax(int64_t blocks, const float* absmax, uint8_t* absmax_codes, float* scale) {
  if (blocks == 0) return 0.0f;
  const int64_t groups = ceil_div(blocks, kStatsBlock);
  std::vector<double> partial(static_cast<size_t>(groups));
  parallel_for(groups, kStatsBlock, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      double s = 0.0;
      for (int64_t b = g * kStatsBlock; b < std::min(blocks, (g + 1) * kStatsBlock); ++b) s += absmax[b];
      partial[static_cast<size_t>(g)] = s;
    }
  });
  double total = 0.0;
  for (double s : partial) total += s;
  const float offset = static_cast<float>(total / static_cast<double>(blocks));
  parallel_for(groups, kStatsBlock * 16, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const int64_t first = g * kStatsBlock, last = std::min(blocks, first + kStatsBlock);
      float group_max = 0.0f;
      for (int64_t b = first; b < last; ++b) group_max = nf4::max_magnitude(group_max, absmax[b] - offset);
      scale[g] = group_max;
      const float inverse = group_max != 0.0f ? 1.0f / group_max : 0.0f;
      for (int64_t b = first; b < last; ++b)
        absmax_codes[b] = static_cast<uint8_t>(
            nf4::nearest_index(nf4::normalized(absmax[b] - offset, group_max, inverse), kTables.map, 256));
    }
  });
  return offset;
}

float block_absmax(int64_t b, const uint8_t* absmax_codes, const float* scale, float offset) {
  return nf4::absmax_from_code(kTables.map[absmax_codes[b]], scale[b / kStatsBlock], offset);
}

template <class T>
void dequantize_blocks(int64_t n, const uint8_t* codes, const uint8_t* absmax_codes, const float* scale, float offset,
                       T* out) {
  parallel_for(ceil_div(n, kBlock), kBlock * 2, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const float block_max = block_absmax(b, absmax_codes, scale, offset);
      const int64_t first = b * kBlock, last = std::min(n, first + kBlock);
      for (int64_t i = first; i < last; i += 2) {
        const uint8_t byte = codes[i / 2];
        out[i] = T(kTables.levels[byte >> 4] * block_max);
        if (i + 1 < last) out[i + 1] = T(kTables.levels[byte & 0x0F] * block_max);
      }
    }
  });
}

}  // namespace

float nf4_quantize(DType dtype, int64_t n, const void* x, uint8_t* codes, uint8_t* absmax_codes, float* scale,
                   float* absmax) {
  nf4::dispatch_weight_dtype<bfloat16, float16>(dtype, "nf4_quantize", [&](auto tag) {
    using T = decltype(tag);
    quantize_blocks(n, static_cast<const T*>(x), codes, absmax);
  });
  return quantize_absmax(ceil_div(n, kBlock), absmax, absmax_codes, scale);
}

void nf4_dequantize_absmax(int64_t blocks, const uint8_t* absmax_codes, const float* scale, float offset,
                           float* absmax) {
  parallel_for(blocks, 8, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) absmax[b] = block_absmax(b, absmax_codes, scale, offset);
  });
}

void nf4_dequantize(DType dtype, int64_t n, const uint8_t* codes, const uint8_t* absmax_codes, const float* scale,
                    float offset, void* out) {
  nf4::dispatch_weight_dtype<bfloat16, float16>(dtype, "nf4_dequantize", [&](auto tag) {
    using T = decltype(tag);
    dequantize_blocks(n, codes, absmax_codes, scale, offset, static_cast<T*>(out));
  });
}

}  // namespace genesis::kernels::cpu
