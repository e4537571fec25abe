// CUDA kernels of the transformer ops. Rotary embedding and SwiGLU are elementwise passes with
// 16-byte vector accesses where the layout allows. Attention materializes the scores: cuBLAS
// GEMMs batched over (batch, kv head), with the query heads of a kv head's group stacked as the
// rows of one matrix (so K/V are never repeated and the group's gradient sums happen inside one
// GEMM), around warp-per-row softmax and softmax-backward kernels.
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/common/math.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/linalg.h"
#include "kernels/cuda/packs.cuh"
#include "kernels/cuda/transformer.h"
#include "libgenesis/core/error.h"

namespace genesis::kernels::cuda {

namespace {

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// ---- rotary embedding ------------------------------------------------------------------------

// One thread per VEC consecutive pairs (i, i + dim/2) of a row: reads VEC elements from each half
// of x and from the cos/sin rows of its position (in its outer0 index's table when the tables are
// per row), writes both halves of the contiguous output.
template <int VEC, class T>
__global__ void rope_kernel(bool inverse, RopeInput x, int64_t seq, int64_t half, const T* cos, const T* sin, T* y) {
  using A = float_acc_t<T>;
  const int64_t packs_per_row = half / VEC;
  const int64_t items = x.outer0 * x.outer1 * seq * packs_per_row;
  const A sign = inverse ? A(-1) : A(1);
  const T* xs = static_cast<const T*>(x.data);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t col = (i % packs_per_row) * VEC, row = i / packs_per_row;
    const int64_t t = row % seq, outer = row / seq, outer0 = outer / x.outer1;
    const T* xr = xs + outer0 * x.stride0 + (outer % x.outer1) * x.stride1 + t * x.seq_stride;
    const int64_t table = outer0 * x.table_stride0 + t * half;
    T* yr = y + row * 2 * half;
    const Pack<T, VEC> x1 = load_pack<VEC>(xr + col), x2 = load_pack<VEC>(xr + half + col);
    const Pack<T, VEC> c = load_pack<VEC>(cos + table + col), s = load_pack<VEC>(sin + table + col);
    Pack<T, VEC> y1, y2;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const A cj = to_acc<A>(c.v[j]), sj = sign * to_acc<A>(s.v[j]);
      const A a = to_acc<A>(x1.v[j]), b = to_acc<A>(x2.v[j]);
      y1.v[j] = from_acc<T>(a * cj - b * sj);
      y2.v[j] = from_acc<T>(b * cj + a * sj);
    }
    store_pack<VEC>(yr + col, y1);
    store_pack<VEC>(yr + half + col, y2);
  }
}

template <class T>
void launch_rope(bool inverse, const RopeInput& x, int64_t seq, int64_t dim, const T* cos, const T* sin, T* y,
                 cudaStream_t stream) {
  const int64_t half = dim / 2, rows = x.outer0 * x.outer1 * seq;
  if (rows * half == 0) return;
  constexpr int V = kPack<T>;
  const bool vectorized = half % V == 0 && x.stride0 % V == 0 && x.stride1 % V == 0 && x.seq_stride % V == 0 &&
                          aligned16(x.data) && aligned16(cos) && aligned16(sin) && aligned16(y);
  if (vectorized) {
    rope_kernel<V><<<grid_size(rows * half / V), kBlockSize, 0, stream>>>(inverse, x, seq, half, cos, sin, y);
  } else {
    rope_kernel<1><<<grid_size(rows * half), kBlockSize, 0, stream>>>(inverse, x, seq, half, cos, sin, y);
  }
  GENESIS_CUDA_LAUNCH_CHECK();
}

// ---- SwiGLU --------------------------------------------------------------------------------

template <class A>
__device__ __forceinline__ A sigmoid_of(A v) {
  return unary_float(UnaryOp::sigmoid, v, A(0), A(0));
}

template <class T>
__device__ __forceinline__ T swiglu_value(T gate, T up) {
  using A = float_acc_t<T>;
  const A g = to_acc<A>(gate);
  return from_acc<T>(g * sigmoid_of(g) * to_acc<A>(up));
}

