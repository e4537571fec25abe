// Flash attention on Hopper's warpgroup tensor cores (wgmma, sm_90a), head_dim 64 and 128: the
// schedule of flash_attention.cu (same masks, base-2 scores, logsumexp and delta, the same
// deterministic split of the backward into a dK/dV and a dQ kernel) with each block one
// warpgroup of 128 threads that owns 64 rows. Operands stream into shared memory with cp.async,
// double-buffered, in the 128-byte swizzle wgmma reads (wgmma.cuh); the scores and
// probabilities stay in registers, where a product's accumulator is the next one's A fragment.
// Several blocks share an SM, so one block's softmax overlaps another's products.
#include "kernels/cuda/flash_tiles.cuh"
#include "kernels/cuda/sm90/wgmma.cuh"

namespace genesis::kernels::cuda::flash {

namespace {

constexpr int kGroupThreads = 128;  // one warpgroup per block
constexpr int kGroupRows = 64;      // rows of the block's own operand

__device__ __forceinline__ void cp_async16_to(uint32_t smem, const void* global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(global), "r"(valid ? 16 : 0));
}

// Loads rows [row0, row0 + R) of a strided operand into a swizzled tile (rows past valid_rows as
// zeros). Thread i copies chunk i % (D / 8) of rows i / (D / 8), + kRowStep, ...: the row step is
// a multiple of 8, so the swizzled column stays fixed and each step is one add.
template <int D, int R, class T>
__device__ __forceinline__ void load_swizzled(uint32_t tile, const T* base, int64_t row_stride, int64_t row0,
                                              int64_t valid_rows) {
  constexpr int kChunks = D / 8;
  constexpr int kRowStep = kGroupThreads / kChunks;
  static_assert(kRowStep % 8 == 0 && R % kRowStep == 0);
  const int limit = static_cast<int>(min(max(valid_rows - row0, int64_t{0}), int64_t{R}));
  const int r0 = static_cast<int>(threadIdx.x) / kChunks, chunk = static_cast<int>(threadIdx.x) % kChunks;
  const T* src = base + (row0 + r0) * row_stride + chunk * 8;
  const int64_t step = kRowStep * row_stride;
  const uint32_t dst = tile + wgmma::swizzled(R, r0, chunk);
#pragma unroll
  for (int i = 0; i < R / kRowStep; ++i, src += step) {
    const bool valid = r0 + i * kRowStep < limit;
    cp_async16_to(dst + i * kRowStep * 128, valid ? src : base, valid);
  }
}

// The block's dynamic shared memory, 1024-byte aligned (the launch adds 1 KiB of slack).
__device__ __forceinline__ uint32_t aligned_smem(unsigned char* smem) {
  return (smem_address(smem) + 1023u) & ~1023u;
}

template <class T, int D>
constexpr uint32_t tile_bytes(int rows) {
  return static_cast<uint32_t>(rows * D * sizeof(T));
}

// The backward kernels' shared memory (addresses): the block's own two operands (kGroupRows rows
// each; K and V for dK/dV, Q and dO for dQ), then the two it streams, two buffers of kTile rows
// each, then f32 rows from the fifth address.
template <class T, int D, int kTile>
__device__ __forceinline__ std::array<uint32_t, 5> swizzled_backward_tiles(unsigned char* smem) {
  const uint32_t own = aligned_smem(smem), streamed = own + 2 * tile_bytes<T, D>(kGroupRows);
  return {own, own + tile_bytes<T, D>(kGroupRows), streamed, streamed + 2 * tile_bytes<T, D>(kTile),
          streamed + 4 * tile_bytes<T, D>(kTile)};
}

// The top of a double-buffered tile loop: waits for this tile's loads (the only ones in flight)
// and makes them visible to wgmma; once every warp is done with the other buffer (the previous
// tile's), starts the next tile's loads into it when there is one.
template <class LoadNext>
__device__ __forceinline__ void wait_then_prefetch(bool has_next, LoadNext&& load_next) {
  cp_async_wait<0>();
  wgmma::fence_shared_for_async();
  __syncthreads();
  if (has_next) load_next();
  cp_async_commit();
}

// acc = A B^T over the head dimension as one wgmma group, not waited for: A and B K-major tiles
// of kRowsA and kRowsB rows.
template <class T, int D, int kRowsA, int kRowsB>
__device__ __forceinline__ void mma_ss_group(float (&acc)[kRowsB / 8][4], uint32_t a, uint32_t b) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    wgmma::mma_ss<T>(acc, wgmma::k_major(a, kRowsA, 0, kk), wgmma::k_major(b, kRowsB, 0, kk), kk > 0);
  wgmma::commit();
}

