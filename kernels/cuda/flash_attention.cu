// Flash attention (FlashAttention-2's schedule) on mma.sync m16n8k16 tensor cores. A block of
// 4 warps owns 64 rows (16 per warp); the other operand streams through shared memory in
// tiles loaded with cp.async, rows padded by 8 elements so that ldmatrix reads are free of
// bank conflicts (fragment layouts: flash_common.cuh). On sm_90a, head_dim 64 and 128 take the
// wgmma kernels of sm90/flash_attention_wgmma.cu instead.
#include <cstdlib>
#include <string_view>

#include "kernels/cuda/flash_tiles.cuh"
#include "libgenesis/core/error.h"

namespace genesis::kernels::cuda {

namespace {

using namespace flash;

// The backward kernels' shared memory: the block's own two operands (kRows rows each;
// K and V for dK/dV, Q and dO for dQ), then the two it streams, two buffers of kTile rows each.
template <class T, int D, int kTile>
__device__ __forceinline__ std::array<T*, 4> backward_tiles(unsigned char* smem) {
  T* own = reinterpret_cast<T*>(smem);
  T* streamed = own + 2 * kRows * kStride<D>;
  return {own, own + kRows * kStride<D>, streamed, streamed + 2 * kTile * kStride<D>};
}

// The top of a double-buffered tile loop: starts the next tile's loads into the other buffer
// when there is one, then waits for this tile's (every thread's, so that all of it has landed).
template <class LoadNext>
__device__ __forceinline__ void prefetch_and_wait(bool has_next, LoadNext&& load_next) {
  if (has_next) {
    load_next();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}

// Two products over the n-tiles of k slice k (16 wide): acc0 += a0 B0 and acc1 += a1 B1, with
// B0 from tile0 and B1 from tile1, both fragments loaded before either product. B[k][n] is
// tile[n][k] (load_b, Q K^T-like) or, kTrans, tile[k][n] (load_b_trans, P V-like).
template <class T, int D, bool kTrans, int N>
__device__ __forceinline__ void mma_two(float (&acc0)[N][4], float (&acc1)[N][4], const uint32_t (&a0)[4],
                                        const uint32_t (&a1)[4], const T* tile0, const T* tile1, int k, int lane) {
#pragma unroll
  for (int n = 0; n < N; n += 2) {
    uint32_t b0[4], b1[4];
    if constexpr (kTrans) {
      load_b_trans<D>(b0, tile0, k * 16, n * 8, lane);
      load_b_trans<D>(b1, tile1, k * 16, n * 8, lane);
    } else {
      load_b<D>(b0, tile0, n * 8, k * 16, lane);
      load_b<D>(b1, tile1, n * 8, k * 16, lane);
    }
    mma_pair<T>(acc0, n, a0, b0);
    mma_pair<T>(acc1, n, a1, b1);
  }
}

// --- forward -----------------------------------------------------------------------------------

// Query row tiles of 16 per warp in the forward: two up to head_dim 64, so each key and value
// fragment read from shared memory feeds two products (and a block's 128 queries share each
// tile load); one above, where the accumulators would not fit.
template <int D>
inline constexpr int kForwardTiles = D <= 64 ? 2 : 1;
template <int D>
inline constexpr int kForwardRows = 16 * kForwardTiles<D>* kWarps;

// kDropout: the probabilities multiplying V are masked by the dropout draws (FlashParams); the
// row sums are not, and finish_forward_rows scales by 1 / keep_prob.
template <class T, int D, bool kDropout>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(FlashParams p) {
  constexpr int kN = 64;  // keys per tile
  constexpr int MT = kForwardTiles<D>, kM = kForwardRows<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);
  T* ks = qs + kM * kStride<D>;
  T* vs = ks + kN * kStride<D>;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, t = lane % 4;
  const int64_t q_block = query_block_of(p.causal);
  const int64_t h = blockIdx.x, b = blockIdx.y, kvh = h / (p.q_heads / p.kv_heads);
  const int64_t q0 = q_block * kM;
  const T* q = head_base<T>(p.q, p.q_layout, b, h);
  const KeyValueRows<T> kv = key_value_rows<T>(p, b, kvh);
  const int32_t* docs = doc_starts_of(p, b);
  const BlockKeys keys = block_keys(p, docs, q0, kM, kN);

  load_tile<D, kM>(qs, q, p.q_layout.row, q0, p.q_len);
  cp_async_commit();
  load_tile<D, kN>(ks, kv.k, p.k_layout.row, keys.begin, p.kv_len);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
  // Warp w owns rows [16 (w MT + mt), + 16) of the block's for mt < MT.
  uint32_t qf[MT][D / 16][4];
  int64_t row[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int first = (warp * MT + mt) * 16;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) load_a<D>(qf[mt][kk], qs, first, kk * 16, lane);
    row[mt][0] = q0 + first + g;
    row[mt][1] = q0 + first + g + 8;
  }

