// Readable printing in the spirit of PyTorch: nested brackets, aligned columns,
// long dimensions summarized with "...".
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "libgenesis/core/tensor.h"

namespace genesis {

namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

std::string format_value(double v, DType dt) {
  char buf[64];
  if (dt == DType::boolean) return v != 0.0 ? "true" : "false";
  if (!is_floating(dt)) {
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
  } else if (std::isnan(v)) {
    return "nan";
  } else if (std::isinf(v)) {
    return v > 0 ? "inf" : "-inf";
  } else if (v != 0.0 && (std::fabs(v) >= 1e5 || std::fabs(v) < 1e-4)) {
    std::snprintf(buf, sizeof(buf), "%.4e", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.4f", v);
  }
  return buf;
}

void print_dim(std::ostream& os, const std::vector<double>& values, const Shape& shape, const Strides& strides,
               int64_t offset, int64_t d, bool summarize, size_t width, DType dt, int indent) {
  int64_t n = shape[static_cast<size_t>(d)];
  bool last = d == static_cast<int64_t>(shape.size()) - 1;
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (last ? "..., " : "...,\n" + std::string(static_cast<size_t>(indent + 1), ' '));
      i = n - kEdgeItems;
    }
    int64_t off = offset + i * strides[static_cast<size_t>(d)];
    if (last) {
      std::string s = format_value(values[static_cast<size_t>(off)], dt);
      os << std::string(width > s.size() ? width - s.size() : 0, ' ') << s;
    } else {
      print_dim(os, values, shape, strides, off, d + 1, summarize, width, dt, indent + 1);
    }
    if (i + 1 < n) os << (last ? ", " : ",\n" + std::string(static_cast<size_t>(indent + 1), ' '));
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<double> values = to_vector<double>();
  std::ostringstream os;
  os << "tensor(";
  size_t width = 0;
  for (double v : values) width = std::max(width, format_value(v, dtype()).size());
  if (dim() == 0) {
    os << format_value(values[0], dtype());
  } else if (numel() == 0) {
    os << "[]";
  } else {
    print_dim(os, values, shape(), contiguous_strides(shape()), 0, 0, numel() > kSummarizeAbove, width, dtype(), 7);
  }
  os << ", shape=" << shape() << ", dtype=" << dtype_name(dtype());
  if (!device().is_cpu()) os << ", device=" << device().str();
  if (requires_grad()) os << ", requires_grad=true";
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace genesis