// The backward's first products, S = A B^T then dP = A' B'^T, as two groups: returns once S has
// landed, dP still in flight (wait<0> or the next group's wait<1>, then fence_accumulator).
template <class T, int D, int kRowsA, int kRowsB>
__device__ __forceinline__ void scores_then_grads(float (&s)[kRowsB / 8][4], float (&dp)[kRowsB / 8][4], uint32_t a,
                                                  uint32_t b, uint32_t a_dp, uint32_t b_dp) {
  wgmma::fence();
  mma_ss_group<T, D, kRowsA, kRowsB>(s, a, b);
  mma_ss_group<T, D, kRowsA, kRowsB>(dp, a_dp, b_dp);
  wgmma::wait<1>();
  wgmma::fence_accumulator(s);
}

// The A fragments of all 16-column blocks of C tiles (P or dS feeding the next product).
template <class T, int N>
__device__ __forceinline__ void c_to_a_all(uint32_t (&a)[N / 2][4], const float (&c)[N][4]) {
#pragma unroll
  for (int ks16 = 0; ks16 < N / 2; ++ks16) c_to_a<T>(a[ks16], c[2 * ks16], c[2 * ks16 + 1]);
}

// acc += A B over kRows as one wgmma group, not waited for (after the fence for A's registers):
// A as register fragments, B an MN-major tile of kRows rows.
template <class T, int kRows, int N>
__device__ __forceinline__ void mma_rs_group(float (&acc)[N][4], const uint32_t (&a)[kRows / 16][4], uint32_t b) {
  wgmma::fence();
#pragma unroll
  for (int ks16 = 0; ks16 < kRows / 16; ++ks16) wgmma::mma_rs<T>(acc, a[ks16], wgmma::mn_major(b, kRows, ks16));
  wgmma::commit();
}

// --- forward -----------------------------------------------------------------------------------

// Keys per tile: 64, so that five blocks fit on an SM at head_dim 64 (96 registers) and four at
// 128. At the GPT-2 shape (H100) the forward took 0.109 ms with 128 keys a tile and three blocks,
// 0.104 with 64 and four, 0.097 with five.
constexpr int kForwardKeys = 64;
template <int D>
inline constexpr int kForwardBlocksPerSm = D <= 64 ? 5 : 4;

// kDropout: the probabilities multiplying V are masked by the dropout draws (FlashParams); the
// row sums are not, and finish_forward_rows scales by 1 / keep_prob.
template <class T, int D, bool kDropout>
__global__ void __launch_bounds__(kGroupThreads, kForwardBlocksPerSm<D>) flash_forward_wgmma_kernel(FlashParams p) {
  constexpr int kM = kGroupRows, kN = kForwardKeys;
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t qs = aligned_smem(smem);
  const uint32_t k_tiles = qs + tile_bytes<T, D>(kM);  // two buffers of kN rows
  const uint32_t v_tiles = k_tiles + 2 * tile_bytes<T, D>(kN);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int t = lane % 4;
  const int64_t q_block = query_block_of(p.causal);
  const int64_t h = blockIdx.x, b = blockIdx.y, kvh = h / (p.q_heads / p.kv_heads);
  const int64_t q0 = q_block * kM;
  const T* q = head_base<T>(p.q, p.q_layout, b, h);
  const KeyValueRows<T> kv = key_value_rows<T>(p, b, kvh);
  const int32_t* docs = doc_starts_of(p, b);
  const BlockKeys keys = block_keys(p, docs, q0, kM, kN);
  auto load_keys = [&](int64_t kv0, int buffer) {
    load_swizzled<D, kN>(k_tiles + buffer * tile_bytes<T, D>(kN), kv.k, p.k_layout.row, kv0, p.kv_len);
    load_swizzled<D, kN>(v_tiles + buffer * tile_bytes<T, D>(kN), kv.v, p.v_layout.row, kv0, p.kv_len);
  };
  load_swizzled<D, kM>(qs, q, p.q_layout.row, q0, p.q_len);
  load_keys(keys.begin, 0);
  cp_async_commit();

  const int64_t row[2] = {q0 + warp * 16 + lane / 4, q0 + warp * 16 + lane / 4 + 8};
  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  int buffer = 0;
  for (int64_t kv0 = keys.begin; kv0 < keys.end; kv0 += kN, buffer ^= 1) {
    wait_then_prefetch(kv0 + kN < keys.end, [&] { load_keys(kv0 + kN, buffer ^ 1); });

    const uint32_t ks = k_tiles + buffer * tile_bytes<T, D>(kN);
    float s[kN / 8][4] = {};
    wgmma::fence();
    mma_ss_group<T, D, kM, kN>(s, qs, ks);
    wgmma::wait<0>();
    wgmma::fence_accumulator(s);

    if (key_tile_masked(p, keys, q0, kv0, kN)) mask_keys<kN>(p, docs, s, row, kv0, t);
    float base[2];
    rescale_rows<D, kN>(p, s, o, m, l, base);
    [[maybe_unused]] uint32_t kept_bits[2] = {0u, 0u};  // dropout: this lane's share of the mask's words
    exponentiate_rows<kDropout, kN>(p, s, l, base, kept_bits, b * p.q_heads + h, row, kv0, t);
    uint32_t pa[kN / 16][4];
    c_to_a_all<T>(pa, s);
    mma_rs_group<T, kN>(o, pa, v_tiles + buffer * tile_bytes<T, D>(kN));
    wgmma::wait<0>();
    wgmma::fence_accumulator(o);
  }
  cp_async_wait<0>();

  finish_forward_rows<T, D>(p, b, h, q0 + warp * 16, o, m, l, lane);
}