  float o[MT][D / 8][4] = {};
  float m[MT][2], l[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }
  for (int64_t kv0 = keys.begin; kv0 < keys.end; kv0 += kN) {
    load_tile<D, kN>(vs, kv.v, p.v_layout.row, kv0, p.kv_len);
    cp_async_commit();
    cp_async_wait<1>();  // this tile's keys
    __syncthreads();
    float s[MT][kN / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int nt = 0; nt < kN / 8; nt += 2) {
        uint32_t kb[4];
        load_b<D>(kb, ks, nt * 8, kk * 16, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_pair<T>(s[mt], nt, qf[mt][kk], kb);
      }
    }
    __syncthreads();  // every warp is done with the keys: the next tile may land
    if (kv0 + kN < keys.end) load_tile<D, kN>(ks, kv.k, p.k_layout.row, kv0 + kN, p.kv_len);
    cp_async_commit();

    const bool masked = key_tile_masked(p, keys, q0, kv0, kN);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if (masked) mask_keys<kN>(p, docs, s[mt], row[mt], kv0, t);
      float base[2];
      rescale_rows<D, kN>(p, s[mt], o[mt], m[mt], l[mt], base);
      [[maybe_unused]] uint32_t kept_bits[2] = {0u, 0u};  // dropout: this lane's share of the mask's words
      exponentiate_rows<kDropout, kN>(p, s[mt], l[mt], base, kept_bits, b * p.q_heads + h, row[mt], kv0, t);
    }
    cp_async_wait<1>();  // this tile's values
    __syncthreads();
#pragma unroll
    for (int ks16 = 0; ks16 < kN / 16; ++ks16) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) c_to_a<T>(pa[mt], s[mt][2 * ks16], s[mt][2 * ks16 + 1]);
#pragma unroll
      for (int dt = 0; dt < D / 8; dt += 2) {
        uint32_t vb[4];
        load_b_trans<D>(vb, vs, ks16 * 16, dt * 8, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_pair<T>(o[mt], dt, pa[mt], vb);
      }
    }
    __syncthreads();  // every warp is done with the values
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    finish_forward_rows<T, D>(p, b, h, q0 + (warp * MT + mt) * 16, o[mt], m[mt], l[mt], lane);
}

// --- backward ----------------------------------------------------------------------------------

// delta[row] = sum over d of grad_out[row][d] * out[row][d] (f32). 16 lanes per row, each
// reading 8 elements (16 bytes) of both at a time; 16 rows per block of 256 threads.
constexpr int kDeltaLanes = 16;
constexpr int kDeltaRows = 256 / kDeltaLanes;

template <class T, int D>
__global__ void __launch_bounds__(256) flash_delta_kernel(FlashParams p) {
  const int64_t h = blockIdx.y, b = blockIdx.z, bh = b * p.q_heads + h;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kDeltaRows + threadIdx.x / kDeltaLanes;
  const int lane = static_cast<int>(threadIdx.x % kDeltaLanes);
  float sum = 0.0f;
  if (i < p.q_len) {
    const T* o = head_base<T>(p.out, p.out_layout, b, h) + i * p.out_layout.row;
    const T* go = head_base<T>(p.grad_out, p.grad_out_layout, b, h) + i * p.grad_out_layout.row;
#pragma unroll
    for (int d = lane * 8; d < D; d += kDeltaLanes * 8) sum = fma_pack(o + d, go + d, sum);
  }
#pragma unroll
  for (int offset = kDeltaLanes / 2; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0 && i < p.q_len) p.delta[bh * p.q_len + i] = sum;
}

