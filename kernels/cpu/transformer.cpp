#include "kernels/cpu/transformer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/loops.h"

namespace genesis::kernels::cpu {

namespace {

template <class T>
void rope_typed(bool inverse, int64_t outer, int64_t seq, int64_t dim, const T* x, const T* cos, const T* sin,
                int64_t outer_per_table, T* y) {
  using A = acc_t<T>;
  const int64_t half = dim / 2;
  const A sign = inverse ? A(-1) : A(1);
  parallel_for(outer * seq, dim * 4, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t t = row % seq;
      const int64_t table_row = (row / seq / outer_per_table) * seq + t;
      const T* xr = x + row * dim;
      T* yr = y + row * dim;
      for (int64_t i = 0; i < half; ++i) {
        const A c = static_cast<A>(cos[table_row * half + i]), s = sign * static_cast<A>(sin[table_row * half + i]);
        const A x1 = static_cast<A>(xr[i]), x2 = static_cast<A>(xr[i + half]);
        yr[i] = static_cast<T>(x1 * c - x2 * s);
        yr[i + half] = static_cast<T>(x2 * c + x1 * s);
      }
    }
  });
}

template <class A>
A sigmoid_of(A v) {
  return A(1) / (A(1) + std::exp(-v));
}

// silu(g) * u rounded to T; the forward and the backward's recomputation share it, so they agree
// bit for bit.
template <class T, class A>
T swiglu_value(A g, A sig, A u) {
  return static_cast<T>(g * sig * u);
}

template <class T>
void swiglu_typed(int64_t n, const T* gate, const T* up, T* y) {
  using A = acc_t<T>;
  parallel_for(n, 8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const A g = static_cast<A>(gate[i]);
      y[i] = swiglu_value<T>(g, sigmoid_of(g), static_cast<A>(up[i]));
    }
  });
}

template <class T>
void swiglu_backward_typed(int64_t n, const T* gate, const T* up, const T* grad_y, T* grad_gate, T* grad_up, T* y) {
  using A = acc_t<T>;
  parallel_for(n, 10, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const A g = static_cast<A>(gate[i]), u = static_cast<A>(up[i]), gy = static_cast<A>(grad_y[i]);
      const A sig = sigmoid_of(g);
      grad_gate[i] = static_cast<T>(gy * u * sig * (A(1) + g * (A(1) - sig)));
      grad_up[i] = static_cast<T>(gy * g * sig);
      if (y) y[i] = swiglu_value<T>(g, sig, u);
    }
  });
}

// What query row `row` of q [batch, q_heads, q_len] attends to: the keys and values of its kv
// head, which start at kv_offset, and of those [first, visible): all without the causal mask, and
// with packed documents (doc_start) only its own document's.
struct QueryRow {
  int64_t kv_offset, first, visible;
  QueryRow(const AttentionShape& s, const int32_t* doc_start, int64_t row) {
    const int64_t t = row % s.q_len, bh = row / s.q_len;
    const int64_t b = bh / s.q_heads, h = bh % s.q_heads;
    kv_offset = (b * s.kv_heads + h / (s.q_heads / s.kv_heads)) * s.kv_len * s.head_dim;
    visible = s.causal ? s.kv_len - s.q_len + t + 1 : s.kv_len;
    first = doc_start ? std::clamp<int64_t>(doc_start[b * s.q_len + t], 0, visible) : 0;
  }
};

