#pragma once
// What the flash attention kernels share (flash_attention.cu: mma.sync on sm_80 and later;
// sm90/flash_attention_wgmma.cu: wgmma on sm_90a): parameters, copy and tensor-core
// primitives, masks and the grid order.
// Fragment layouts of mma.m16n8k16 (PTX ISA), lane = 4 g + t; wgmma's m64nNk16 fragments are
// the same per warp of the warpgroup (rows 16 w + ...), repeated over N:
//   A (16x16, row-major): a0 = A[g][2t..], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   B (16x8, B[k][n]):    b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C (16x8, f32):        c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][2t, 2t+1]
// so a C tile pair rounded to 16 bits is an A fragment of the next product (P V, dS K).
// Scores are kept in base 2: p = 2^(s * scale * log2(e) - lse2).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/philox.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_attention.h"

namespace genesis::kernels::cuda::flash {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16 * kWarps;  // rows of the block's own operand
constexpr float kLog2e = 1.4426950408889634f;

struct FlashParams {
  int64_t q_heads, kv_heads, q_len, kv_len;
  int64_t causal_offset;  // query row i sees keys j <= i + offset
  bool causal;
  // Packed documents ([batch, q_len], null: none): query row i of batch b sees no key below
  // doc_start[b q_len + i], its document's first position. Starts never decrease along a row, so
  // a block's first row has the smallest and its last row the largest.
  const int32_t* doc_start;
  float scale, scale_log2;
  const void *q, *k, *v, *out, *grad_out;
  HeadsLayout q_layout, k_layout, v_layout, out_layout, grad_out_layout;
  void *out_data, *grad_q, *grad_k, *grad_v;
  HeadsLayout out_data_layout, grad_q_layout, grad_k_layout, grad_v_layout;
  float* lse;
  float* delta;
  // Grouped heads: each query head's share of dK and dV (f32 [batch, q_heads, kv_len, head_dim]),
  // summed over the group by flash_group_sum_kernel. Null when every kv head has one query head.
  float *grad_k_partial, *grad_v_partial;
  // Attention dropout (FlashDropout): a probability is kept when its draw's top 24 bits are below
  // keep_threshold, then scaled by keep_scale (1 without dropout).
  bool dropout;
  uint32_t keep_threshold;
  float keep_scale;
  uint64_t dropout_seed, dropout_offset;
  // The forward's mask for the backward: bit j % 32 of word (bh, i, j / 32) of [batch q_heads,
  // q_len, keep_words] is set when probability (i, j) is kept (the forward writes it, the
  // backward reads it instead of drawing again).
  uint32_t* keep_bits;
  int64_t keep_words;
};

// --- attention dropout -------------------------------------------------------------------------

// Draw e of the dropout stream decides element e of the [batch, q_heads, q_len, kv_len]
// probabilities: Philox counter offset + e / 4, word e % 4, kept when the word's top 24 bits are
// below floor(keep_prob 2^24) -- the test kernels/cpu/random.cpp's Bernoulli makes of the same
// word, so the mask equals what ops/nn.h's dropout draws for the materialized probabilities.
__device__ __forceinline__ uint64_t dropout_index(const FlashParams& p, int64_t bh, int64_t i, int64_t j) {
  return static_cast<uint64_t>(bh * p.q_len + i) * static_cast<uint64_t>(p.kv_len) + static_cast<uint64_t>(j);
}
__device__ __forceinline__ bool dropout_word_keeps(const FlashParams& p, const Philox4& r, int word) {
  const uint32_t w = word == 0 ? r.v[0] : word == 1 ? r.v[1] : word == 2 ? r.v[2] : r.v[3];
  return (w >> 8) < p.keep_threshold;
}
__device__ __forceinline__ bool dropout_keeps(const FlashParams& p, uint64_t e) {
  return dropout_word_keeps(p, philox4x32_10(p.dropout_offset + e / 4, 0, p.dropout_seed), static_cast<int>(e % 4));
}
// Elements e and e + 1 (adjacent keys of one query row): one draw unless they straddle a counter.
__device__ __forceinline__ void dropout_keeps_pair(const FlashParams& p, uint64_t e, bool& keep0, bool& keep1) {
  const Philox4 r = philox4x32_10(p.dropout_offset + e / 4, 0, p.dropout_seed);
  const int word = static_cast<int>(e % 4);
  keep0 = dropout_word_keeps(p, r, word);
  keep1 = word < 3 ? dropout_word_keeps(p, r, word + 1) : dropout_keeps(p, e + 1);
}

// When kv_len is a multiple of 4, each counter covers 4 adjacent keys of one query row (4-aligned
// in every row), which several lanes of an accumulator fragment hold: one lane draws it and the
// others read its words by shuffle, so a warp draws each counter once. The whole warp calls this.
//
// Rows (g, g + 8) are queries row0, row1 and columns (2t, 2t + 1) keys col, col + 1 (col = key
// tile + 8 nt + 2t; the forward): lanes t and t ^ 1 share a counter per row; the even lane
// draws row0's, the odd lane row1's, and each passes the other the half it needs.
__device__ __forceinline__ void dropout_keeps_query_rows(const FlashParams& p, int64_t bh, int64_t row0, int64_t row1,
                                                         int64_t col, int t, bool (&keep)[4]) {
  if (p.kv_len % 4 != 0) {
    dropout_keeps_pair(p, dropout_index(p, bh, row0, col), keep[0], keep[1]);
    dropout_keeps_pair(p, dropout_index(p, bh, row1, col), keep[2], keep[3]);
    return;
  }
  const bool odd = t & 1;
  const uint64_t e = dropout_index(p, bh, odd ? row1 : row0, col);
  const Philox4 r = philox4x32_10(p.dropout_offset + e / 4, 0, p.dropout_seed);
  const uint32_t own0 = odd ? r.v[2] : r.v[0], own1 = odd ? r.v[3] : r.v[1];    // this lane's columns
  const uint32_t give0 = odd ? r.v[0] : r.v[2], give1 = odd ? r.v[1] : r.v[3];  // the partner's
  const uint32_t got0 = __shfl_xor_sync(0xffffffffu, give0, 1), got1 = __shfl_xor_sync(0xffffffffu, give1, 1);
  keep[0] = ((odd ? got0 : own0) >> 8) < p.keep_threshold;
  keep[1] = ((odd ? got1 : own1) >> 8) < p.keep_threshold;
  keep[2] = ((odd ? own0 : got0) >> 8) < p.keep_threshold;
  keep[3] = ((odd ? own1 : got1) >> 8) < p.keep_threshold;
}

// The forward's share of the bits: a lane's four flags of n-tile nt (rows row0/row1, columns
// 2t, 2t + 1) go to bits 8 (nt % 4) + 2t + c of its words for the two rows.
__device__ __forceinline__ void collect_keep_bits(uint32_t (&bits)[2], const bool (&keep)[4], int nt, int t) {
  const int shift = 8 * (nt % 4) + 2 * t;
#pragma unroll
  for (int r = 0; r < 2; ++r)
    bits[r] |= (static_cast<uint32_t>(keep[2 * r]) | static_cast<uint32_t>(keep[2 * r + 1]) << 1) << shift;
}
// After four n-tiles (32 keys from col0, a multiple of 32): the quad's shares ORed into one word
// per row, stored by lane t = 0 (row0) and t = 1 (row1); the bits are cleared. The whole warp
// calls this.
__device__ __forceinline__ void store_keep_bits(const FlashParams& p, int64_t bh, int64_t row0, int64_t row1,
                                                int64_t col0, uint32_t (&bits)[2], int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    bits[r] |= __shfl_xor_sync(0xffffffffu, bits[r], 1);
    bits[r] |= __shfl_xor_sync(0xffffffffu, bits[r], 2);
  }
  const int64_t word = col0 / 32, row = t == 0 ? row0 : row1;
  if (t < 2 && row < p.q_len && word < p.keep_words) p.keep_bits[(bh * p.q_len + row) * p.keep_words + word] = bits[t];
  bits[0] = bits[1] = 0;
}
__device__ __forceinline__ uint32_t keep_word(const FlashParams& p, int64_t bh, int64_t row, int64_t word) {
  return row < p.q_len && word < p.keep_words ? p.keep_bits[(bh * p.q_len + row) * p.keep_words + word] : 0u;
}
// The backward's flags from the bits. Rows (g, g + 8) are queries row0, row1 and columns keys
// col, col + 1 (col even; the dQ kernels).
__device__ __forceinline__ void load_keep_query_rows(const FlashParams& p, int64_t bh, int64_t row0, int64_t row1,
                                                     int64_t col, bool (&keep)[4]) {
  const int shift = static_cast<int>(col % 32);
  const uint32_t w0 = keep_word(p, bh, row0, col / 32), w1 = keep_word(p, bh, row1, col / 32);
  keep[0] = (w0 >> shift) & 1u;
  keep[1] = (w0 >> (shift + 1)) & 1u;
  keep[2] = (w1 >> shift) & 1u;
  keep[3] = (w1 >> (shift + 1)) & 1u;
}
// Rows (g, g + 8) are keys key0 + g, key0 + g + 8 (key0 a multiple of 16, so one word holds both)
// and columns queries q, q + 1 (the dK/dV kernels).
__device__ __forceinline__ void load_keep_key_rows(const FlashParams& p, int64_t bh, int64_t key0, int64_t q, int g,
                                                   bool (&keep)[4]) {
  const int shift = static_cast<int>(key0 % 32) + g;
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const uint32_t w = keep_word(p, bh, q + c, key0 / 32);
    keep[c] = (w >> shift) & 1u;
    keep[2 + c] = (w >> (shift + 8)) & 1u;
  }
}