// Query rows per tile of the backward kernels: 64, or 32 for head_dim above 64 (registers).
template <int D>
inline constexpr int kBackwardTile = D <= 64 ? 64 : 32;

// Blocks per SM the dK/dV kernel is compiled for: 3 up to head_dim 96 (168 registers, a few bytes
// spilled at 64, against 222 registers and 2 blocks unbounded: the latency-bound loop gains from
// the third block's warps); 2 above, where 168 registers would spill hundreds of bytes.
template <int D>
inline constexpr int kDkdvBlocksPerSm = D <= 96 ? 3 : 2;

// dK and dV of 64 keys of one kv head from one query head: loops over the query tiles that see
// the keys (from the causal diagonal to the last tile whose documents reach them), the next
// tile's loads in flight while this one is computed. With grouped heads the
// block writes its head's share in f32 (flash_group_sum_kernel adds the group's shares in head
// order); otherwise the gradients themselves.
// kDropout: P and dP are masked by the forward's dropout draws and scaled by 1 / keep_prob.
template <class T, int D, bool kDropout>
__global__ void __launch_bounds__(kThreads, kDkdvBlocksPerSm<D>) flash_backward_dkdv_kernel(FlashParams p) {
  constexpr int kM = kBackwardTile<D>;  // queries per tile
  extern __shared__ __align__(16) unsigned char smem[];
  const auto [ks, vs, q_tiles, go_tiles] = backward_tiles<T, D, kM>(smem);
  auto* lse_tiles = reinterpret_cast<float*>(go_tiles + 2 * kM * kStride<D>);
  float* delta_tiles = lse_tiles + 2 * kM;
  auto* doc_tiles = reinterpret_cast<int32_t*>(delta_tiles + 2 * kM);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, t = lane % 4;
  const int64_t kv0 = static_cast<int64_t>(blockIdx.z) * kRows;  // key block 0, the longest, first
  const int64_t h = blockIdx.x, b = blockIdx.y, kvh = h / (p.q_heads / p.kv_heads);
  const QueryRows<T> queries = query_rows<T>(p, b, h);
  // Tile i's loads into buffer i % 2: q and dO asynchronously, lse, delta and the document
  // starts through registers.
  auto load_queries = [&](int64_t q0, int buffer) {
    load_tile<D, kM>(q_tiles + buffer * kM * kStride<D>, queries.q, p.q_layout.row, q0, p.q_len);
    load_tile<D, kM>(go_tiles + buffer * kM * kStride<D>, queries.go, p.grad_out_layout.row, q0, p.q_len);
    cp_async_commit();
    static_assert(2 * kM <= kThreads);
    if (threadIdx.x < 2 * kM)  // threads [0, kM) load lse and starts, [kM, 2 kM) delta
      load_lse_delta<kM>(lse_tiles + buffer * kM, delta_tiles + buffer * kM, doc_tiles + buffer * kM, queries, q0,
                         p.q_len);
  };
  const KeyValueRows<T> kv = key_value_rows<T>(p, b, kvh);
  load_tile<D, kRows>(ks, kv.k, p.k_layout.row, kv0, p.kv_len);
  load_tile<D, kRows>(vs, kv.v, p.v_layout.row, kv0, p.kv_len);
  cp_async_commit();

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  const int64_t key[2] = {kv0 + warp * 16 + g, kv0 + warp * 16 + g + 8};
  // The first query tile with a query that sees any of these keys.
  const int64_t first_q = (p.causal ? max(int64_t{0}, kv0 - p.causal_offset) : 0) / kM * kM;
  const int64_t key_end = kv0 + kRows;
  if (queries_reach(p, queries.docs, first_q, key_end)) load_queries(first_q, 0);
  int buffer = 0;
  for (int64_t q0 = first_q; queries_reach(p, queries.docs, q0, key_end); q0 += kM, buffer ^= 1) {
    prefetch_and_wait(queries_reach(p, queries.docs, q0 + kM, key_end), [&] { load_queries(q0 + kM, buffer ^ 1); });
    const T* qs = q_tiles + buffer * kM * kStride<D>;
    const T* dos = go_tiles + buffer * kM * kStride<D>;
    const float* lse_s = lse_tiles + buffer * kM;
    const float* delta_s = delta_tiles + buffer * kM;
    const int32_t* doc_s = doc_tiles + buffer * kM;

    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys.
    float s[kM / 8][4] = {}, dp[kM / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ka[4], va[4];
      load_a<D>(ka, ks, warp * 16, kk * 16, lane);
      load_a<D>(va, vs, warp * 16, kk * 16, lane);
      mma_two<T, D, false>(s, dp, ka, va, qs, dos, kk, lane);
    }
    // P^T and dS^T = P^T (dP^T - delta) in place.
    auto probabilities = [&](auto masked) {
      const std::array<SeenBy, 2> seen = queries_seeing_rows<decltype(masked)::value>(p, key, q0, kM);
#pragma unroll
      for (int nt = 0; nt < kM / 8; ++nt) {
        bool keep[4] = {};
        if constexpr (kDropout) load_keep_key_rows(p, b * p.q_heads + h, kv0 + warp * 16, q0 + nt * 8 + 2 * t, g, keep);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qi = nt * 8 + 2 * t + (e & 1);
          const bool hidden =
              decltype(masked)::value && (outside(seen[e / 2], qi) || (queries.docs && doc_s[qi] > key[e / 2]));
          const float pe = probability(p, s[nt][e], lse_s[qi], hidden);
          s[nt][e] = apply_dropout<kDropout>(p, pe, keep[e]);
          dp[nt][e] = pe * (apply_dropout<kDropout>(p, dp[nt][e], keep[e]) - delta_s[qi]);
        }
      }
    };
    with_mask(q0 + kM > p.q_len || (p.causal && kv0 + kRows - 1 > q0 + p.causal_offset) ||
                  last_first_key(p, queries.docs, q0, kM) > kv0,
              probabilities);
    // dV += P^T dO, dK += dS^T Q.
#pragma unroll
    for (int ks16 = 0; ks16 < kM / 16; ++ks16) {
      uint32_t pa[4], dsa[4];
      c_to_a<T>(pa, s[2 * ks16], s[2 * ks16 + 1]);
      c_to_a<T>(dsa, dp[2 * ks16], dp[2 * ks16 + 1]);
      mma_two<T, D, true>(dv, dk, pa, dsa, dos, qs, ks16, lane);
    }
    __syncthreads();  // this buffer is refilled two tiles on
  }
  cp_async_wait<0>();
  finish_key_rows<T, D>(p, b, h, kvh, kv0 + warp * 16, dk, dv, lane);
}

