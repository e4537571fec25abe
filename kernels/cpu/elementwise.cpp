#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/common/math.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/vec_math.h"

#if GENESIS_CPU_MULTI_ISA
#include <immintrin.h>
#endif

namespace genesis::kernels::cpu {

namespace {

#if GENESIS_CPU_MULTI_ISA
// f32 -> f16 with the F16C conversion, eight at a time: round to nearest even, NaNs quieted with
// their payload's top bits kept, as float16(float) does bit for bit (the tail goes through it).
// Every CPU with AVX2 here has F16C (cpu_features checks it).
__attribute__((target("arch=x86-64-v3"))) void f32_to_f16_f16c(const float* src, float16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i half = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), half);
  }
  for (; i < n; ++i) dst[i] = float16(src[i]);
}
#endif

template <class T>
constexpr bool kIsFloat = std::is_floating_point_v<T> || std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

// f32, bf16 and f16 compute in float through vec_math.h's formulas (one per op, whatever the
// layout, so a view and its contiguous copy give the same bits); f64 through math.h's.
template <class T>
constexpr bool kFloatMath = kIsFloat<T> && std::is_same_v<acc_t<T>, float>;

template <class T>
constexpr int64_t sz() {
  return static_cast<int64_t>(sizeof(T));
}

// Integer forms of the unary ops that keep integer dtypes (the op layer sends only these).
template <class T>
T unary_integer(UnaryOp op, T x, double lo, double hi) {
  switch (op) {
    case UnaryOp::neg: return static_cast<T>(-x);
    case UnaryOp::abs: return x < 0 ? static_cast<T>(-x) : x;
    case UnaryOp::relu: return x > 0 ? x : T(0);
    case UnaryOp::sign: return static_cast<T>((x > 0) - (x < 0));
    case UnaryOp::clamp: {
      double y = static_cast<double>(x);
      if (!std::isnan(lo) && y < lo) y = std::ceil(lo);
      if (!std::isnan(hi) && y > hi) y = std::floor(hi);
      return static_cast<T>(y);
    }
    default: return x;
  }
}

template <class T, UnaryOp OP>
void unary_typed(int ndim, const int64_t* shape, const void* x, const int64_t* xs, void* y, ElementwiseParams p) {
  ContiguousStrides ys(ndim, shape);
  auto apply = [&](T v) -> T {
    if constexpr (kFloatMath<T>) {
      return static_cast<T>(vec::unary<OP>(static_cast<float>(v), static_cast<float>(p.a), static_cast<float>(p.b)));
    } else if constexpr (kIsFloat<T>) {
      using A = acc_t<T>;
      return static_cast<T>(unary_float<A>(OP, static_cast<A>(v), static_cast<A>(p.a), static_cast<A>(p.b)));
    } else {
      return unary_integer<T>(OP, v, p.a, p.b);
    }
  };
  auto inner = [&](std::array<char*, 2> ptr, std::array<int64_t, 2> st, int64_t n) {
    if (st[0] == sz<T>() && st[1] == sz<T>()) {  // dense run: typed pointers let the compiler vectorize
      const T* x_run = reinterpret_cast<const T*>(ptr[0]);
      T* y_run = reinterpret_cast<T*>(ptr[1]);
      with_cpu_isa([&] {
        for (int64_t i = 0; i < n; ++i) y_run[i] = apply(x_run[i]);
      });
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<T*>(ptr[1] + i * st[1]) = apply(*reinterpret_cast<const T*>(ptr[0] + i * st[0]));
  };
  strided_for_each<2>(ndim, shape, {const_cast<char*>(static_cast<const char*>(x)), static_cast<char*>(y)},
                      {xs, ys.s}, {sz<T>(), sz<T>()}, inner);
}

// Work per element for parallel_for: the ops with a transcendental function cost about 8 loads.
constexpr int64_t unary_cost(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg:
    case UnaryOp::abs:
    case UnaryOp::relu:
    case UnaryOp::sign:
    case UnaryOp::clamp:
    case UnaryOp::sqrt:
    case UnaryOp::rsqrt: return 1;
    default: return 8;
  }
}