template <class T>
__device__ __forceinline__ void swiglu_grads(T gate, T up, T grad_y, T& grad_gate, T& grad_up) {
  using A = float_acc_t<T>;
  const A g = to_acc<A>(gate), u = to_acc<A>(up), gy = to_acc<A>(grad_y);
  const A sig = sigmoid_of(g);
  grad_gate = from_acc<T>(gy * u * sig * (A(1) + g * (A(1) - sig)));
  grad_up = from_acc<T>(gy * g * sig);
}

// Thread p of the grid-stride loop handles elements [p * VEC, p * VEC + VEC) of every buffer
// (one vector access each, coalesced across the warp); the last n % VEC elements go one per thread.
template <int VEC, class T>
__global__ void swiglu_kernel(int64_t n, const T* gate, const T* up, T* y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / VEC;
  for (int64_t p = first; p < packs; p += stride) {
    const Pack<T, VEC> g = load_pack<VEC>(gate + p * VEC), u = load_pack<VEC>(up + p * VEC);
    Pack<T, VEC> out;
#pragma unroll
    for (int j = 0; j < VEC; ++j) out.v[j] = swiglu_value(g.v[j], u.v[j]);
    store_pack<VEC>(y + p * VEC, out);
  }
  for (int64_t i = packs * VEC + first; i < n; i += stride) y[i] = swiglu_value(gate[i], up[i]);
}

// WITH_Y: also writes the forward's values into y (the same swiglu_value, so the same bits).
template <int VEC, bool WITH_Y, class T>
__global__ void swiglu_backward_kernel(int64_t n, const T* gate, const T* up, const T* grad_y, T* grad_gate,
                                       T* grad_up, T* y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / VEC;
  for (int64_t p = first; p < packs; p += stride) {
    const Pack<T, VEC> g = load_pack<VEC>(gate + p * VEC), u = load_pack<VEC>(up + p * VEC);
    const Pack<T, VEC> gy = load_pack<VEC>(grad_y + p * VEC);
    Pack<T, VEC> gg, gu;
#pragma unroll
    for (int j = 0; j < VEC; ++j) swiglu_grads(g.v[j], u.v[j], gy.v[j], gg.v[j], gu.v[j]);
    store_pack<VEC>(grad_gate + p * VEC, gg);
    store_pack<VEC>(grad_up + p * VEC, gu);
    if constexpr (WITH_Y) {
      Pack<T, VEC> out;
#pragma unroll
      for (int j = 0; j < VEC; ++j) out.v[j] = swiglu_value(g.v[j], u.v[j]);
      store_pack<VEC>(y + p * VEC, out);
    }
  }
  for (int64_t i = packs * VEC + first; i < n; i += stride) {
    swiglu_grads(gate[i], up[i], grad_y[i], grad_gate[i], grad_up[i]);
    if constexpr (WITH_Y) y[i] = swiglu_value(gate[i], up[i]);
  }
}

// ---- attention -----------------------------------------------------------------------------

// The rows of the score matrices, [batch, q_heads, q_len] over kv_len keys, and what hides keys
// from them: the causal mask and packed documents' starts ([batch, q_len]; null: none).
struct ScoreRows {
  int64_t q_heads, q_len, kv_len;
  bool causal;
  const int32_t* doc_start;
};

// Keys [first, end) score row r sees: all kv_len, or up to its position kv_len - q_len + t when
// causal; from its document's start with packed documents.
struct VisibleKeys {
  int64_t first, end;
};
__device__ __forceinline__ VisibleKeys visible_keys(const ScoreRows& a, int64_t r) {
  const int64_t t = r % a.q_len;
  const int64_t end = a.causal ? a.kv_len - a.q_len + t + 1 : a.kv_len;
  if (!a.doc_start) return {0, end};
  const int64_t start = a.doc_start[r / (a.q_heads * a.q_len) * a.q_len + t];
  return {min(max(start, int64_t{0}), end), end};
}