// dK and dV of grouped heads: each kv head's gradient is the sum of its query heads' shares,
// added in head order. One thread per 4 elements of [batch, kv_heads, kv_len, head_dim].
template <class T, int D>
__global__ void flash_group_sum_kernel(FlashParams p, int64_t batch) {
  const int64_t group = p.q_heads / p.kv_heads;
  const int64_t quads = batch * p.kv_heads * p.kv_len * (D / 4);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < quads;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = (i % (D / 4)) * 4, row = (i / (D / 4)) % p.kv_len;
    const int64_t kvh = (i / (D / 4) / p.kv_len) % p.kv_heads, b = i / (D / 4) / p.kv_len / p.kv_heads;
    float4 k_sum = {0, 0, 0, 0}, v_sum = {0, 0, 0, 0};
    for (int64_t gh = 0; gh < group; ++gh) {
      const int64_t at = ((b * p.q_heads + kvh * group + gh) * p.kv_len + row) * D + d;
      const float4 k = *reinterpret_cast<const float4*>(p.grad_k_partial + at);
      const float4 v = *reinterpret_cast<const float4*>(p.grad_v_partial + at);
      k_sum = {k_sum.x + k.x, k_sum.y + k.y, k_sum.z + k.z, k_sum.w + k.w};
      v_sum = {v_sum.x + v.x, v_sum.y + v.y, v_sum.z + v.z, v_sum.w + v.w};
    }
    T* gk = static_cast<T*>(p.grad_k) + b * p.grad_k_layout.batch + kvh * p.grad_k_layout.head +
            row * p.grad_k_layout.row + d;
    T* gv = static_cast<T*>(p.grad_v) + b * p.grad_v_layout.batch + kvh * p.grad_v_layout.head +
            row * p.grad_v_layout.row + d;
    *reinterpret_cast<uint2*>(gk) = make_uint2(pack2<T>(k_sum.x, k_sum.y), pack2<T>(k_sum.z, k_sum.w));
    *reinterpret_cast<uint2*>(gv) = make_uint2(pack2<T>(v_sum.x, v_sum.y), pack2<T>(v_sum.z, v_sum.w));
  }
}