template <class T, UnaryOp OP>
void unary_backward_typed(int64_t n, const void* x, const void* gy, void* gx, ElementwiseParams p) {
  using A = acc_t<T>;
  const T* xp = static_cast<const T*>(x);
  const T* gp = static_cast<const T*>(gy);
  T* op = static_cast<T*>(gx);
  parallel_for(n, unary_cost(OP), [&](int64_t b, int64_t e) {
    with_cpu_isa([&] {
      for (int64_t i = b; i < e; ++i) {
        A d;
        if constexpr (kFloatMath<T>) {
          d = vec::unary_derivative<OP>(static_cast<float>(xp[i]), static_cast<float>(p.a), static_cast<float>(p.b));
        } else {
          d = unary_float_derivative<A>(OP, static_cast<A>(xp[i]), static_cast<A>(p.a), static_cast<A>(p.b));
        }
        op[i] = static_cast<T>(static_cast<A>(gp[i]) * d);
      }
    });
  });
}

template <class T, BinaryOp OP>
void binary_typed(int ndim, const int64_t* shape, const void* a, const int64_t* as, const void* b,
                  const int64_t* bs, void* out) {
  constexpr bool kCompare = is_comparison(OP);
  using Out = std::conditional_t<kCompare, bool, T>;
  ContiguousStrides os(ndim, shape);
  auto compute = [&](T va, T vb) -> Out {
      Out r;
      if constexpr (kIsFloat<T>) {
        using A = acc_t<T>;
        if constexpr (kCompare) {
          r = binary_compare<A>(OP, static_cast<A>(va), static_cast<A>(vb));
        } else {
          r = static_cast<T>(binary_arith<A>(OP, static_cast<A>(va), static_cast<A>(vb)));
        }
      } else if constexpr (kCompare) {
        r = binary_compare<T>(OP, va, vb);
      } else if constexpr (std::is_same_v<T, bool>) {
        // bool arithmetic: add/maximum act as logical or, mul/minimum as logical and.
        if constexpr (OP == BinaryOp::add || OP == BinaryOp::maximum) r = va || vb;
        else if constexpr (OP == BinaryOp::mul || OP == BinaryOp::minimum) r = va && vb;
        else r = va != vb;
      } else if constexpr (OP == BinaryOp::div) {
        r = vb == 0 ? T(0) : static_cast<T>(va / vb);  // the op layer promotes integer div; guard anyway
      } else if constexpr (OP == BinaryOp::pow) {
        T acc = 1;
        for (T e = 0; e < vb; ++e) acc = static_cast<T>(acc * va);
        r = vb < 0 ? T(0) : acc;
      } else {
        r = binary_arith<T>(OP, va, vb);
      }
      return r;
  };
  auto inner = [&](std::array<char*, 3> ptr, std::array<int64_t, 3> st, int64_t n) {
    Out* o = reinterpret_cast<Out*>(ptr[2]);
    if (st[2] == sz<Out>() && st[0] == sz<T>() && (st[1] == sz<T>() || st[1] == 0)) {
      // Dense runs (the second operand dense or a broadcast scalar): typed loops vectorize.
      const T* a_run = reinterpret_cast<const T*>(ptr[0]);
      const T* b_run = reinterpret_cast<const T*>(ptr[1]);
      with_cpu_isa([&] {
        if (st[1] == 0) {
          const T b0 = *b_run;
          for (int64_t i = 0; i < n; ++i) o[i] = compute(a_run[i], b0);
        } else {
          for (int64_t i = 0; i < n; ++i) o[i] = compute(a_run[i], b_run[i]);
        }
      });
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      *reinterpret_cast<Out*>(ptr[2] + i * st[2]) =
          compute(*reinterpret_cast<const T*>(ptr[0] + i * st[0]), *reinterpret_cast<const T*>(ptr[1] + i * st[1]));
    }
  };
  strided_for_each<3>(ndim, shape,
                      {const_cast<char*>(static_cast<const char*>(a)), const_cast<char*>(static_cast<const char*>(b)),
                       static_cast<char*>(out)},
                      {as, bs, os.s}, {sz<T>(), sz<T>(), sz<Out>()}, inner);
}

template <class Src, class Dst>
Dst cast_value(Src v) {
  if constexpr (std::is_same_v<Dst, bool>) {
    return static_cast<float>(v) != 0.0f || static_cast<double>(v) != 0.0;
  } else if constexpr (std::is_same_v<Src, float16> || std::is_same_v<Src, bfloat16>) {
    return static_cast<Dst>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<Dst, float16> || std::is_same_v<Dst, bfloat16>) {
    return Dst(static_cast<float>(v));
  } else {
    return static_cast<Dst>(v);
  }
}

