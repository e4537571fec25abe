#pragma once
// The stable radix sort of (key, int64 payload) pairs that the deterministic scatter-style
// kernels (scatter_add, index_select and embedding backward) group their contributions with:
// keys below `bound` sort on just the bits they use, into a workspace carved from one buffer.
#include <cub/device/device_radix_sort.cuh>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/check.h"

namespace genesis::kernels::cuda {

// Workspace regions start on 256-byte boundaries (what cub expects of its temporary storage).
inline size_t workspace_aligned(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// Key bits that values below `bound` use.
inline int sort_key_bits(int64_t bound) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) < bound) ++bits;
  return bits;
}

// Bytes of cub temporary storage for sorting n pairs whose keys are below `bound`.
inline size_t sort_by_key_temp_bytes(int64_t n, int64_t bound) {
  size_t bytes = 0;
  GENESIS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const unsigned long long*>(nullptr), static_cast<unsigned long long*>(nullptr),
      static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), n, 0, sort_key_bits(bound)));
  return bytes;
}

// Stable sort of n (keys[i], values[i]) pairs by key into sorted_keys / sorted_values; `temp`
// holds sort_by_key_temp_bytes(n, bound) bytes.
inline void sort_by_key(void* temp, int64_t n, int64_t bound, const unsigned long long* keys,
                        unsigned long long* sorted_keys, const int64_t* values, int64_t* sorted_values,
                        cudaStream_t stream) {
  size_t temp_bytes = sort_by_key_temp_bytes(n, bound);
  GENESIS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, sorted_keys, values, sorted_values, n, 0,
                                                     sort_key_bits(bound), stream));
}

}  // namespace genesis::kernels::cuda