// dQ of 64 queries of one head: loops over the key tiles they see (from their documents' first
// to the causal diagonal), the next tile's loads in flight while this one is computed.
// kDropout: dP is masked by the forward's dropout draws and scaled by 1 / keep_prob.
template <class T, int D, bool kDropout>
__global__ void __launch_bounds__(kThreads) flash_backward_dq_kernel(FlashParams p) {
  constexpr int kN = kBackwardTile<D>;  // keys per tile
  extern __shared__ __align__(16) unsigned char smem[];
  const auto [qs, dos, k_tiles, v_tiles] = backward_tiles<T, D, kN>(smem);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, t = lane % 4;
  const int64_t q_block = query_block_of(p.causal);
  const int64_t h = blockIdx.x, b = blockIdx.y, kvh = h / (p.q_heads / p.kv_heads);
  const int64_t q0 = q_block * kRows;
  const KeyValueRows<T> kv = key_value_rows<T>(p, b, kvh);
  const QueryRows<T> queries = query_rows<T>(p, b, h);
  const BlockKeys keys = block_keys(p, queries.docs, q0, kRows, kN);
  auto load_keys = [&](int64_t kv0, int buffer) {
    load_tile<D, kN>(k_tiles + buffer * kN * kStride<D>, kv.k, p.k_layout.row, kv0, p.kv_len);
    load_tile<D, kN>(v_tiles + buffer * kN * kStride<D>, kv.v, p.v_layout.row, kv0, p.kv_len);
    cp_async_commit();
  };
  load_tile<D, kRows>(qs, queries.q, p.q_layout.row, q0, p.q_len);
  load_tile<D, kRows>(dos, queries.go, p.grad_out_layout.row, q0, p.q_len);
  cp_async_commit();
  load_keys(keys.begin, 0);
  cp_async_wait<1>();
  __syncthreads();
  uint32_t qf[D / 16][4], gf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    load_a<D>(qf[kk], qs, warp * 16, kk * 16, lane);
    load_a<D>(gf[kk], dos, warp * 16, kk * 16, lane);
  }
  const int64_t row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float lse[2], delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lse[r] = row[r] < p.q_len ? queries.lse[row[r]] : INFINITY;
    delta[r] = row[r] < p.q_len ? queries.delta[row[r]] : 0.0f;
  }
  float dq[D / 8][4] = {};
  int buffer = 0;
  for (int64_t kv0 = keys.begin; kv0 < keys.end; kv0 += kN, buffer ^= 1) {
    prefetch_and_wait(kv0 + kN < keys.end, [&] { load_keys(kv0 + kN, buffer ^ 1); });
    const T* ks = k_tiles + buffer * kN * kStride<D>;
    const T* vs = v_tiles + buffer * kN * kStride<D>;
    float s[kN / 8][4] = {}, dp[kN / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) mma_two<T, D, false>(s, dp, qf[kk], gf[kk], ks, vs, kk, lane);
    auto gradients = [&](auto masked) {  // dS = P (dP - delta) in place of dP
      const std::array<SeenBy, 2> seen = keys_seen_rows<decltype(masked)::value>(p, queries.docs, row, kv0, kN);
#pragma unroll
      for (int nt = 0; nt < kN / 8; ++nt) {
        bool keep[4] = {};
        if constexpr (kDropout) load_keep_query_rows(p, b * p.q_heads + h, row[0], row[1], kv0 + nt * 8 + 2 * t, keep);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool hidden = decltype(masked)::value && outside(seen[e / 2], nt * 8 + 2 * t + (e & 1));
          const float pe = probability(p, s[nt][e], lse[e / 2], hidden);
          dp[nt][e] = pe * (apply_dropout<kDropout>(p, dp[nt][e], keep[e]) - delta[e / 2]);
        }
      }
    };
    with_mask(key_tile_masked(p, keys, q0, kv0, kN), gradients);
