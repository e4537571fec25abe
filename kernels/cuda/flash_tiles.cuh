#pragma once
// What the flash kernels' tile loops share between the mma.sync kernels (flash_attention.cu) and
// the wgmma kernels (sm90/flash_attention_wgmma.cu): a block's operands, masks, the forward's
// online softmax and the backward's probabilities. A lane holds two rows r = 0, 1 of its warp's
// 16 (fragment rows g, g + 8) and of each n-tile nt the columns nt * 8 + 2t + (e & 1) as element
// e, row e / 2 (flash_common.cuh).
#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/flash_common.cuh"

namespace genesis::kernels::cuda::flash {

// --- a block's operands ------------------------------------------------------------------------

// The keys and values of kv head kvh of batch b: what the forward and dQ blocks stream.
template <class T>
struct KeyValueRows {
  const T* k;
  const T* v;
};
template <class T>
__device__ __forceinline__ KeyValueRows<T> key_value_rows(const FlashParams& p, int64_t b, int64_t kvh) {
  return {head_base<T>(p.k, p.k_layout, b, kvh), head_base<T>(p.v, p.v_layout, b, kvh)};
}

// The rows of query head h of batch b that a dK/dV block streams: q, dO, the forward's lse
// and the backward's delta (f32, one a query), and the document starts (null without documents).
template <class T>
struct QueryRows {
  const T* q;
  const T* go;
  const float* lse;
  const float* delta;
  const int32_t* docs;
};
template <class T>
__device__ __forceinline__ QueryRows<T> query_rows(const FlashParams& p, int64_t b, int64_t h) {
  return {head_base<T>(p.q, p.q_layout, b, h), head_base<T>(p.grad_out, p.grad_out_layout, b, h),
          p.lse + (b * p.q_heads + h) * p.q_len, p.delta + (b * p.q_heads + h) * p.q_len, doc_starts_of(p, b)};
}

// --- masks -------------------------------------------------------------------------------------

// What a masked tile shows a lane's two rows, worked out once per tile so that each element costs
// one or two compares; kMasked false (a tile off the diagonal and the edges): nothing, unused.
// Rows are queries (the forward, dQ): row r sees the tile's keys [seen[r].first, seen[r].end);
// docs: the batch's document starts (null without documents).
template <bool kMasked>
__device__ __forceinline__ std::array<SeenBy, 2> keys_seen_rows(const FlashParams& p, const int32_t* docs,
                                                                const int64_t (&row)[2], int64_t kv0, int tile) {
  if constexpr (kMasked) {
    return {keys_seen(p, docs, row[0], kv0, tile), keys_seen(p, docs, row[1], kv0, tile)};
  } else {
    return {};
  }
}
// Whether a query row's span hides column c of the tile.
__device__ __forceinline__ bool outside(const SeenBy& seen, int c) {
  return c < seen.first || c >= seen.end;
}
// Rows are keys (dK/dV): key r is seen by the tile's queries [seen[r].first, seen[r].end) whose
// documents start at or below it (the kernels test each query's start).
template <bool kMasked>
__device__ __forceinline__ std::array<SeenBy, 2> queries_seeing_rows(const FlashParams& p, const int64_t (&key)[2],
                                                                     int64_t q0, int tile) {
  if constexpr (kMasked) {
    return {queries_seeing(p, key[0], q0, tile), queries_seeing(p, key[1], q0, tile)};
  } else {
    return {};
  }
}

// Calls f(std::true_type{}) for a masked tile, f(std::false_type{}) otherwise: two copies of a
// loop, so that tiles off the diagonal and the edges test nothing.
template <class F>
__device__ __forceinline__ void with_mask(bool masked, F&& f) {
  if (masked) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// --- forward: online softmax -------------------------------------------------------------------

// Scores of a lane's two query rows outside the row's keys in the tile from kv0 go to -inf.
template <int kN>
__device__ __forceinline__ void mask_keys(const FlashParams& p, const int32_t* docs, float (&s)[kN / 8][4],
                                          const int64_t (&row)[2], int64_t kv0, int t) {
  const std::array<SeenBy, 2> seen = keys_seen_rows<true>(p, docs, row, kv0, kN);
#pragma unroll
  for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (outside(seen[e / 2], nt * 8 + 2 * t + (e & 1))) s[nt][e] = -INFINITY;
  }
}

// Step one of a key tile for a lane's two query rows (masked scores at -inf): the running max m
// to the tile's, the sum l and output o rescaled to it; base[r] is row r's max in base 2.
template <int D, int kN>
__device__ __forceinline__ void rescale_rows(const FlashParams& p, const float (&s)[kN / 8][4], float (&o)[D / 8][4],
                                             float (&m)[2], float (&l)[2], float (&base)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = m[r];
#pragma unroll
    for (int nt = 0; nt < kN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
    mx = quad_max(mx);
    const float used = mx == -INFINITY ? 0.0f : mx;  // a row with nothing visible yet
    const float correction = fast_exp2((m[r] - used) * p.scale_log2);
    m[r] = mx;
    l[r] *= correction;
    base[r] = used * p.scale_log2;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][2 * r] *= correction;
      o[dt][2 * r + 1] *= correction;
    }
  }
}