// --- tensor-core and copy primitives -----------------------------------------------------------

__device__ __forceinline__ unsigned smem_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory, asynchronously; zeros when !valid.
__device__ __forceinline__ void cp_async16(void* smem, const void* global, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem)), "l"(global), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(smem)));
}

// d += a b for one 16x8x16 tile, f32 accumulation.
template <class T>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// acc[n] += a b and acc[n + 1] += a b' for the two n-tiles of one x4 B load (b[0..1], b[2..3]).
template <class T, int N>
__device__ __forceinline__ void mma_pair(float (&acc)[N][4], int n, const uint32_t (&a)[4], const uint32_t (&b)[4]) {
  mma<T>(acc[n], a, b[0], b[1]);
  mma<T>(acc[n + 1], a, b[2], b[3]);
}

// Two floats rounded to T and packed (lo in the low half), as an mma operand register.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// The A fragment of a 16x16 block of 16-bit values held as two C tiles (columns 0-7 in c0,
// 8-15 in c1): P or dS feeding the next product.
template <class T>
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<T>(c0[0], c0[1]);
  a[1] = pack2<T>(c0[2], c0[3]);
  a[2] = pack2<T>(c1[0], c1[1]);
  a[3] = pack2<T>(c1[2], c1[3]);
}

// --- shared-memory tiles -----------------------------------------------------------------------