// One task per query row (batch, head, t): scores against the visible keys, a softmax, and
// the weighted sum of values. Compute bound by the q.k and p.v dot products.
template <class T>
void attention_typed(const AttentionShape& s, const T* q, const T* k, const T* v, const int32_t* doc_start, T* out,
                     acc_t<T>* probs) {
  using A = acc_t<T>;
  const int64_t d = s.head_dim;
  const int64_t rows = s.batch * s.q_heads * s.q_len;
  parallel_for(rows, s.kv_len * d * 2, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(static_cast<size_t>(d));
    for (int64_t row = begin; row < end; ++row) {
      const auto [kv_offset, first, visible] = QueryRow(s, doc_start, row);
      const T* qr = q + row * d;
      const T* kb = k + kv_offset;
      const T* vb = v + kv_offset;
      A* p = probs + row * s.kv_len;
      A m = -std::numeric_limits<A>::infinity();
      for (int64_t j = first; j < visible; ++j) {
        A dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += static_cast<A>(qr[e]) * static_cast<A>(kb[j * d + e]);
        p[j] = dot * static_cast<A>(s.scale);
        m = std::max(m, p[j]);
      }
      A total = 0;
      for (int64_t j = first; j < visible; ++j) total += (p[j] = std::exp(p[j] - m));
      const A inv = A(1) / total;
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t j = first; j < visible; ++j) {
        p[j] *= inv;
        for (int64_t e = 0; e < d; ++e) acc[e] += p[j] * static_cast<A>(vb[j * d + e]);
      }
      std::fill(p, p + first, A(0));
      std::fill(p + visible, p + s.kv_len, A(0));
      for (int64_t e = 0; e < d; ++e) out[row * d + e] = static_cast<T>(acc[e]);
    }
  });
}

template <class T>
void attention_backward_typed(const AttentionShape& s, const T* q, const T* k, const T* v, const int32_t* doc_start,
                              const acc_t<T>* probs, const T* grad_out, T* grad_q, T* grad_k, T* grad_v,
                              acc_t<T>* grad_scores) {
  using A = acc_t<T>;
  const int64_t d = s.head_dim, group = s.q_heads / s.kv_heads;
  const A scale = static_cast<A>(s.scale);
  // Query rows: grad of the scores (softmax backward) and of q.
  parallel_for(s.batch * s.q_heads * s.q_len, s.kv_len * d * 3, [&](int64_t begin, int64_t end) {
    std::vector<A> acc(static_cast<size_t>(d));
    for (int64_t row = begin; row < end; ++row) {
      const auto [kv_offset, first, visible] = QueryRow(s, doc_start, row);
      const T* gor = grad_out + row * d;
      const A* p = probs + row * s.kv_len;
      A* gs = grad_scores + row * s.kv_len;
      A weighted = 0;
      for (int64_t j = first; j < visible; ++j) {
        A dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += static_cast<A>(gor[e]) * static_cast<A>(v[kv_offset + j * d + e]);
        gs[j] = dot;
        weighted += p[j] * dot;
      }
      std::fill(acc.begin(), acc.end(), A(0));
      for (int64_t j = first; j < visible; ++j) {
        gs[j] = p[j] * (gs[j] - weighted);
        for (int64_t e = 0; e < d; ++e) acc[e] += gs[j] * static_cast<A>(k[kv_offset + j * d + e]);
      }
      std::fill(gs, gs + first, A(0));
      std::fill(gs + visible, gs + s.kv_len, A(0));
      for (int64_t e = 0; e < d; ++e) grad_q[row * d + e] = static_cast<T>(acc[e] * scale);
    }
  });
  // Key rows (batch, kv head, j): sums over the group's query heads and the query rows that
  // see key j, in a fixed order. Reads grad_scores and probs down a column (stride kv_len).
  // With packed documents the rows that see key j end where a later document starts (document
  // starts never decrease), so the loop stops there.
  parallel_for(s.batch * s.kv_heads * s.kv_len, group * s.q_len * d * 2, [&](int64_t begin, int64_t end) {
    std::vector<A> gk(static_cast<size_t>(d)), gv(static_cast<size_t>(d));
    for (int64_t row = begin; row < end; ++row) {
      const int64_t j = row % s.kv_len, bk = row / s.kv_len;
      const int64_t b = bk / s.kv_heads, kvh = bk % s.kv_heads;
      std::fill(gk.begin(), gk.end(), A(0));
      std::fill(gv.begin(), gv.end(), A(0));
      const int64_t first_t = s.causal ? std::max<int64_t>(0, j - (s.kv_len - s.q_len)) : 0;
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const int64_t q_base = (b * s.q_heads + h) * s.q_len;
        for (int64_t t = first_t; t < s.q_len; ++t) {
          if (doc_start && doc_start[b * s.q_len + t] > j) break;
          const A gs = grad_scores[(q_base + t) * s.kv_len + j];
          const A p = probs[(q_base + t) * s.kv_len + j];
          const T* qr = q + (q_base + t) * d;
          const T* gor = grad_out + (q_base + t) * d;
          for (int64_t e = 0; e < d; ++e) {
            gk[e] += gs * static_cast<A>(qr[e]);
            gv[e] += p * static_cast<A>(gor[e]);
          }
        }
      }
      for (int64_t e = 0; e < d; ++e) {
        grad_k[row * d + e] = static_cast<T>(gk[e] * scale);
        grad_v[row * d + e] = static_cast<T>(gv[e]);
      }
    }
  });
}

}  // namespace

