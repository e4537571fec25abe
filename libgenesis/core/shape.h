#pragma once
// Shapes and strides (in elements, not bytes) and the small helpers every op needs.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace genesis {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

// Highest rank a tensor may have (the strided kernels size their index arrays by it).
inline constexpr int64_t kMaxTensorDims = 16;

int64_t numel_of(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
// Normalizes a possibly negative axis into [0, ndim); throws IndexError naming `op`.
int64_t normalize_axis(int64_t axis, int64_t ndim, const char* op);
// NumPy broadcasting of two shapes; throws ShapeError naming `op` when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
std::string shape_str(const Shape& shape);
std::ostream& operator<<(std::ostream& os, const Shape& shape);

}  // namespace genesis