// Sum of exponentials l relative to max m, moved to max `to` (a lane that saw no key has l = 0).
template <class A>
__device__ __forceinline__ A rescaled(A l, A m, A to) {
  return l == A(0) ? A(0) : l * exp(m - to);
}

// Scores (already scaled) to probabilities in place, one warp per row of kv_len: lane l reads
// the visible columns first + l, first + l + 32, ... keeping a running max and rescaled sum (one
// read), the lanes merge theirs by a butterfly (same order on every run), then a second pass
// writes exp(s - max) / sum and zeros outside the visible keys. S is the scores' type, T the
// probabilities' (16-bit inputs: f32 scores, 16-bit probabilities; otherwise one buffer, in place).
template <class S, class T>
__global__ void softmax_scores_kernel(int64_t rows, ScoreRows a, const S* scores, T* probs) {
  using A = float_acc_t<T>;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t kv_len = a.kv_len;
  GENESIS_FOR_EACH_GROUP_ROW(r, rows, kWarp, kBlockSize) {
    const S* row = scores + r * kv_len;
    T* out = probs + r * kv_len;
    const auto [first, visible] = visible_keys(a, r);
    ExpSum<A> s{-std::numeric_limits<A>::infinity(), A(0)};
    for (int64_t c = first + lane; c < visible; c += kWarp) {
      const A x = to_acc<A>(row[c]);
      if (x > s.max) {
        s.sum = rescaled(s.sum, s.max, x) + A(1);
        s.max = x;
      } else {
        s.sum += exp(x - s.max);
      }
    }
    s = warp_reduce(s, [](const ExpSum<A>& a, const ExpSum<A>& b) {
      return merge_at(a, b, Max{}(a.max, b.max), [](A l, A m, A to) { return rescaled(l, m, to); });
    });
    const A inv = A(1) / s.sum;
    for (int64_t c = lane; c < kv_len; c += kWarp)
      out[c] = from_acc<T>(c >= first && c < visible ? exp(to_acc<A>(row[c]) - s.max) * inv : A(0));
  }
}

// grad of the scaled scores from grad_probs (G: f32 for 16-bit probabilities), one warp per row:
// scale * p * (dp - sum(dp * p)), zero outside the visible keys; written over grad_probs or into
// grad_scores (T).
template <class T, class G>
__global__ void softmax_scores_backward_kernel(int64_t rows, ScoreRows a, float_acc_t<T> scale, const T* probs,
                                               const G* grad_probs, T* grad_scores) {
  using A = float_acc_t<T>;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t kv_len = a.kv_len;
  GENESIS_FOR_EACH_GROUP_ROW(r, rows, kWarp, kBlockSize) {
    const T* p = probs + r * kv_len;
    const G* g = grad_probs + r * kv_len;
    T* out = grad_scores + r * kv_len;
    const auto [first, visible] = visible_keys(a, r);
    A weighted = 0;
    for (int64_t c = first + lane; c < visible; c += kWarp) weighted += to_acc<A>(g[c]) * to_acc<A>(p[c]);
    weighted = warp_reduce(weighted, Sum{});
    for (int64_t c = lane; c < kv_len; c += kWarp)
      out[c] = from_acc<T>(c >= first && c < visible ? scale * to_acc<A>(p[c]) * (to_acc<A>(g[c]) - weighted) : A(0));
  }
}

unsigned warp_row_grid(int64_t rows) {
  return grid_size(rows * kWarp);
}

// A GEMM operand per (batch, kv head): element strides between batches and between kv heads, and
// the row stride of its row-major matrix.
struct Operand {
  const void* data;
  int64_t batch_stride, group_stride, ld;
};

// The (batch, kv head) pairs as one strided batch when an operand's two strides allow it.
bool collapses(const AttentionShape& s, const Operand& o) {
  return s.batch == 1 || s.kv_heads == 1 || o.batch_stride == s.kv_heads * o.group_stride;
}

int64_t collapsed_stride(const AttentionShape& s, const Operand& o) {
  return s.kv_heads == 1 ? o.batch_stride : o.group_stride;
}