#pragma unroll
    for (int ks16 = 0; ks16 < kN / 16; ++ks16) {
      uint32_t dsa[4];
      c_to_a<T>(dsa, dp[2 * ks16], dp[2 * ks16 + 1]);
#pragma unroll
      for (int dt = 0; dt < D / 8; dt += 2) {
        uint32_t kb[4];
        load_b_trans<D>(kb, ks, ks16 * 16, dt * 8, lane);
        mma_pair<T>(dq, dt, dsa, kb);
      }
    }
    __syncthreads();  // this buffer is refilled two tiles on
  }
  T* grad_q = static_cast<T*>(p.grad_q) + b * p.grad_q_layout.batch + h * p.grad_q_layout.head;
  store_rows<T, D>(grad_q, p.grad_q_layout.row, q0 + warp * 16, p.q_len, dq, p.scale, p.scale, lane);
}

// --- launch ------------------------------------------------------------------------------------

template <class T, int D>
constexpr size_t tile_bytes(int rows) {
  return static_cast<size_t>(rows) * kStride<D> * sizeof(T);
}

// Launches `kernel` with `smem` bytes of dynamic shared memory (raising the kernel's limit above
// the default 48 KiB once).
template <class Kernel>
void launch(Kernel kernel, dim3 grid, size_t smem, const FlashParams& p, cudaStream_t stream) {
  launch_flash(kernel, grid, kThreads, smem, p, stream);
}

// Whether the wgmma kernels serve the current device: built for sm_90a, a compute capability
// 9.0 device, and GENESIS_FLASH_WGMMA unset or not "0" (which keeps the mma.sync kernels, for
// comparisons).
bool wgmma_ready() {
#if GENESIS_WITH_SM90A
  static const bool enabled = [] {
    const char* value = std::getenv("GENESIS_FLASH_WGMMA");
    return !value || std::string_view(value) != "0";
  }();
  return enabled && device_attribute<cudaDevAttrComputeCapabilityMajor>() == 9 &&
         device_attribute<cudaDevAttrComputeCapabilityMinor>() == 0;
#else
  return false;
#endif
}

template <class T, int D>
void forward_for(const AttentionShape& s, const FlashParams& p, cudaStream_t stream) {
#if GENESIS_WITH_SM90A
  if constexpr (D == 64 || D == 128) {
    if (wgmma_ready()) return forward_wgmma<T, D>(p, s.batch, stream);
  }
#endif
  constexpr int kM = kForwardRows<D>;
  const dim3 grid(static_cast<unsigned>(s.q_heads), static_cast<unsigned>(s.batch), blocks_of(s.q_len, kM));
  launch(p.dropout ? flash_forward_kernel<T, D, true> : flash_forward_kernel<T, D, false>, grid,
         tile_bytes<T, D>(kM) + 2 * tile_bytes<T, D>(64), p, stream);
}