// A copy that writes rows but reads columns (a transpose made contiguous): the last two merged
// dimensions go in square tiles whose source cache lines stay in L1 while the tile's rows are
// written, instead of one line fetched per element. Returns false for other layouts.
template <class Src, class Dst>
bool copy_transposed(int ndim, const int64_t* shape, const void* src, const int64_t* ss, void* dst,
                     const int64_t* ds) {
  constexpr int64_t kTile = 32;
  const StridedGeometry<2> g(ndim, shape, {ss, ds}, {sz<Src>(), sz<Dst>()});
  const int last = g.ndim - 1;
  if (g.ndim < 2 || g.strides[1][last] != sz<Dst>() || g.strides[0][last - 1] != sz<Src>()) return false;
  const int64_t rows = g.shape[last - 1], cols = g.shape[last];
  if (rows < kTile || cols < kTile) return false;
  const int64_t tile_rows = (rows + kTile - 1) / kTile, tile_cols = (cols + kTile - 1) / kTile;
  const int64_t planes = g.numel() / (rows * cols), tiles = tile_rows * tile_cols;
  const int64_t src_row = g.strides[0][last - 1], src_col = g.strides[0][last];
  const int64_t dst_row = g.strides[1][last - 1];  // columns are unit-stride
  parallel_for(planes * tiles, kTile * kTile, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      int64_t plane = task / tiles;
      const char* s = static_cast<const char*>(src);
      char* d = static_cast<char*>(dst);
      for (int dim = last - 2; dim >= 0; --dim) {  // the plane's offset in the outer dimensions
        const int64_t i = plane % g.shape[dim];
        plane /= g.shape[dim];
        s += i * g.strides[0][dim];
        d += i * g.strides[1][dim];
      }
      const int64_t r0 = (task % tiles) / tile_cols * kTile, c0 = (task % tiles) % tile_cols * kTile;
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r) {
        const char* sr = s + r * src_row;
        Dst* dr = reinterpret_cast<Dst*>(d + r * dst_row);
        for (int64_t c = c0; c < c1; ++c)
          dr[c] = cast_value<Src, Dst>(*reinterpret_cast<const Src*>(sr + c * src_col));
      }
    }
  });
  return true;
}

