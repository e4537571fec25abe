#include "kernels/cpu/index.h"

#include <algorithm>
#include <array>
#include <type_traits>

#include "kernels/cpu/loops.h"

namespace genesis::kernels::cpu {

namespace {

template <class T>
constexpr int64_t sz() {
  return static_cast<int64_t>(sizeof(T));
}

template <class I>
int64_t first_out_of_range_typed(int64_t n, const I* index, int64_t bound) {
  for (int64_t i = 0; i < n; ++i)
    if (index[i] < 0 || static_cast<int64_t>(index[i]) >= bound) return i;
  return -1;
}

// Runs over all positions in row-major order; x's axis stride is zeroed because the index
// supplies that coordinate, added back per element.
template <class T, class I>
void gather_typed(int ndim, const int64_t* shape, int axis, const void* x, const int64_t* x_strides, const void* index,
                  const int64_t* index_strides, void* out, const int64_t* out_strides) {
  int64_t x_strides_off_axis[kMaxDims];
  std::copy(x_strides, x_strides + ndim, x_strides_off_axis);
  x_strides_off_axis[axis] = 0;
  const int64_t x_step = x_strides[axis] * sz<T>();
  auto inner = [&](std::array<char*, 3> p, std::array<int64_t, 3> st, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = static_cast<int64_t>(*reinterpret_cast<const I*>(p[1] + i * st[1]));
      *reinterpret_cast<T*>(p[2] + i * st[2]) = *reinterpret_cast<const T*>(p[0] + i * st[0] + k * x_step);
    }
  };
  strided_for_each<3>(ndim, shape,
                      {const_cast<char*>(static_cast<const char*>(x)),
                       const_cast<char*>(static_cast<const char*>(index)), static_cast<char*>(out)},
                      {x_strides_off_axis, index_strides, out_strides}, {sz<T>(), sz<I>(), sz<T>()}, inner);
}

// Iterates the positions with axis coordinate 0 (threads split these), and for each run of
// them walks the whole axis: every destination line belongs to one thread.
template <class T, class I>
void scatter_add_typed(int ndim, const int64_t* shape, int axis, void* dst, const int64_t* dst_strides,
                       const void* index, const int64_t* index_strides, const void* src, const int64_t* src_strides) {
  using A = acc_t<T>;
  const int64_t length = shape[axis];
  if (length == 0) return;
  int64_t line_shape[kMaxDims];
  std::copy(shape, shape + ndim, line_shape);
  line_shape[axis] = 1;
  const int64_t dst_step = dst_strides[axis] * sz<T>();
  const int64_t index_step = index_strides[axis] * sz<I>();
  const int64_t src_step = src_strides[axis] * sz<T>();
  auto inner = [&](std::array<char*, 3> p, std::array<int64_t, 3> st, int64_t n) {
    for (int64_t a = 0; a < length; ++a) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t k = static_cast<int64_t>(*reinterpret_cast<const I*>(p[1] + i * st[1] + a * index_step));
        T* d = reinterpret_cast<T*>(p[0] + i * st[0] + k * dst_step);
        const T s = *reinterpret_cast<const T*>(p[2] + i * st[2] + a * src_step);
        *d = static_cast<T>(static_cast<A>(*d) + static_cast<A>(s));
      }
    }
  };
  strided_for_each<3>(ndim, line_shape,
                      {static_cast<char*>(dst), const_cast<char*>(static_cast<const char*>(index)),
                       const_cast<char*>(static_cast<const char*>(src))},
                      {dst_strides, index_strides, src_strides}, {sz<T>(), sz<I>(), sz<T>()}, inner);
}

// Row by row: a prefix (lower) or suffix (upper) of each row is kept, the rest zeroed.
template <class T>
void triangle_typed(bool lower, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal, const T* x, T* out) {
  parallel_for(batch * rows, cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r % rows;
      const int64_t edge = std::clamp<int64_t>(i + diagonal + (lower ? 1 : 0), 0, cols);
      const T* in = x + r * cols;
      T* o = out + r * cols;
      if (lower) {
        std::copy(in, in + edge, o);
        std::fill(o + edge, o + cols, T(0));
      } else {
        std::fill(o, o + edge, T(0));
        std::copy(in + edge, in + cols, o + edge);
      }
    }
  });
}

}  // namespace

int64_t first_out_of_range(DType index_dtype, int64_t n, const void* index, int64_t bound) {
  int64_t bad = -1;
  GENESIS_DISPATCH_INDEX(index_dtype, "index check",
                         bad = first_out_of_range_typed(n, static_cast<const scalar_t*>(index), bound));
  return bad;
}

void gather(DType dtype, DType index_dtype, int ndim, const int64_t* shape, int axis, const void* x,
            const int64_t* x_strides, const void* index, const int64_t* index_strides, void* out,
            const int64_t* out_strides) {
  GENESIS_DISPATCH_ALL(dtype, "gather", {
    using T = scalar_t;
    GENESIS_DISPATCH_INDEX(index_dtype, "gather", {
      gather_typed<T, scalar_t>(ndim, shape, axis, x, x_strides, index, index_strides, out, out_strides);
    });
  });
}

void scatter_add(DType dtype, DType index_dtype, int ndim, const int64_t* shape, int axis, void* dst,
                 const int64_t* dst_strides, const void* index, const int64_t* index_strides, const void* src,
                 const int64_t* src_strides) {
  GENESIS_DISPATCH_NUMERIC(dtype, "scatter_add", {
    using T = scalar_t;
    GENESIS_DISPATCH_INDEX(index_dtype, "scatter_add", {
      scatter_add_typed<T, scalar_t>(ndim, shape, axis, dst, dst_strides, index, index_strides, src, src_strides);
    });
  });
}

void triangle(DType dtype, bool lower, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal, const void* x,
              void* out) {
  GENESIS_DISPATCH_ALL(dtype, "tril/triu", {
    triangle_typed<scalar_t>(lower, batch, rows, cols, diagonal, static_cast<const scalar_t*>(x),
                             static_cast<scalar_t*>(out));
  });
}

}  // namespace genesis::kernels::cpu