// C[b, h] = alpha * op(A[b, h]) op(B[b, h]) for every batch b and kv head h: one strided-batched
// GEMM, or one per batch when an operand's batch stride is not kv_heads times its head stride.
// With f32_out, C is f32 whatever the operands' dtype.
void grouped_gemm(DType dtype, const AttentionShape& s, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, const Operand& a, const Operand& b, const Operand& c, double alpha, cudaStream_t stream,
                  bool f32_out = false) {
  const auto element = static_cast<int64_t>(dtype_size(dtype));
  const auto c_element = f32_out ? int64_t{4} : element;
  auto run = [&](const GemmArgs& args) { f32_out ? gemm_f32_out(dtype, args, stream) : gemm(dtype, args, stream); };
  if (k == 0) {  // an empty sum (no keys): zeros, which cuBLAS is not asked to produce
    GENESIS_CUDA_CHECK(cudaMemsetAsync(const_cast<void*>(c.data), 0,
                                       static_cast<size_t>(s.batch * s.kv_heads * m * n * c_element), stream));
    return;
  }
  GemmArgs args{.trans_a = trans_a,
                     .trans_b = trans_b,
                     .m = m,
                     .n = n,
                     .k = k,
                     .a = a.data,
                     .lda = a.ld,
                     .b = b.data,
                     .ldb = b.ld,
                     .c = const_cast<void*>(c.data),
                     .ldc = c.ld,
                     .alpha = alpha};
  if (collapses(s, a) && collapses(s, b) && collapses(s, c)) {
    args.stride_a = collapsed_stride(s, a);
    args.stride_b = collapsed_stride(s, b);
    args.stride_c = collapsed_stride(s, c);
    args.batch = s.batch * s.kv_heads;
    run(args);
    return;
  }
  args.stride_a = a.group_stride;
  args.stride_b = b.group_stride;
  args.stride_c = c.group_stride;
  args.batch = s.kv_heads;
  for (int64_t i = 0; i < s.batch; ++i) {
    args.a = static_cast<const char*>(a.data) + i * a.batch_stride * element;
    args.b = static_cast<const char*>(b.data) + i * b.batch_stride * element;
    args.c = static_cast<char*>(const_cast<void*>(c.data)) + i * c.batch_stride * c_element;
    run(args);
  }
}

int64_t group_of(const AttentionShape& s) {
  return s.q_heads / s.kv_heads;
}

// A single-row matrix's stride is never followed; cuBLAS still wants it >= the row length.
int64_t leading(int64_t rows, int64_t cols, int64_t row_stride) {
  return rows <= 1 ? cols : row_stride;
}

// The group's query rows (group * q_len of them) of q as one matrix per (batch, kv head).
Operand stacked_queries(const AttentionShape& s, const void* data, const HeadsLayout& q) {
  const int64_t group = group_of(s), rows = group * s.q_len;
  const int64_t row_stride = group > 1 && s.q_len == 1 ? q.head : q.row;
  return {data, q.batch, group * q.head, leading(rows, s.head_dim, row_stride)};
}

Operand kv_operand(const AttentionShape& s, const void* data, const HeadsLayout& layout) {
  return {data, layout.batch, layout.head, leading(s.kv_len, s.head_dim, layout.row)};
}

// Contiguous [batch, kv_heads, rows, cols] buffers (scores, outputs, gradients).
Operand dense(const AttentionShape& s, const void* data, int64_t rows, int64_t cols) {
  return {data, s.kv_heads * rows * cols, rows * cols, cols};
}

template <class S, class T>
void launch_softmax(const AttentionShape& s, const int32_t* doc_start, const S* scores, T* probs, cudaStream_t stream) {
  const int64_t rows = s.batch * s.q_heads * s.q_len;
  if (rows == 0 || s.kv_len == 0) return;
  const ScoreRows a{s.q_heads, s.q_len, s.kv_len, s.causal, doc_start};
  softmax_scores_kernel<<<warp_row_grid(rows), kBlockSize, 0, stream>>>(rows, a, scores, probs);
  GENESIS_CUDA_LAUNCH_CHECK();
}