// --- backward ----------------------------------------------------------------------------------

constexpr int kBackwardTile = 64;  // rows of the streamed operand per tile

// dK and dV of 64 keys of one kv head from one query head (the schedule of the mma.sync
// kernel): S^T = K Q^T and dP^T = V dO^T per tile of 64 queries, then dV += P^T dO and
// dK += dS^T Q with P^T and dS^T as register fragments.
// kDropout: P^T and dP^T are masked by the forward's dropout draws and scaled by 1 / keep_prob
// (the mask kept as one bit per accumulator element between the two).
template <class T, int D, bool kDropout>
__global__ void __launch_bounds__(kGroupThreads, 3) flash_backward_dkdv_wgmma_kernel(FlashParams p) {
  constexpr int kK = kGroupRows, kM = kBackwardTile;
  extern __shared__ __align__(1024) unsigned char smem[];
  const auto [ks, vs, q_tiles, go_tiles, rows] = swizzled_backward_tiles<T, D, kM>(smem);
  auto* lse_tiles = reinterpret_cast<float*>(smem + (rows - smem_address(smem)));
  float* delta_tiles = lse_tiles + 2 * kM;
  auto* doc_tiles = reinterpret_cast<int32_t*>(delta_tiles + 2 * kM);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int t = lane % 4;
  const int64_t kv0 = static_cast<int64_t>(blockIdx.z) * kK;  // key block 0, the longest, first
  const int64_t h = blockIdx.x, b = blockIdx.y, kvh = h / (p.q_heads / p.kv_heads);
  const QueryRows<T> queries = query_rows<T>(p, b, h);
  auto load_queries = [&](int64_t q0, int buffer) {
    load_swizzled<D, kM>(q_tiles + buffer * tile_bytes<T, D>(kM), queries.q, p.q_layout.row, q0, p.q_len);
    load_swizzled<D, kM>(go_tiles + buffer * tile_bytes<T, D>(kM), queries.go, p.grad_out_layout.row, q0, p.q_len);
    load_lse_delta<kM>(lse_tiles + buffer * kM, delta_tiles + buffer * kM, doc_tiles + buffer * kM, queries, q0,
                       p.q_len);
  };
  static_assert(2 * kM == kGroupThreads);
  const KeyValueRows<T> kv = key_value_rows<T>(p, b, kvh);
  load_swizzled<D, kK>(ks, kv.k, p.k_layout.row, kv0, p.kv_len);
  load_swizzled<D, kK>(vs, kv.v, p.v_layout.row, kv0, p.kv_len);
  const int64_t first_q = (p.causal ? max(int64_t{0}, kv0 - p.causal_offset) : 0) / kM * kM;
  const int64_t key_end = kv0 + kK;
  if (queries_reach(p, queries.docs, first_q, key_end)) load_queries(first_q, 0);
  cp_async_commit();

  const int64_t key[2] = {kv0 + warp * 16 + lane / 4, kv0 + warp * 16 + lane / 4 + 8};
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  int buffer = 0;
  for (int64_t q0 = first_q; queries_reach(p, queries.docs, q0, key_end); q0 += kM, buffer ^= 1) {
    wait_then_prefetch(queries_reach(p, queries.docs, q0 + kM, key_end), [&] { load_queries(q0 + kM, buffer ^ 1); });
    const uint32_t qs = q_tiles + buffer * tile_bytes<T, D>(kM);
    const uint32_t dos = go_tiles + buffer * tile_bytes<T, D>(kM);
    const float* lse_s = lse_tiles + buffer * kM;
    const float* delta_s = delta_tiles + buffer * kM;
    const int32_t* doc_s = doc_tiles + buffer * kM;

    // S^T = K Q^T and dP^T = V dO^T as two groups: P^T is worked out while dP^T is computed,
    // and dV += P^T dO runs while dS^T is.
    float s[kM / 8][4] = {}, dp[kM / 8][4] = {};
    scores_then_grads<T, D, kK, kM>(s, dp, ks, qs, vs, dos);

    const bool masked = q0 + kM > p.q_len || kv0 + kK > p.kv_len || (p.causal && kv0 + kK - 1 > q0 + p.causal_offset) ||
                        last_first_key(p, queries.docs, q0, kM) > kv0;
    std::array<SeenBy, 2> seen = {};
    if (masked) seen = queries_seeing_rows<true>(p, key, q0, kM);
    static_assert(kM / 8 * 4 <= 32);
    [[maybe_unused]] uint32_t kept = 0;  // dropout: bit 4 nt + e keeps s[nt][e]
    auto probabilities = [&](auto mask) {  // P^T in place of S^T
#pragma unroll
      for (int nt = 0; nt < kM / 8; ++nt) {
        const float2 lse2 = *reinterpret_cast<const float2*>(lse_s + nt * 8 + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = nt * 8 + 2 * t + (e & 1);
          const bool hidden =
              decltype(mask)::value && (outside(seen[e / 2], qi) || (queries.docs && doc_s[qi] > key[e / 2]));
          s[nt][e] = probability(p, s[nt][e], (e & 1) ? lse2.y : lse2.x, hidden);
        }
        if constexpr (kDropout) {
          bool keep[4];
          load_keep_key_rows(p, b * p.q_heads + h, kv0 + warp * 16, q0 + nt * 8 + 2 * t, lane / 4, keep);
#pragma unroll
          for (int e = 0; e < 4; ++e) kept |= static_cast<uint32_t>(keep[e]) << (4 * nt + e);
        }
      }
    };
    with_mask(masked, probabilities);
    uint32_t pa[kM / 16][4], dsa[kM / 16][4];
#pragma unroll
    for (int ks16 = 0; ks16 < kM / 16; ++ks16) {
      if constexpr (kDropout) {  // dV takes the dropped probabilities
        float dropped[2][4];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const int nt = 2 * ks16 + e / 4;
          dropped[e / 4][e % 4] = apply_dropout<true>(p, s[nt][e % 4], (kept >> (4 * nt + e % 4)) & 1u);
        }
        c_to_a<T>(pa[ks16], dropped[0], dropped[1]);
      } else {
        c_to_a<T>(pa[ks16], s[2 * ks16], s[2 * ks16 + 1]);
      }
    }
    mma_rs_group<T, kM>(dv, pa, dos);
    wgmma::wait<1>();  // dP^T (the groups complete in order)
    wgmma::fence_accumulator(dp);
#pragma unroll
    for (int nt = 0; nt < kM / 8; ++nt) {  // dS^T = P^T (dP^T - delta); P^T is 0 where masked
      const float2 delta2 = *reinterpret_cast<const float2*>(delta_s + nt * 8 + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float dpe = apply_dropout<kDropout>(p, dp[nt][e], (kept >> (4 * nt + e)) & 1u);
        dp[nt][e] = s[nt][e] * (dpe - ((e & 1) ? delta2.y : delta2.x));
      }
    }
    c_to_a_all<T>(dsa, dp);
    mma_rs_group<T, kM>(dk, dsa, qs);
    wgmma::wait<0>();
    wgmma::fence_accumulator(dv);
    wgmma::fence_accumulator(dk);
  }
  cp_async_wait<0>();
  finish_key_rows<T, D>(p, b, h, kvh, kv0 + warp * 16, dk, dv, lane);
}

