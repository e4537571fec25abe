#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// a counter-based generator. Element i of a random tensor draws from counter
// (offset + i / 4, i % 4) under key = seed, so the result does not depend on how the
// work is split across threads or GPU blocks, and CPU and CUDA produce the same bits.
#include <cstdint>

#if defined(__CUDACC__)
#define GENESIS_PHILOX_HD __host__ __device__ __forceinline__
#else
#define GENESIS_PHILOX_HD inline
#endif

namespace genesis::kernels {

struct Philox4 {
  uint32_t v[4];
};

GENESIS_PHILOX_HD Philox4 philox4x32_10(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform float in (0, 1]: never 0, so log() of it is finite (Box-Muller, Bernoulli).
GENESIS_PHILOX_HD float uint_to_unit_float(uint32_t x) { return (static_cast<float>(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }
// Uniform double in (0, 1] from 53 random bits.
GENESIS_PHILOX_HD double uints_to_unit_double(uint32_t a, uint32_t b) {
  uint64_t bits = (static_cast<uint64_t>(a) << 21) ^ static_cast<uint64_t>(b >> 11);
  return (static_cast<double>(bits & ((1ull << 53) - 1)) + 1.0) * (1.0 / 9007199254740992.0);
}

}  // namespace genesis::kernels