// Step two: s to the probabilities, added to the sums l. kDropout: the dropped probabilities
// are zeroed (the sums keep them) and the mask's bits, collected in kept_bits (zeros on entry),
// stored for the backward.
template <bool kDropout, int kN>
__device__ __forceinline__ void exponentiate_rows(const FlashParams& p, float (&s)[kN / 8][4], float (&l)[2],
                                                  const float (&base)[2], uint32_t (&kept_bits)[2], int64_t bh,
                                                  const int64_t (&row)[2], int64_t kv0, int t) {
#pragma unroll
  for (int nt = 0; nt < kN / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float pe = fast_exp2(fmaf(s[nt][e], p.scale_log2, -base[e / 2]));
      s[nt][e] = pe;
      l[e / 2] += pe;
    }
    if constexpr (kDropout) {
      bool keep[4];
      dropout_keeps_query_rows(p, bh, row[0], row[1], kv0 + nt * 8 + 2 * t, t, keep);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (!keep[e]) s[nt][e] = 0.0f;
      collect_keep_bits(kept_bits, keep, nt, t);
      if (nt % 4 == 3) store_keep_bits(p, bh, row[0], row[1], kv0 + (nt - 3) * 8, kept_bits, t);
    }
  }
}

// --- backward ----------------------------------------------------------------------------------

// P of one score: 2^(s scale_log2 - lse), or 0 where a masked tile hides it.
__device__ __forceinline__ float probability(const FlashParams& p, float s, float lse, bool hidden) {
  const float pe = fast_exp2(fmaf(s, p.scale_log2, -lse));
  return hidden ? 0.0f : pe;
}

// x where dropout keeps it, scaled by 1 / keep_prob, and 0 where it drops it (x without dropout).
template <bool kDropout>
__device__ __forceinline__ float apply_dropout(const FlashParams& p, float x, bool keep) {
  if constexpr (kDropout) {
    return keep ? x * p.keep_scale : 0.0f;
  } else {
    return x;
  }
}

// Rows [q0, q0 + kM) of a query head's lse, delta and document starts into shared memory, thread
// r < kM loading lse and the start of row r and thread kM + r delta row r; rows past the end as
// lse = inf (so that p = 0), delta = 0 and start 0 (as every row without documents). Threads of
// 2 kM and up must not call it.
template <int kM, class T>
__device__ __forceinline__ void load_lse_delta(float* lse_tile, float* delta_tile, int32_t* doc_tile,
                                               const QueryRows<T>& queries, int64_t q0, int64_t q_len) {
  const int r = static_cast<int>(threadIdx.x % kM);
  const bool valid = q0 + r < q_len;
  if (threadIdx.x < kM) {
    lse_tile[r] = valid ? queries.lse[q0 + r] : INFINITY;
    doc_tile[r] = valid ? static_cast<int32_t>(first_key(queries.docs, q0 + r)) : 0;
  } else {
    delta_tile[r] = valid ? queries.delta[q0 + r] : 0.0f;
  }
}

}  // namespace genesis::kernels::cuda::flash
