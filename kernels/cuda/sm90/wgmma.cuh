#pragma once
// Hopper's warpgroup tensor-core products (wgmma, sm_90a) and the shared-memory tile layout they
// read. A warpgroup (4 warps, 128 threads) computes D[64 x N] += A[64 x 16 k] B[16 k x N] per
// instruction, asynchronously: A from shared memory or registers, B from shared memory, both
// described by 64-bit matrix descriptors (PTX ISA, "Matrix Descriptor Format").
//
// Tiles are stored in the 128-byte swizzle: a tile of R rows by C columns of 16-bit values is cut
// into panels of 64 columns (128 bytes a row), panel after panel; in a panel row r sits at
// r * 128 bytes and its 16-byte chunk c at chunk c ^ (r % 8). Tiles start 1024-byte aligned.
// Read along its rows (K-major: Q K^T, dO V^T) such a tile is an operand whose 8-row groups
// are 1024 bytes apart; read down its columns (MN-major: P V, dS K, P^T dO, dS^T Q) it is a B
// operand whose 8-row (K) groups are 1024 bytes apart and whose 64-column (N) panels R * 128.
#include <cstdint>
#include <type_traits>

namespace genesis::kernels::cuda::wgmma {

// Byte offset of 16-byte chunk `chunk` (of 8 elements) of row `row` in a swizzled tile of `rows`.
__device__ __forceinline__ uint32_t swizzled(int rows, int row, int chunk) {
  return static_cast<uint32_t>((chunk / 8) * rows * 128 + row * 128 + (((chunk % 8) ^ (row % 8)) << 4));
}

// A matrix descriptor: start address, leading and stride byte offsets, 128-byte swizzle.
__device__ __forceinline__ uint64_t descriptor(uint32_t smem, uint32_t leading, uint32_t stride) {
  return static_cast<uint64_t>((smem & 0x3FFFF) >> 4) | (static_cast<uint64_t>((leading & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((stride & 0x3FFFF) >> 4) << 32) | (uint64_t{1} << 62);
}
// Rows [row0, row0 + 64 or N) x columns [16 k, 16 k + 16) of a tile of `rows` rows, read
// along the rows (A, or B of Q K^T-like products). The leading offset is unused.
__device__ __forceinline__ uint64_t k_major(uint32_t tile, int rows, int row0, int k) {
  return descriptor(tile + static_cast<uint32_t>((k / 4) * rows * 128 + row0 * 128 + (k % 4) * 32), 16, 1024);
}
// Rows [16 k, 16 k + 16) x all columns of a tile of `rows` rows, read down the columns (B of
// P V-like products, with the transpose flag).
__device__ __forceinline__ uint64_t mn_major(uint32_t tile, int rows, int k) {
  return descriptor(tile + static_cast<uint32_t>(k * 16 * 128), static_cast<uint32_t>(rows * 128), 1024);
}

__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared memory written by ordinary stores or cp.async, made visible to wgmma's reads.
__device__ __forceinline__ void fence_shared_for_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accesses of an accumulator across a wait.
template <int N>
__device__ __forceinline__ void fence_accumulator(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}

#define GENESIS_WGMMA_ACC4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define GENESIS_WGMMA_ACC32                                                                                          \
  GENESIS_WGMMA_ACC4(0), GENESIS_WGMMA_ACC4(1), GENESIS_WGMMA_ACC4(2), GENESIS_WGMMA_ACC4(3), GENESIS_WGMMA_ACC4(4), \
      GENESIS_WGMMA_ACC4(5), GENESIS_WGMMA_ACC4(6), GENESIS_WGMMA_ACC4(7)
#define GENESIS_WGMMA_ACC64                                                                                          \
  GENESIS_WGMMA_ACC32, GENESIS_WGMMA_ACC4(8), GENESIS_WGMMA_ACC4(9), GENESIS_WGMMA_ACC4(10), GENESIS_WGMMA_ACC4(11), \
      GENESIS_WGMMA_ACC4(12), GENESIS_WGMMA_ACC4(13), GENESIS_WGMMA_ACC4(14), GENESIS_WGMMA_ACC4(15)
#define GENESIS_WGMMA_D32                                                  \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define GENESIS_WGMMA_D64                                                                  \
  GENESIS_WGMMA_D32                                                                        \
      ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

// d (+)= A B with A and B in shared memory, both K-major; accumulate = 0 overwrites d. FLAG is
// accumulate's operand, OPERANDS those of A and B.
#define GENESIS_WGMMA_SS(N, TYPE, REGS, ACC, FLAG, OPERANDS)                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " FLAG ", 0;\nwgmma.mma_async.sync.aligned.m64n" N "k16.f32." TYPE \
               "." TYPE " {" REGS "}, " OPERANDS ", p, 1, 1, 0, 0;\n}\n"                                            \
               : ACC                                                                                                \
               : "l"(a), "l"(b), "r"(accumulate))
// d += A B with A in registers (the fragment layout of mma.m16n8k16's A per warp) and B in
// shared memory, MN-major.
#define GENESIS_WGMMA_RS(N, TYPE, REGS, ACC, FLAG, OPERANDS)                                                        \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " FLAG ", 0;\nwgmma.mma_async.sync.aligned.m64n" N "k16.f32." TYPE \
               "." TYPE " {" REGS "}, " OPERANDS ", p, 1, 1, 1;\n}\n"                                               \
               : ACC                                                                                                \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))