// A tile of `kTileRows` rows of D elements in shared memory, rows padded to D + 8.
template <int D>
inline constexpr int kStride = D + 8;

// Loads rows [row0, row0 + kTileRows) of a strided operand (rows >= valid_rows as zeros). Thread
// i copies 16-byte chunks i, i + kThreads, ...; where a row holds a divisor of kThreads chunks,
// each step moves a thread down a fixed number of rows at the same column, so the loop is one
// 64-bit add and a 32-bit compare per chunk (this runs once per tile in the backward's inner
// loops, where integer work competes with the tensor cores for issue slots).
template <int D, int kTileRows, class T>
__device__ __forceinline__ void load_tile(T* tile, const T* base, int64_t row_stride, int64_t row0,
                                          int64_t valid_rows) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr int kSteps = (kTileRows * kChunks + kThreads - 1) / kThreads;
  const int limit = static_cast<int>(min(max(valid_rows - row0, int64_t{0}), int64_t{kTileRows}));
  const auto first = static_cast<unsigned>(threadIdx.x);
  if constexpr (kThreads % kChunks == 0 && (kTileRows * kChunks) % kThreads == 0) {
    constexpr int kRowStep = kThreads / kChunks;
    const int r0 = static_cast<int>(first / kChunks), col = static_cast<int>(first % kChunks) * 8;
    const T* src = base + (row0 + r0) * row_stride + col;
    const int64_t step = kRowStep * row_stride;
    T* dst = tile + r0 * kStride<D> + col;
#pragma unroll
    for (int i = 0; i < kSteps; ++i, src += step) {
      const bool valid = r0 + i * kRowStep < limit;
      cp_async16(dst + i * kRowStep * kStride<D>, valid ? src : base, valid);
    }
  } else {
    const T* src = base + row0 * row_stride;
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
      const unsigned c = first + static_cast<unsigned>(i * kThreads);
      if (kSteps * kThreads > kTileRows * kChunks && c >= static_cast<unsigned>(kTileRows * kChunks)) break;
      const int r = static_cast<int>(c / kChunks), col = static_cast<int>(c % kChunks) * 8;
      const bool valid = r < limit;
      cp_async16(tile + r * kStride<D> + col, valid ? src + r * row_stride + col : base, valid);
    }
  }
}