// dQ of 64 queries of one head: S = Q K^T and dP = dO V^T per tile of 64 keys, then
// dQ += dS K with dS as register fragments.
// kDropout: dP is masked by the forward's dropout draws and scaled by 1 / keep_prob.
template <class T, int D, bool kDropout>
__global__ void __launch_bounds__(kGroupThreads, 4) flash_backward_dq_wgmma_kernel(FlashParams p) {
  constexpr int kM = kGroupRows, kN = kBackwardTile;
  extern __shared__ __align__(1024) unsigned char smem[];
  const auto [qs, dos, k_tiles, v_tiles, rows] = swizzled_backward_tiles<T, D, kN>(smem);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int t = lane % 4;
  const int64_t q_block = query_block_of(p.causal);
  const int64_t h = blockIdx.x, b = blockIdx.y, kvh = h / (p.q_heads / p.kv_heads);
  const int64_t q0 = q_block * kM;
  const KeyValueRows<T> kv = key_value_rows<T>(p, b, kvh);
  const QueryRows<T> queries = query_rows<T>(p, b, h);
  const BlockKeys keys = block_keys(p, queries.docs, q0, kM, kN);
  auto load_keys = [&](int64_t kv0, int buffer) {
    load_swizzled<D, kN>(k_tiles + buffer * tile_bytes<T, D>(kN), kv.k, p.k_layout.row, kv0, p.kv_len);
    load_swizzled<D, kN>(v_tiles + buffer * tile_bytes<T, D>(kN), kv.v, p.v_layout.row, kv0, p.kv_len);
  };
  load_swizzled<D, kM>(qs, queries.q, p.q_layout.row, q0, p.q_len);
  load_swizzled<D, kM>(dos, queries.go, p.grad_out_layout.row, q0, p.q_len);
  load_keys(keys.begin, 0);
  cp_async_commit();
  // delta = rowsum(dO * O) of the block's rows, two threads a row, kept for the dK/dV kernel
  // (which runs after this one) and through shared memory for this one's threads.
  float* delta_rows = reinterpret_cast<float*>(smem + (rows - smem_address(smem)));
  {
    const int r = static_cast<int>(threadIdx.x / 2), half = static_cast<int>(threadIdx.x % 2);
    const int64_t i = q0 + r;
    float sum = 0.0f;
    if (i < p.q_len) {
      const T* o = head_base<T>(p.out, p.out_layout, b, h) + i * p.out_layout.row + half * (D / 2);
      const T* go = queries.go + i * p.grad_out_layout.row + half * (D / 2);
#pragma unroll
      for (int d = 0; d < D / 2; d += 8) sum = fma_pack(o + d, go + d, sum);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if (half == 0) {
      delta_rows[r] = sum;
      if (i < p.q_len) p.delta[(b * p.q_heads + h) * p.q_len + i] = sum;
    }
  }
  __syncthreads();
  const int64_t row[2] = {q0 + warp * 16 + lane / 4, q0 + warp * 16 + lane / 4 + 8};
  float lse[2], delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lse[r] = row[r] < p.q_len ? queries.lse[row[r]] : INFINITY;
    delta[r] = row[r] < p.q_len ? delta_rows[row[r] - q0] : 0.0f;
  }
  float dq[D / 8][4] = {};
  int buffer = 0;
  for (int64_t kv0 = keys.begin; kv0 < keys.end; kv0 += kN, buffer ^= 1) {
    wait_then_prefetch(kv0 + kN < keys.end, [&] { load_keys(kv0 + kN, buffer ^ 1); });
    const uint32_t ks = k_tiles + buffer * tile_bytes<T, D>(kN);
    const uint32_t vs = v_tiles + buffer * tile_bytes<T, D>(kN);

    // S = Q K^T and dP = dO V^T as two groups: P is worked out while dP is computed.
    float s[kN / 8][4] = {}, dp[kN / 8][4] = {};
    scores_then_grads<T, D, kM, kN>(s, dp, qs, ks, dos, vs);

    static_assert(kN / 8 * 4 <= 32);
    [[maybe_unused]] uint32_t kept = 0;  // dropout: bit 4 nt + e keeps dP[nt][e]
    auto probabilities = [&](auto masked) {  // P in place of S
      const std::array<SeenBy, 2> seen = keys_seen_rows<decltype(masked)::value>(p, queries.docs, row, kv0, kN);
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool hidden = decltype(masked)::value && outside(seen[e / 2], nt * 8 + 2 * t + (e & 1));
          s[nt][e] = probability(p, s[nt][e], lse[e / 2], hidden);
        }
        if constexpr (kDropout) {  // drawn while dP is computed
          bool keep[4];
          load_keep_query_rows(p, b * p.q_heads + h, row[0], row[1], kv0 + nt * 8 + 2 * t, keep);
#pragma unroll
          for (int e = 0; e < 4; ++e) kept |= static_cast<uint32_t>(keep[e]) << (4 * nt + e);
        }
      }
    };
    with_mask(key_tile_masked(p, keys, q0, kv0, kN), probabilities);
    wgmma::wait<0>();
    wgmma::fence_accumulator(dp);
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        dp[nt][e] = s[nt][e] * (apply_dropout<kDropout>(p, dp[nt][e], (kept >> (4 * nt + e)) & 1u) - delta[e / 2]);
    }
    uint32_t dsa[kN / 16][4];
    c_to_a_all<T>(dsa, dp);
    mma_rs_group<T, kN>(dq, dsa, ks);
    wgmma::wait<0>();
    wgmma::fence_accumulator(dq);
  }
  cp_async_wait<0>();
  T* grad_q = static_cast<T*>(p.grad_q) + b * p.grad_q_layout.batch + h * p.grad_q_layout.head;
  store_rows<T, D>(grad_q, p.grad_q_layout.row, q0 + warp * 16, p.q_len, dq, p.scale, p.scale, lane);
}