template <class T, class G>
void launch_softmax_backward(const AttentionShape& s, const int32_t* doc_start, const T* probs, const G* grad_probs,
                             T* grad_scores, cudaStream_t stream) {
  const int64_t rows = s.batch * s.q_heads * s.q_len;
  if (rows == 0 || s.kv_len == 0) return;
  const ScoreRows a{s.q_heads, s.q_len, s.kv_len, s.causal, doc_start};
  softmax_scores_backward_kernel<<<warp_row_grid(rows), kBlockSize, 0, stream>>>(
      rows, a, static_cast<float_acc_t<T>>(s.scale), probs, grad_probs, grad_scores);
  GENESIS_CUDA_LAUNCH_CHECK();
}

// The attention kernels' element types: T the inputs', S the scores' and score gradients'
// (f32 for 16-bit inputs, so the GEMMs' f32 sums reach the softmax unrounded).
template <class F>
void with_attention_types(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f.template operator()<float, float>();
    case DType::f64: return f.template operator()<double, double>();
    case DType::f16: return f.template operator()<__half, float>();
    case DType::bf16: return f.template operator()<__nv_bfloat16, float>();
    default: throw_unsupported_dtype("scaled_dot_product_attention", dtype);
  }
}


}  // namespace

void rope(DType dtype, bool inverse, const RopeInput& x, int64_t seq, int64_t dim, const void* cos, const void* sin,
          void* y, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "rope", {
    launch_rope(inverse, x, seq, dim, static_cast<const scalar_t*>(cos), static_cast<const scalar_t*>(sin),
                static_cast<scalar_t*>(y), stream);
  });
}

void swiglu(DType dtype, int64_t n, const void* gate, const void* up, void* y, cudaStream_t stream) {
  if (n == 0) return;
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "swiglu", {
    const auto* g = static_cast<const scalar_t*>(gate);
    const auto* u = static_cast<const scalar_t*>(up);
    auto* out = static_cast<scalar_t*>(y);
    constexpr int V = kPack<scalar_t>;
    if (aligned16(g) && aligned16(u) && aligned16(out)) {
      swiglu_kernel<V><<<grid_size((n + V - 1) / V), kBlockSize, 0, stream>>>(n, g, u, out);
    } else {
      swiglu_kernel<1><<<grid_size(n), kBlockSize, 0, stream>>>(n, g, u, out);
    }
  });
  GENESIS_CUDA_LAUNCH_CHECK();
}

void swiglu_backward(DType dtype, int64_t n, const void* gate, const void* up, const void* grad_y, void* grad_gate,
                     void* grad_up, void* y, cudaStream_t stream) {
  if (n == 0) return;
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "swiglu", {
    const auto* g = static_cast<const scalar_t*>(gate);
    const auto* u = static_cast<const scalar_t*>(up);
    const auto* gy = static_cast<const scalar_t*>(grad_y);
    auto* gg = static_cast<scalar_t*>(grad_gate);
    auto* gu = static_cast<scalar_t*>(grad_up);
    auto* out = static_cast<scalar_t*>(y);
    constexpr int V = kPack<scalar_t>;
    const bool vector = aligned16(g) && aligned16(u) && aligned16(gy) && aligned16(gg) && aligned16(gu) &&
                        (!out || aligned16(out));
    const unsigned blocks = vector ? grid_size((n + V - 1) / V) : grid_size(n);
    if (vector && out) swiglu_backward_kernel<V, true><<<blocks, kBlockSize, 0, stream>>>(n, g, u, gy, gg, gu, out);
    if (vector && !out) swiglu_backward_kernel<V, false><<<blocks, kBlockSize, 0, stream>>>(n, g, u, gy, gg, gu, out);
    if (!vector && out) swiglu_backward_kernel<1, true><<<blocks, kBlockSize, 0, stream>>>(n, g, u, gy, gg, gu, out);
    if (!vector && !out) swiglu_backward_kernel<1, false><<<blocks, kBlockSize, 0, stream>>>(n, g, u, gy, gg, gu, out);
  });
  GENESIS_CUDA_LAUNCH_CHECK();
}