// The A fragment of rows [row0, row0 + 16) x columns [col0, col0 + 16) of a tile.
template <int D, class T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, int row0, int col0, int lane) {
  ldmatrix_x4(a, tile + (row0 + (lane % 8) + ((lane / 8) % 2) * 8) * kStride<D> + col0 + (lane / 16) * 8);
}
// B fragments of two n-tiles whose B[k][n] = tile[n][k] (keys for Q K^T): rows [row0, row0 + 16)
// of the tile are the n index, columns [col0, col0 + 16) the k index. b[0], b[1] for rows
// row0..row0+7; b[2], b[3] for row0+8..row0+15.
template <int D, class T>
__device__ __forceinline__ void load_b(uint32_t (&b)[4], const T* tile, int row0, int col0, int lane) {
  ldmatrix_x4(b, tile + (row0 + (lane % 8) + (lane / 16) * 8) * kStride<D> + col0 + ((lane / 8) % 2) * 8);
}
// B fragments of two n-tiles whose B[k][n] = tile[k][n] (values for P V): rows [row0, row0 + 16)
// are the k index, columns [col0, col0 + 16) the n index. b[0], b[1] for columns col0..col0+7.
template <int D, class T>
__device__ __forceinline__ void load_b_trans(uint32_t (&b)[4], const T* tile, int row0, int col0, int lane) {
  ldmatrix_x4_trans(b, tile + (row0 + (lane % 8) + ((lane / 8) % 2) * 8) * kStride<D> + col0 + (lane / 16) * 8);
}

template <class T>
__device__ __forceinline__ const T* head_base(const void* data, const HeadsLayout& l, int64_t b, int64_t h) {
  return static_cast<const T*>(data) + b * l.batch + h * l.head;
}

// Stores rows (row, row + 8) x columns (col, col + 1) of an accumulator tile, scaled.
template <class T>
__device__ __forceinline__ void store_pair(T* base, int64_t row_stride, int64_t row, int64_t rows, int col, float x0,
                                           float x1) {
  if (row >= rows) return;
  *reinterpret_cast<uint32_t*>(base + row * row_stride + col) = pack2<T>(x0, x1);
}

template <class T, int D>
__device__ __forceinline__ void store_rows(T* base, int64_t row_stride, int64_t row0, int64_t rows,
                                           const float (&acc)[D / 8][4], float scale0, float scale1, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    store_pair(base, row_stride, row0 + g, rows, dt * 8 + 2 * t, acc[dt][0] * scale0, acc[dt][1] * scale0);
    store_pair(base, row_stride, row0 + g + 8, rows, dt * 8 + 2 * t, acc[dt][2] * scale1, acc[dt][3] * scale1);
  }
}

// Stores an accumulator tile, scaled, as f32 rows of D elements (contiguous).
template <int D>
__device__ __forceinline__ void store_rows_f32(float* base, int64_t row0, int64_t rows, const float (&acc)[D / 8][4],
                                               float scale, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    const int col = dt * 8 + 2 * t;
    if (row0 + g < rows)
      *reinterpret_cast<float2*>(base + (row0 + g) * D + col) = make_float2(acc[dt][0] * scale, acc[dt][1] * scale);
    if (row0 + g + 8 < rows)
      *reinterpret_cast<float2*>(base + (row0 + g + 8) * D + col) = make_float2(acc[dt][2] * scale, acc[dt][3] * scale);
  }
}

// 2^x with the hardware approximation (relative error about 2^-22; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Masks in 32-bit tile coordinates, worked out once per row (or key) of a masked tile so that
// each element costs one or two compares. A span [first, end) of a tile's rows or columns.
struct SeenBy {
  int first, end;
};
__device__ __forceinline__ int clamp_to_tile(int64_t x, int tile) {
  return static_cast<int>(min(max(x, int64_t{0}), int64_t{tile}));
}