template <class Src, class Dst>
void copy_typed(int ndim, const int64_t* shape, const void* src, const int64_t* ss, void* dst, const int64_t* ds) {
  if (copy_transposed<Src, Dst>(ndim, shape, src, ss, dst, ds)) return;
  auto inner = [&](std::array<char*, 2> ptr, std::array<int64_t, 2> st, int64_t n) {
    if (st[0] == sz<Src>() && st[1] == sz<Dst>()) {
      if constexpr (std::is_same_v<Src, Dst>) {
        std::memcpy(ptr[1], ptr[0], static_cast<size_t>(n) * sizeof(Src));
      } else {  // a dense conversion: typed pointers, vector code (bf16 rounding is bit arithmetic)
        const Src* src_run = reinterpret_cast<const Src*>(ptr[0]);
        Dst* dst_run = reinterpret_cast<Dst*>(ptr[1]);
#if GENESIS_CPU_MULTI_ISA
        // GCC vectorizes float16(float)'s branches into ten-odd instructions an element.
        if constexpr (std::is_same_v<Src, float> && std::is_same_v<Dst, float16>) {
          if (cpu_isa() != CpuIsa::baseline) return f32_to_f16_f16c(src_run, dst_run, n);
        }
#endif
        with_cpu_isa([&] {
          for (int64_t i = 0; i < n; ++i) dst_run[i] = cast_value<Src, Dst>(src_run[i]);
        });
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<Dst*>(ptr[1] + i * st[1]) = cast_value<Src, Dst>(*reinterpret_cast<const Src*>(ptr[0] + i * st[0]));
  };
  strided_for_each<2>(ndim, shape, {const_cast<char*>(static_cast<const char*>(src)), static_cast<char*>(dst)}, {ss, ds},
                      {sz<Src>(), sz<Dst>()}, inner);
}

#define GENESIS_UNARY_CASE(name) \
  case UnaryOp::name: return unary_typed<T, UnaryOp::name>(ndim, shape, x, xs, y, p);
template <class T>
void unary_op(UnaryOp op, int ndim, const int64_t* shape, const void* x, const int64_t* xs, void* y,
              ElementwiseParams p) {
  switch (op) { GENESIS_FORALL_UNARY_OPS(GENESIS_UNARY_CASE) }
}
#undef GENESIS_UNARY_CASE

#define GENESIS_UNARY_BWD_CASE(name) \
  case UnaryOp::name: return unary_backward_typed<T, UnaryOp::name>(n, x, gy, gx, p);
template <class T>
void unary_backward_op(UnaryOp op, int64_t n, const void* x, const void* gy, void* gx, ElementwiseParams p) {
  switch (op) { GENESIS_FORALL_UNARY_OPS(GENESIS_UNARY_BWD_CASE) }
}
#undef GENESIS_UNARY_BWD_CASE

#define GENESIS_BINARY_CASE(name) \
  case BinaryOp::name: return binary_typed<T, BinaryOp::name>(ndim, shape, a, as, b, bs, out);
template <class T>
void binary_op(BinaryOp op, int ndim, const int64_t* shape, const void* a, const int64_t* as, const void* b,
               const int64_t* bs, void* out) {
  switch (op) { GENESIS_FORALL_BINARY_OPS(GENESIS_BINARY_CASE) }
}
#undef GENESIS_BINARY_CASE

}  // namespace

void unary(UnaryOp op, DType dtype, int ndim, const int64_t* shape, const void* x, const int64_t* x_strides, void* y,
           ElementwiseParams params) {
  GENESIS_DISPATCH_NUMERIC(dtype, "unary", unary_op<scalar_t>(op, ndim, shape, x, x_strides, y, params));
}

void unary_backward(UnaryOp op, DType dtype, int64_t n, const void* x, const void* grad_y, void* grad_x,
                    ElementwiseParams params) {
  GENESIS_DISPATCH_FLOAT(dtype, "unary backward", unary_backward_op<scalar_t>(op, n, x, grad_y, grad_x, params));
}

void binary(BinaryOp op, DType dtype, int ndim, const int64_t* shape, const void* a, const int64_t* a_strides,
            const void* b, const int64_t* b_strides, void* out) {
  GENESIS_DISPATCH_ALL(dtype, "binary", binary_op<scalar_t>(op, ndim, shape, a, a_strides, b, b_strides, out));
}

void where(DType dtype, int ndim, const int64_t* shape, const bool* cond, const int64_t* cond_strides, const void* a,
           const int64_t* a_strides, const void* b, const int64_t* b_strides, void* out) {
  GENESIS_DISPATCH_ALL(dtype, "where", {
    ContiguousStrides os(ndim, shape);
    auto inner = [&](std::array<char*, 4> ptr, std::array<int64_t, 4> st, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        bool c = *reinterpret_cast<const bool*>(ptr[0] + i * st[0]);
        const char* src = c ? ptr[1] + i * st[1] : ptr[2] + i * st[2];
        *reinterpret_cast<scalar_t*>(ptr[3] + i * st[3]) = *reinterpret_cast<const scalar_t*>(src);
      }
    };
    strided_for_each<4>(ndim, shape,
                        {const_cast<char*>(reinterpret_cast<const char*>(cond)),
                         const_cast<char*>(static_cast<const char*>(a)),
                         const_cast<char*>(static_cast<const char*>(b)), static_cast<char*>(out)},
                        {cond_strides, a_strides, b_strides, os.s}, {1, sz<scalar_t>(), sz<scalar_t>(), sz<scalar_t>()},
                        inner);
  });
}

void copy(int ndim, const int64_t* shape, DType src_dtype, const void* src, const int64_t* src_strides,
          DType dst_dtype, void* dst, const int64_t* dst_strides) {
  GENESIS_DISPATCH_ALL(src_dtype, "copy", {
    using Src = scalar_t;
    GENESIS_DISPATCH_ALL(dst_dtype, "copy", {
      copy_typed<Src, scalar_t>(ndim, shape, src, src_strides, dst, dst_strides);
    });
  });
}

void fill(DType dtype, int64_t n, void* dst, double value) {
  GENESIS_DISPATCH_ALL(dtype, "fill", {
    scalar_t v = cast_value<double, scalar_t>(value);
    scalar_t* p = static_cast<scalar_t*>(dst);
    parallel_for(n, 1, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
  });
}

}  // namespace genesis::kernels::cpu