template <class Kernel>
void launch_wgmma(Kernel kernel, dim3 grid, uint32_t smem, const FlashParams& p, cudaStream_t stream) {
  launch_flash(kernel, grid, kGroupThreads, smem + 1024, p, stream);  // + 1 KiB of alignment slack
}

}  // namespace

template <class T, int D>
void forward_wgmma(const FlashParams& p, int64_t batch, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.q_heads), static_cast<unsigned>(batch), blocks_of(p.q_len, kGroupRows));
  const uint32_t smem = tile_bytes<T, D>(kGroupRows) + 4 * tile_bytes<T, D>(kForwardKeys);
  launch_wgmma(p.dropout ? flash_forward_wgmma_kernel<T, D, true> : flash_forward_wgmma_kernel<T, D, false>, grid, smem,
               p, stream);
}

template <class T, int D>
void backward_dkdv_wgmma(const FlashParams& p, int64_t batch, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.q_heads), static_cast<unsigned>(batch), blocks_of(p.kv_len, kGroupRows));
  const uint32_t smem =
      2 * tile_bytes<T, D>(kGroupRows) + 4 * tile_bytes<T, D>(kBackwardTile) + 6 * kBackwardTile * sizeof(float);
  launch_wgmma(p.dropout ? flash_backward_dkdv_wgmma_kernel<T, D, true> : flash_backward_dkdv_wgmma_kernel<T, D, false>,
               grid, smem, p, stream);
}