// Packed documents: batch b's row of document starts (null without documents).
__device__ __forceinline__ const int32_t* doc_starts_of(const FlashParams& p, int64_t b) {
  return p.doc_start ? p.doc_start + b * p.q_len : nullptr;
}
// The first key query row i (< q_len) sees: its document's start, 0 without documents.
__device__ __forceinline__ int64_t first_key(const int32_t* docs, int64_t i) {
  return docs ? max(docs[i], 0) : 0;
}

// Query row i sees the keys [kv0 + first, kv0 + end) of a tile starting at kv0 (nothing when i is
// past the end): from its document's start, below kv_len and, causal, up to i + causal_offset.
__device__ __forceinline__ SeenBy keys_seen(const FlashParams& p, const int32_t* docs, int64_t i, int64_t kv0,
                                            int tile) {
  if (i >= p.q_len) return {0, 0};
  const int64_t end = p.causal ? min(p.kv_len, i + p.causal_offset + 1) : p.kv_len;
  return {clamp_to_tile(first_key(docs, i) - kv0, tile), clamp_to_tile(end - kv0, tile)};
}
// Key j is seen by the queries [q0 + first, q0 + end) of a tile starting at q0 (first = end = 0
// when j is past the end), documents aside: the dK/dV kernels test each query's start.
__device__ __forceinline__ SeenBy queries_seeing(const FlashParams& p, int64_t j, int64_t q0, int tile) {
  if (j >= p.kv_len) return {0, 0};
  return {clamp_to_tile(p.causal ? j - p.causal_offset - q0 : 0, tile), clamp_to_tile(p.q_len - q0, tile)};
}

// The end of a forward block: 16 rows of one warp, (row0 + g, row0 + g + 8), whose running max m
// and (thread-partial) sum l are final. Each row's logsumexp (base 2, +inf for a row that sees
// nothing) goes to p.lse, the normalized output to p.out_data.
template <class T, int D>
__device__ __forceinline__ void finish_forward_rows(const FlashParams& p, int64_t b, int64_t h, int64_t row0,
                                                    const float (&o)[D / 8][4], const float (&m)[2],
                                                    const float (&l)[2], int lane) {
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + lane / 4 + 8 * r;
    const float sum = quad_sum(l[r]);
    inv[r] = sum > 0.0f ? p.keep_scale / sum : 0.0f;  // dropout's scale joins the normalization
    if (lane % 4 == 0 && row < p.q_len) {
      const float lse2 = sum > 0.0f ? m[r] * p.scale_log2 + log2f(sum) : INFINITY;
      p.lse[(b * p.q_heads + h) * p.q_len + row] = lse2;
    }
  }
  T* out = static_cast<T*>(p.out_data) + b * p.out_data_layout.batch + h * p.out_data_layout.head;
  store_rows<T, D>(out, p.out_data_layout.row, row0, p.q_len, o, inv[0], inv[1], lane);
}

// The end of a dK/dV block: 16 key rows of one warp from row0. With grouped heads the query
// head's share in f32 (flash_group_sum_kernel adds the group's), otherwise the gradients.
template <class T, int D>
__device__ __forceinline__ void finish_key_rows(const FlashParams& p, int64_t b, int64_t h, int64_t kvh, int64_t row0,
                                                const float (&dk)[D / 8][4], const float (&dv)[D / 8][4], int lane) {
  if (p.grad_k_partial) {
    const int64_t at = (b * p.q_heads + h) * p.kv_len * D;
    store_rows_f32<D>(p.grad_k_partial + at, row0, p.kv_len, dk, p.scale, lane);
    store_rows_f32<D>(p.grad_v_partial + at, row0, p.kv_len, dv, 1.0f, lane);
    return;
  }
  T* grad_k = static_cast<T*>(p.grad_k) + b * p.grad_k_layout.batch + kvh * p.grad_k_layout.head;
  T* grad_v = static_cast<T*>(p.grad_v) + b * p.grad_v_layout.batch + kvh * p.grad_v_layout.head;
  store_rows<T, D>(grad_k, p.grad_k_layout.row, row0, p.kv_len, dk, p.scale, p.scale, lane);
  store_rows<T, D>(grad_v, p.grad_v_layout.row, row0, p.kv_len, dv, 1.0f, 1.0f, lane);
}

