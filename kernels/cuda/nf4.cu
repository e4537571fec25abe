// NF4 kernels. Quantization (once per weight, at load time): a warp per 64-block, then the
// absmax's statistics in the CPU kernel's order. Dequantization (every forward and backward of a
// frozen layer, memory bound: 0.5 byte read and 2 or 4 written per element): 2 or 4 code bytes
// per load become 4 or 8 values, written 16 bytes per store.
#include <cstdint>
#include <cstring>

#include "kernels/common/nf4_format.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/nf4.h"
#include "kernels/cuda/packs.cuh"

namespace genesis::kernels::cuda {

namespace {

using nf4::kBlock;
using nf4::kStatsBlock;

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;
// 16-byte output packs a dequantizing thread writes per tile of its warp. Measured on an H200,
// [8192, 28672] (bytes read + written per second): bf16 3.4 TB/s with 2 packs, 2.8 with 1, 2.5
// with 4, 2.2 with 8; f32 3.4 with 2, 2.7 with 4, 1.8 with 8.
constexpr int kPacksPerLane = 2;

constexpr nf4::Tables kTables = nf4::make_tables();

__host__ __device__ __forceinline__ int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// The first `count` entries of a table argument (kernel parameter space) in shared memory.
__device__ __forceinline__ void load_table(float* shared, const float* table, int count) {
  for (int i = static_cast<int>(threadIdx.x); i < count; i += blockDim.x) shared[i] = table[i];
  __syncthreads();
}

// Lane l of the warp of block b quantizes elements 64 b + 2 l and 64 b + 2 l + 1 into one byte.
template <class T>
__global__ void __launch_bounds__(kThreads)
    quantize_blocks_kernel(int64_t n, const T* x, uint8_t* codes, float* absmax, nf4::Tables tables) {
  __shared__ float levels[16];
  load_table(levels, tables.levels, 16);
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t blocks = ceil_div(n, kBlock), warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; b < blocks; b += warps) {
    const int64_t i = b * kBlock + 2 * lane;
    const float even = i < n ? to_acc<float>(x[i]) : 0.0f;
    const float odd = i + 1 < n ? to_acc<float>(x[i + 1]) : 0.0f;
    const float block_max = warp_reduce(nf4::max_magnitude(nf4::max_magnitude(0.0f, even), odd), NanMax{});
    if (lane == 0) absmax[b] = block_max;
    if (i >= n) continue;
    const float inverse = block_max != 0.0f ? 1.0f / block_max : 0.0f;
    const int even_code = nf4::nearest_index(nf4::normalized(even, block_max, inverse), levels, 16);
    const int odd_code =
        i + 1 < n ? nf4::nearest_index(nf4::normalized(odd, block_max, inverse), levels, 16) : nf4::kZeroCode;
    codes[i / 2] = nf4::pack_pair(even_code, odd_code);
  }
}

// The sum of each run of 256 absmax values, in order, in double (a thread per run).
__global__ void __launch_bounds__(kThreads)
    absmax_partial_sums_kernel(int64_t blocks, const float* absmax, double* partial) {
  const int64_t groups = ceil_div(blocks, kStatsBlock), stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    double s = 0.0;
    for (int64_t b = g * kStatsBlock; b < min64(blocks, (g + 1) * kStatsBlock); ++b) s += absmax[b];
    partial[g] = s;
  }
}

// The mean of all absmax: the runs' sums added in order by one thread.
__global__ void absmax_mean_kernel(int64_t blocks, const double* partial, float* offset) {
  double total = 0.0;
  for (int64_t g = 0; g < ceil_div(blocks, kStatsBlock); ++g) total += partial[g];
  *offset = static_cast<float>(total / static_cast<double>(blocks));
}

// A warp per run of 256 absmax values: its scale, then each value's 8-bit code.
__global__ void __launch_bounds__(kThreads)
    quantize_absmax_kernel(int64_t blocks, const float* absmax, const float* offset_in, uint8_t* absmax_codes,
                           float* scale, nf4::Tables tables) {
  __shared__ float map[256];
  load_table(map, tables.map, 256);
  constexpr int kPerLane = static_cast<int>(kStatsBlock) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const float offset = *offset_in;
  const int64_t groups = ceil_div(blocks, kStatsBlock), warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; g < groups; g += warps) {
    float centered[kPerLane];
    float group_max = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t b = g * kStatsBlock + lane + k * kWarp;
      centered[k] = b < blocks ? absmax[b] - offset : 0.0f;
      group_max = nf4::max_magnitude(group_max, centered[k]);
    }
    group_max = warp_reduce(group_max, NanMax{});
    if (lane == 0) scale[g] = group_max;
    const float inverse = group_max != 0.0f ? 1.0f / group_max : 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t b = g * kStatsBlock + lane + k * kWarp;
      if (b < blocks)
        absmax_codes[b] =
            static_cast<uint8_t>(nf4::nearest_index(nf4::normalized(centered[k], group_max, inverse), map, 256));
    }
  }
}

__device__ __forceinline__ float block_absmax(int64_t b, const uint8_t* absmax_codes, const float* scale, float offset,
                                              const float* map) {
  return nf4::absmax_from_code(map[absmax_codes[b]], scale[b / kStatsBlock], offset);
}

__global__ void __launch_bounds__(kThreads)
    dequantize_absmax_kernel(int64_t blocks, const uint8_t* absmax_codes, const float* scale, float offset,
                             float* absmax, nf4::Tables tables) {
  __shared__ float map[256];
  load_table(map, tables.map, 256);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += stride)
    absmax[b] = block_absmax(b, absmax_codes, scale, offset, map);
}

