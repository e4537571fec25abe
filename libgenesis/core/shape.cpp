#include "libgenesis/core/shape.h"

#include <ostream>

#include "libgenesis/core/error.h"

namespace genesis {

// Shapes come from files too (safetensors, IDX, config.json): products that do not fit in
// int64 are a ShapeError, not signed overflow.
int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d == 0) return 0;
    overflow |= __builtin_mul_overflow(n, d, &n);
  }
  GENESIS_CHECK(!overflow, ShapeError, "shape ", shape, " has more elements than fit in int64");
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    GENESIS_CHECK(!__builtin_mul_overflow(acc, shape[i] > 0 ? shape[i] : 1, &acc), ShapeError, "shape ", shape,
                  " has strides too large for int64");
  }
  return s;
}

int64_t normalize_axis(int64_t axis, int64_t ndim, const char* op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  GENESIS_CHECK(axis >= lo && axis <= hi, IndexError, op, ": axis ", axis, " is out of range for a tensor of ", ndim,
                " dimension(s) (expected ", lo, "..", hi, ")");
  return axis < 0 ? axis + (ndim == 0 ? 1 : ndim) : axis;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    GENESIS_CHECK(da == db || da == 1 || db == 1, ShapeError, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                  " cannot be broadcast together (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << shape_str(shape); }

}  // namespace genesis