// FORM for d[64 x 8 NT] (NT = 8 or 16) and T (__half or bfloat16). The operands after d's 32 or 64
// registers are FLAG32 and OPERANDS32, or FLAG64 and OPERANDS64.
#define GENESIS_WGMMA_BY_SHAPE(FORM, FLAG32, OPERANDS32, FLAG64, OPERANDS64)         \
  static_assert(NT == 8 || NT == 16, "N of 64 or 128");                              \
  constexpr bool bf16 = !std::is_same_v<T, __half>;                                  \
  if constexpr (NT == 8 && bf16) {                                                   \
    FORM("64", "bf16", GENESIS_WGMMA_D32, GENESIS_WGMMA_ACC32, FLAG32, OPERANDS32);  \
  } else if constexpr (NT == 8) {                                                    \
    FORM("64", "f16", GENESIS_WGMMA_D32, GENESIS_WGMMA_ACC32, FLAG32, OPERANDS32);   \
  } else if constexpr (bf16) {                                                       \
    FORM("128", "bf16", GENESIS_WGMMA_D64, GENESIS_WGMMA_ACC64, FLAG64, OPERANDS64); \
  } else {                                                                           \
    FORM("128", "f16", GENESIS_WGMMA_D64, GENESIS_WGMMA_ACC64, FLAG64, OPERANDS64);  \
  }

// d[64 x N] (+)= A[64 x 16] B[16 x N], N = 8 * NT (64 or 128), A and B K-major descriptors.
template <class T, int NT>
__device__ __forceinline__ void mma_ss(float (&d)[NT][4], uint64_t a, uint64_t b, int accumulate) {
  GENESIS_WGMMA_BY_SHAPE(GENESIS_WGMMA_SS, "%34", "%32, %33", "%66", "%64, %65")
}

// d[64 x N] += A[64 x 16] B[16 x N], A a register fragment, B an MN-major descriptor.
template <class T, int NT>
__device__ __forceinline__ void mma_rs(float (&d)[NT][4], const uint32_t (&a)[4], uint64_t b) {
  GENESIS_WGMMA_BY_SHAPE(GENESIS_WGMMA_RS, "%37", "{%32, %33, %34, %35}, %36", "%69", "{%64, %65, %66, %67}, %68")
}

#undef GENESIS_WGMMA_BY_SHAPE
#undef GENESIS_WGMMA_SS
#undef GENESIS_WGMMA_RS
#undef GENESIS_WGMMA_D64
#undef GENESIS_WGMMA_D32
#undef GENESIS_WGMMA_ACC64
#undef GENESIS_WGMMA_ACC32
#undef GENESIS_WGMMA_ACC4

}  // namespace genesis::kernels::cuda::wgmma