template <class T, int D>
void backward_for(const AttentionShape& s, const FlashParams& p, cudaStream_t stream) {
  constexpr int kTile = kBackwardTile<D>;
  const bool wgmma = D == 64 && wgmma_ready();
  if (wgmma) {  // the dQ kernel works out delta, then the dK/dV kernel reads it
#if GENESIS_WITH_SM90A
    if constexpr (D == 64) {
      backward_dq_wgmma<T, D>(p, s.batch, stream);
      backward_dkdv_wgmma<T, D>(p, s.batch, stream);
    }
#endif
  } else {
    const dim3 delta_grid(blocks_of(s.q_len, kDeltaRows), static_cast<unsigned>(s.q_heads),
                          static_cast<unsigned>(s.batch));
    flash_delta_kernel<T, D><<<delta_grid, 256, 0, stream>>>(p);
    GENESIS_CUDA_LAUNCH_CHECK();
    const dim3 dkdv_grid(static_cast<unsigned>(s.q_heads), static_cast<unsigned>(s.batch), blocks_of(s.kv_len, kRows));
    launch(p.dropout ? flash_backward_dkdv_kernel<T, D, true> : flash_backward_dkdv_kernel<T, D, false>, dkdv_grid,
           2 * tile_bytes<T, D>(kRows) + 4 * tile_bytes<T, D>(kTile) + 6 * kTile * sizeof(float), p, stream);
  }
  if (p.grad_k_partial) {
    const int64_t quads = s.batch * s.kv_heads * s.kv_len * (D / 4);
    const auto blocks = static_cast<unsigned>(std::min<int64_t>((quads + 255) / 256, 65535));
    flash_group_sum_kernel<T, D><<<blocks, 256, 0, stream>>>(p, s.batch);
    GENESIS_CUDA_LAUNCH_CHECK();
  }
  if (wgmma) return;
  const dim3 dq_grid(static_cast<unsigned>(s.q_heads), static_cast<unsigned>(s.batch), blocks_of(s.q_len, kRows));
  launch(p.dropout ? flash_backward_dq_kernel<T, D, true> : flash_backward_dq_kernel<T, D, false>, dq_grid,
         2 * tile_bytes<T, D>(kRows) + 4 * tile_bytes<T, D>(kTile), p, stream);
}

// Calls f.template operator()<T, D>() for the dtype and head_dim.
template <class F>
void dispatch(DType dtype, int64_t head_dim, F&& f) {
  auto by_dim = [&]<class T>() {
    switch (head_dim) {
      case 32:
        return f.template operator()<T, 32>();
      case 64:
        return f.template operator()<T, 64>();
      case 96:
        return f.template operator()<T, 96>();
      case 128:
        return f.template operator()<T, 128>();
      default:
        throw_unsupported_dtype("flash attention (head_dim must be 32, 64, 96 or 128)", dtype);
    }
  };
  if (dtype == DType::bf16) return by_dim.template operator()<__nv_bfloat16>();
  if (dtype == DType::f16) return by_dim.template operator()<__half>();
  throw_unsupported_dtype("flash attention", dtype);
}

// An operand's (or output's) data and layout into their two fields of FlashParams.
template <class Data, class Operand>
void set_operand(Data& data, HeadsLayout& layout, const Operand& operand) {
  data = operand.data;
  layout = operand.layout;
}

FlashParams make_params(const AttentionShape& s, const FlashOperand& q, const FlashOperand& k, const FlashOperand& v,
                        const int32_t* doc_start, const FlashDropout& dropout) {
  FlashParams p{};
  p.dropout = dropout.keep_prob < 1.0;
  // Kept when the word's top 24 bits x satisfy (x + 1) 2^-24 <= keep_prob (random.cpp's test).
  p.keep_threshold = static_cast<uint32_t>(std::floor(dropout.keep_prob * 16777216.0));
  p.keep_scale = p.dropout ? static_cast<float>(1.0 / dropout.keep_prob) : 1.0f;
  p.dropout_seed = dropout.seed;
  p.dropout_offset = dropout.offset;
  p.keep_bits = dropout.keep_bits;
  p.keep_words = (s.kv_len + 31) / 32;
  p.q_heads = s.q_heads;
  p.kv_heads = s.kv_heads;
  p.q_len = s.q_len;
  p.kv_len = s.kv_len;
  p.causal = s.causal;
  p.causal_offset = s.kv_len - s.q_len;
  p.doc_start = doc_start;
  p.scale = static_cast<float>(s.scale);
  p.scale_log2 = static_cast<float>(s.scale) * kLog2e;
  set_operand(p.q, p.q_layout, q);
  set_operand(p.k, p.k_layout, k);
  set_operand(p.v, p.v_layout, v);
  return p;
}