bool gemm_rows_ok(int64_t rows, int64_t cols, int64_t row_stride) {
  return rows <= 1 || row_stride >= cols;
}

bool attention_query_stackable(const AttentionShape& s, const HeadsLayout& q) {
  const int64_t group = group_of(s);
  if (group == 1) return gemm_rows_ok(s.q_len, s.head_dim, q.row);
  if (s.q_len == 1) return gemm_rows_ok(group, s.head_dim, q.head);
  return q.head == s.q_len * q.row && gemm_rows_ok(group * s.q_len, s.head_dim, q.row);
}

void attention(DType dtype, const AttentionShape& s, const void* q, const HeadsLayout& q_layout, const void* k,
               const HeadsLayout& k_layout, const void* v, const HeadsLayout& v_layout, const int32_t* doc_start,
               void* out, void* probs, void* scores, cudaStream_t stream) {
  const int64_t rows = group_of(s) * s.q_len;
  const bool half = is_half(dtype);
  const Operand p = dense(s, probs, rows, s.kv_len);
  grouped_gemm(dtype, s, false, true, rows, s.kv_len, s.head_dim, stacked_queries(s, q, q_layout),
               kv_operand(s, k, k_layout), half ? dense(s, scores, rows, s.kv_len) : p, s.scale, stream, half);
  with_attention_types(dtype, [&]<class T, class S>() {
    launch_softmax(s, doc_start, static_cast<const S*>(half ? scores : probs), static_cast<T*>(probs), stream);
  });
  grouped_gemm(dtype, s, false, false, rows, s.head_dim, s.kv_len, p, kv_operand(s, v, v_layout),
               dense(s, out, rows, s.head_dim), 1.0, stream);
}

void attention_backward(DType dtype, const AttentionShape& s, const void* q, const HeadsLayout& q_layout, const void* k,
                        const HeadsLayout& k_layout, const void* v, const HeadsLayout& v_layout,
                        const int32_t* doc_start, const void* probs, const void* grad_out, void* grad_q, void* grad_k,
                        void* grad_v, void* grad_probs, void* grad_scores, cudaStream_t stream) {
  const int64_t rows = group_of(s) * s.q_len;
  const bool half = is_half(dtype);
  void* ds = half ? grad_scores : grad_probs;  // f32 and f64: dS overwrites dP in place
  const Operand p = dense(s, probs, rows, s.kv_len), grad_s = dense(s, ds, rows, s.kv_len);
  const Operand grad_o = dense(s, grad_out, rows, s.head_dim);
  const Operand grad_k_out = dense(s, grad_k, s.kv_len, s.head_dim);
  // dV = P^T dO and dP = dO V^T; the group's rows are the inner dimension of dV's product.
  grouped_gemm(dtype, s, true, false, s.kv_len, s.head_dim, rows, p, grad_o, dense(s, grad_v, s.kv_len, s.head_dim),
               1.0, stream);
  grouped_gemm(dtype, s, false, true, rows, s.kv_len, s.head_dim, grad_o, kv_operand(s, v, v_layout),
               dense(s, grad_probs, rows, s.kv_len), 1.0, stream, half);
  with_attention_types(dtype, [&]<class T, class S>() {
    launch_softmax_backward(s, doc_start, static_cast<const T*>(probs), static_cast<const S*>(grad_probs),
                            static_cast<T*>(ds), stream);
  });
  // dQ = dS K and dK = dS^T Q (dS already carries the scale).
  grouped_gemm(dtype, s, false, false, rows, s.head_dim, s.kv_len, grad_s, kv_operand(s, k, k_layout),
               dense(s, grad_q, rows, s.head_dim), 1.0, stream);
  grouped_gemm(dtype, s, true, false, s.kv_len, s.head_dim, rows, grad_s, stacked_queries(s, q, q_layout),
               grad_k_out, 1.0, stream);
}

}  // namespace genesis::kernels::cuda