void rope(DType dtype, bool inverse, int64_t outer, int64_t seq, int64_t dim, const void* x, const void* cos,
          const void* sin, int64_t outer_per_table, void* y) {
  GENESIS_DISPATCH_FLOAT(dtype, "rope", {
    rope_typed(inverse, outer, seq, dim, static_cast<const scalar_t*>(x), static_cast<const scalar_t*>(cos),
               static_cast<const scalar_t*>(sin), outer_per_table, static_cast<scalar_t*>(y));
  });
}

void swiglu(DType dtype, int64_t n, const void* gate, const void* up, void* y) {
  GENESIS_DISPATCH_FLOAT(dtype, "swiglu", {
    swiglu_typed(n, static_cast<const scalar_t*>(gate), static_cast<const scalar_t*>(up), static_cast<scalar_t*>(y));
  });
}

void swiglu_backward(DType dtype, int64_t n, const void* gate, const void* up, const void* grad_y, void* grad_gate,
                     void* grad_up, void* y) {
  GENESIS_DISPATCH_FLOAT(dtype, "swiglu", {
    swiglu_backward_typed(n, static_cast<const scalar_t*>(gate), static_cast<const scalar_t*>(up),
                          static_cast<const scalar_t*>(grad_y), static_cast<scalar_t*>(grad_gate),
                          static_cast<scalar_t*>(grad_up), static_cast<scalar_t*>(y));
  });
}

void attention(DType dtype, const AttentionShape& s, const void* q, const void* k, const void* v,
               const int32_t* doc_start, void* out, void* probs) {
  GENESIS_DISPATCH_FLOAT(dtype, "scaled_dot_product_attention", {
    attention_typed(s, static_cast<const scalar_t*>(q), static_cast<const scalar_t*>(k),
                    static_cast<const scalar_t*>(v), doc_start, static_cast<scalar_t*>(out),
                    static_cast<acc_t<scalar_t>*>(probs));
  });
}

void attention_backward(DType dtype, const AttentionShape& s, const void* q, const void* k, const void* v,
                        const int32_t* doc_start, const void* probs, const void* grad_out, void* grad_q, void* grad_k,
                        void* grad_v, void* scratch) {
  GENESIS_DISPATCH_FLOAT(dtype, "scaled_dot_product_attention", {
    attention_backward_typed(s, static_cast<const scalar_t*>(q), static_cast<const scalar_t*>(k),
                             static_cast<const scalar_t*>(v), doc_start, static_cast<const acc_t<scalar_t>*>(probs),
                             static_cast<const scalar_t*>(grad_out), static_cast<scalar_t*>(grad_q),
                             static_cast<scalar_t*>(grad_k), static_cast<scalar_t*>(grad_v),
                             static_cast<acc_t<scalar_t>*>(scratch));
  });
}

}  // namespace genesis::kernels::cpu