bool aligned(const void* data, const HeadsLayout& l) {
  return reinterpret_cast<uintptr_t>(data) % 16 == 0 && l.batch % 8 == 0 && l.head % 8 == 0 && l.row % 8 == 0;
}

}  // namespace

int64_t flash_dropout_keep_words(const AttentionShape& s) {
  return s.batch * s.q_heads * s.q_len * ((s.kv_len + 31) / 32);
}

int64_t flash_attention_backward_scratch(const AttentionShape& s) {
  const int64_t delta = (s.batch * s.q_heads * s.q_len + 3) / 4 * 4;  // the shares start 16-byte aligned
  const int64_t shares = s.q_heads == s.kv_heads ? 0 : 2 * s.batch * s.q_heads * s.kv_len * s.head_dim;
  return delta + shares;
}

bool flash_attention_supported(DType dtype, const AttentionShape& s,
                               std::initializer_list<FlashOperand> operands) {
  if (dtype != DType::bf16 && dtype != DType::f16) return false;
  if (s.head_dim != 32 && s.head_dim != 64 && s.head_dim != 96 && s.head_dim != 128) return false;
  // Grid limits: heads in x, batch in y (and heads in the delta kernel's y), tiles of 64 rows in z.
  if (s.q_len <= 0 || s.kv_len <= 0 || s.batch > 65535 || s.q_heads > 65535) return false;
  if ((std::max(s.q_len, s.kv_len) + 63) / 64 > 65535) return false;
  for (const FlashOperand& o : operands)
    if (!aligned(o.data, o.layout)) return false;
  return true;
}

void flash_attention_forward(DType dtype, const AttentionShape& s, const FlashOperand& q, const FlashOperand& k,
                             const FlashOperand& v, const int32_t* doc_start, const FlashOutput& out, float* lse,
                             const FlashDropout& dropout, cudaStream_t stream) {
  FlashParams p = make_params(s, q, k, v, doc_start, dropout);
  set_operand(p.out_data, p.out_data_layout, out);
  p.lse = lse;
  dispatch(dtype, s.head_dim, [&]<class T, int D>() { forward_for<T, D>(s, p, stream); });
}

void flash_attention_backward(DType dtype, const AttentionShape& s, const FlashOperand& q, const FlashOperand& k,
                              const FlashOperand& v, const int32_t* doc_start, const FlashOperand& out,
                              const float* lse, const FlashOperand& grad_out, const FlashOutput& grad_q,
                              const FlashOutput& grad_k, const FlashOutput& grad_v, float* scratch,
                              const FlashDropout& dropout, cudaStream_t stream) {
  GENESIS_CHECK(dropout.keep_prob >= 1.0 || dropout.keep_bits != nullptr, ValueError,
                "flash attention backward: dropout needs the forward's keep bits");
  FlashParams p = make_params(s, q, k, v, doc_start, dropout);
  p.delta = scratch;
  if (s.q_heads != s.kv_heads) {
    p.grad_k_partial = scratch + (s.batch * s.q_heads * s.q_len + 3) / 4 * 4;
    p.grad_v_partial = p.grad_k_partial + s.batch * s.q_heads * s.kv_len * s.head_dim;
  }
  set_operand(p.out, p.out_layout, out);
  set_operand(p.grad_out, p.grad_out_layout, grad_out);
  p.lse = const_cast<float*>(lse);
  set_operand(p.grad_q, p.grad_q_layout, grad_q);
  set_operand(p.grad_k, p.grad_k_layout, grad_k);
  set_operand(p.grad_v, p.grad_v_layout, grad_v);
  dispatch(dtype, s.head_dim, [&]<class T, int D>() { backward_for<T, D>(s, p, stream); });
}

}  // namespace genesis::kernels::cuda