// The grids of the tiled kernels are (heads, batch, tiles): blocks launch in that order, the tile
// index varying slowest, so a causal grid can start its longest blocks everywhere before any short
// one and its last wave holds short blocks (longest first). A query tile's work grows with its
// index: causal grids take the last first. Key tiles' work shrinks with theirs.
__device__ __forceinline__ int64_t query_block_of(bool causal) {
  return causal ? gridDim.z - 1 - blockIdx.z : blockIdx.z;
}

// The document start of the last row of the query tile [q0, q0 + rows): the tile's largest, so a
// key tile from kv0 needs the per-element mask when it is above kv0 (0 without documents).
__device__ __forceinline__ int64_t last_first_key(const FlashParams& p, const int32_t* docs, int64_t q0, int rows) {
  return first_key(docs, min(q0 + rows, p.q_len) - 1);
}

// The keys a block of queries [q0, q0 + rows) attends to: [begin, end), begin the start of the
// key tile (of `tile` keys) that holds the block's smallest document start, so that key tiles
// below every document of the block are skipped; last_first_key for key_tile_masked.
struct BlockKeys {
  int64_t begin, end, last_first_key;
};
__device__ __forceinline__ BlockKeys block_keys(const FlashParams& p, const int32_t* docs, int64_t q0, int rows,
                                                int tile) {
  return {first_key(docs, q0) / tile * tile, p.causal ? min(p.kv_len, q0 + rows + p.causal_offset) : p.kv_len,
          last_first_key(p, docs, q0, rows)};
}
// Whether the key tile [kv0, kv0 + tile) of such a block needs the per-element mask: it crosses
// kv_len, the causal diagonal of the block's first row or a document start of the block's.
__device__ __forceinline__ bool key_tile_masked(const FlashParams& p, const BlockKeys& keys, int64_t q0, int64_t kv0,
                                                int tile) {
  return kv0 + tile > p.kv_len || (p.causal && kv0 + tile - 1 > q0 + p.causal_offset) || keys.last_first_key > kv0;
}

// Whether a dK/dV block's keys (below key_end) are seen from the query tile at q0 on: q0 is a row
// and, with documents, the tile's first row (the smallest start) starts below key_end. Starts grow
// with q0, so the block's loop over query tiles ends at the first tile that fails.
__device__ __forceinline__ bool queries_reach(const FlashParams& p, const int32_t* docs, int64_t q0, int64_t key_end) {
  return q0 < p.q_len && first_key(docs, q0) < key_end;
}

// Launches a flash kernel with `smem` bytes of dynamic shared memory (raising the kernel's limit
// above the default 48 KiB), all of the unified L1 as shared memory when the blocks need it
// (3 blocks of the mma.sync backward kernels take about 170 KiB).
template <class Kernel>
void launch_flash(Kernel kernel, dim3 grid, int threads, size_t smem, const FlashParams& p, cudaStream_t stream) {
  GENESIS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  GENESIS_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  kernel<<<grid, threads, smem, stream>>>(p);
  GENESIS_CUDA_LAUNCH_CHECK();
}

// Tiles of `per_block` rows that cover n rows: a grid dimension.
inline unsigned blocks_of(int64_t n, int64_t per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

// sum += a[e] * b[e] over one 16-byte pack of each (8 16-bit elements), in element order.
template <class T>
__device__ __forceinline__ float fma_pack(const T* a, const T* b, float sum) {
  const uint4 av = *reinterpret_cast<const uint4*>(a);
  const uint4 bv = *reinterpret_cast<const uint4*>(b);
  const T* ae = reinterpret_cast<const T*>(&av);
  const T* be = reinterpret_cast<const T*>(&bv);
#pragma unroll
  for (int e = 0; e < 8; ++e) sum = fmaf(to_acc<float>(ae[e]), to_acc<float>(be[e]), sum);
  return sum;
}

// The wgmma kernels (sm90/flash_attention_wgmma.cu, built for sm_90a when GENESIS_WITH_SM90A):
// the forward at head_dim 64 and 128, the backward's dK/dV and dQ kernels at 64; T is
// __nv_bfloat16 or __half. The backward's delta (and the grouped heads' sum) stay with the
// caller.
template <class T, int D>
void forward_wgmma(const FlashParams& p, int64_t batch, cudaStream_t stream);
template <class T, int D>
void backward_dkdv_wgmma(const FlashParams& p, int64_t batch, cudaStream_t stream);
template <class T, int D>
void backward_dq_wgmma(const FlashParams& p, int64_t batch, cudaStream_t stream);

}  // namespace genesis::kernels::cuda::flash