// A store is one 16-byte pack of output (8 bf16/f16 or 4 f32 values) from its 4 or 2 code bytes,
// one load. Lane l of a warp takes packs l, l + 32, ... of the warp's tile, so each load and each
// store instruction of the warp covers one contiguous run (128 or 64 bytes of codes, 512 bytes of
// output); the tile's loads are all issued before its first store. A pack that runs past n, or
// buffers not 16-byte aligned, go element by element. The 16 levels sit in shared memory, one
// bank each, so a warp's lookups never conflict.
template <class T>
__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(int64_t n, const uint8_t* __restrict__ codes, const uint8_t* __restrict__ absmax_codes,
                      const float* __restrict__ scale, float offset, T* __restrict__ out, bool aligned,
                      nf4::Tables tables) {
  constexpr int kPerPack = kPack<T>;
  constexpr int kCodeBytes = kPerPack / 2;
  constexpr int64_t kTile = static_cast<int64_t>(kWarp) * kPacksPerLane * kPerPack;
  using CodeWord = typename RawVector<kCodeBytes>::type;
  __shared__ float levels[16];
  __shared__ float map[256];
  load_table(levels, tables.levels, 16);
  load_table(map, tables.map, 256);
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t tile = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp; tile * kTile < n;
       tile += warps) {
    const int64_t tile_first = tile * kTile;
    if (aligned && tile_first + kTile <= n) {
      CodeWord words[kPacksPerLane];
      float block_max[kPacksPerLane];
#pragma unroll
      for (int p = 0; p < kPacksPerLane; ++p) {
        const int64_t first = tile_first + static_cast<int64_t>(p * kWarp + lane) * kPerPack;
        words[p] = *reinterpret_cast<const CodeWord*>(codes + first / 2);
        block_max[p] = block_absmax(first / kBlock, absmax_codes, scale, offset, map);
      }
#pragma unroll
      for (int p = 0; p < kPacksPerLane; ++p) {
        uint8_t bytes[kCodeBytes];
        memcpy(bytes, &words[p], kCodeBytes);
        Pack16<T> pack;
#pragma unroll
        for (int e = 0; e < kPerPack; e += 2) {
          pack.v[e] = from_acc<T>(levels[bytes[e / 2] >> 4] * block_max[p]);
          pack.v[e + 1] = from_acc<T>(levels[bytes[e / 2] & 0x0F] * block_max[p]);
        }
        store_pack<kPerPack>(out + tile_first + static_cast<int64_t>(p * kWarp + lane) * kPerPack, pack);
      }
      continue;
    }
    for (int p = 0; p < kPacksPerLane; ++p) {
      const int64_t first = tile_first + static_cast<int64_t>(p * kWarp + lane) * kPerPack;
      for (int64_t i = first; i < min64(n, first + kPerPack); ++i) {
        const uint8_t byte = codes[i / 2];
        const float level = levels[i % 2 == 0 ? byte >> 4 : byte & 0x0F];
        out[i] = from_acc<T>(level * block_absmax(i / kBlock, absmax_codes, scale, offset, map));
      }
    }
  }
}

}  // namespace

void nf4_quantize(DType dtype, int64_t n, const void* x, uint8_t* codes, uint8_t* absmax_codes, float* scale,
                  float* offset, float* absmax, double* partial, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t blocks = ceil_div(n, kBlock), groups = ceil_div(blocks, kStatsBlock);
  nf4::dispatch_weight_dtype<__nv_bfloat16, __half>(dtype, "nf4_quantize", [&](auto tag) {
    using T = decltype(tag);
    quantize_blocks_kernel<T><<<grid_size(blocks * kWarp, kThreads), kThreads, 0, stream>>>(n, static_cast<const T*>(x),
                                                                                            codes, absmax, kTables);
    GENESIS_CUDA_LAUNCH_CHECK();
  });
  absmax_partial_sums_kernel<<<grid_size(groups, kThreads), kThreads, 0, stream>>>(blocks, absmax, partial);
  GENESIS_CUDA_LAUNCH_CHECK();
  absmax_mean_kernel<<<1, 1, 0, stream>>>(blocks, partial, offset);
  GENESIS_CUDA_LAUNCH_CHECK();
  quantize_absmax_kernel<<<grid_size(groups * kWarp, kThreads), kThreads, 0, stream>>>(blocks, absmax, offset,
                                                                                       absmax_codes, scale, kTables);
  GENESIS_CUDA_LAUNCH_CHECK();
}

void nf4_dequantize_absmax(int64_t blocks, const uint8_t* absmax_codes, const float* scale, float offset, float* absmax,
                           cudaStream_t stream) {
  if (blocks == 0) return;
  dequantize_absmax_kernel<<<grid_size(blocks, kThreads), kThreads, 0, stream>>>(blocks, absmax_codes, scale, offset,
                                                                                 absmax, kTables);
  GENESIS_CUDA_LAUNCH_CHECK();
}

void nf4_dequantize(DType dtype, int64_t n, const uint8_t* codes, const uint8_t* absmax_codes, const float* scale,
                    float offset, void* out, cudaStream_t stream) {
  if (n == 0) return;
  const bool aligned = reinterpret_cast<uintptr_t>(codes) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  nf4::dispatch_weight_dtype<__nv_bfloat16, __half>(dtype, "nf4_dequantize", [&](auto tag) {
    using T = decltype(tag);
    dequantize_kernel<T><<<grid_size(ceil_div(n, kPacksPerLane * kPack<T>), kThreads), kThreads, 0, stream>>>(
        n, codes, absmax_codes, scale, offset, static_cast<T*>(out), aligned, kTables);
    GENESIS_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace genesis::kernels::cuda