template <class T, int D>
void backward_dq_wgmma(const FlashParams& p, int64_t batch, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.q_heads), static_cast<unsigned>(batch), blocks_of(p.q_len, kGroupRows));
  const uint32_t smem =
      2 * tile_bytes<T, D>(kGroupRows) + 4 * tile_bytes<T, D>(kBackwardTile) + kGroupRows * sizeof(float);
  launch_wgmma(p.dropout ? flash_backward_dq_wgmma_kernel<T, D, true> : flash_backward_dq_wgmma_kernel<T, D, false>,
               grid, smem, p, stream);
}

template void forward_wgmma<__nv_bfloat16, 64>(const FlashParams&, int64_t, cudaStream_t);
template void forward_wgmma<__half, 64>(const FlashParams&, int64_t, cudaStream_t);
template void forward_wgmma<__nv_bfloat16, 128>(const FlashParams&, int64_t, cudaStream_t);
template void forward_wgmma<__half, 128>(const FlashParams&, int64_t, cudaStream_t);
template void backward_dkdv_wgmma<__nv_bfloat16, 64>(const FlashParams&, int64_t, cudaStream_t);
template void backward_dkdv_wgmma<__half, 64>(const FlashParams&, int64_t, cudaStream_t);
template void backward_dq_wgmma<__nv_bfloat16, 64>(const FlashParams&, int64_t, cudaStream_t);
template void backward_dq_wgmma<__half, 64>(const FlashParams&, int64_t, cudaStream_t);

}  // namespace genesis::kernels::cuda::flash
