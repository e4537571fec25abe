// Copies, casts and device transfers: contiguous, clone, to(dtype), to(device), copy_, fill_.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/prologue.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/elementwise.h"
#endif

namespace genesis {

namespace {

// dst <- cast(src) elementwise; shapes equal, devices equal; any strides. No autograd.
void copy_same_device(const Tensor& dst, const Tensor& src) {
  int nd = static_cast<int>(dst.dim());
  if (dst.device().is_cpu()) {
    kernels::cpu::copy(nd, dst.shape().data(), src.dtype(), src.data_ptr(), src.strides().data(), dst.dtype(),
                       dst.data_ptr(), dst.strides().data());
  } else {
    GENESIS_ON_CUDA(kernels::cuda::copy(nd, dst.shape().data(), src.dtype(), src.data_ptr(), src.strides().data(),
                                        dst.dtype(), dst.data_ptr(), dst.strides().data(), cuda::current_stream()));
  }
}

// A contiguous copy of `src` (same dtype) on `device`.
Tensor transfer(const Tensor& src, Device device) {
  Tensor s = src.contiguous();
  Tensor out = empty(s.shape(), {.dtype = s.dtype(), .device = device});
  size_t nbytes = static_cast<size_t>(s.numel()) * s.element_size();
  if (nbytes == 0) return out;
  if (s.device().is_cpu() && device.is_cpu()) {
    std::memcpy(out.data_ptr(), s.data_ptr(), nbytes);
  } else {
    GENESIS_ON_CUDA(cuda::memcpy(out.data_ptr(), out.device(), s.data_ptr(), s.device(), nbytes));
  }
  return out;
}

// The axis order that lays `t` out contiguously when t is a permutation of a contiguous
// tensor (a transposed weight, the [B, H, T, D] view of a [B, T, H, D] projection), or an
// empty vector. Axes of size 1 stay in place.
std::vector<int64_t> dense_axis_order(const Tensor& t) {
  std::vector<int64_t> order(static_cast<size_t>(t.dim()));
  for (int64_t d = 0; d < t.dim(); ++d) order[static_cast<size_t>(d)] = d;
  std::stable_sort(order.begin(), order.end(), [&t](int64_t a, int64_t b) {
    if (t.size(a) == 1 || t.size(b) == 1) return false;
    return t.stride(a) > t.stride(b);
  });
  return t.permute(order).is_contiguous() ? order : std::vector<int64_t>{};
}

}  // namespace

Tensor Tensor::contiguous() const {
  auto [self] = detail::op_prologue<OpId::contiguous>(*this);
  return self.is_contiguous() ? self : self.clone();
}

Tensor Tensor::clone() const {
  auto [self] = detail::op_prologue<OpId::clone>(*this);
  Tensor out = empty(self.shape(), {.dtype = self.dtype(), .device = self.device()});
  copy_same_device(out, self);
  if (needs_grad({self})) record("clone", {self}, {out}, [](const TensorList& g) { return TensorList{g[0]}; });
  return out;
}

Tensor Tensor::to(DType target) const {
  auto [self] = detail::op_prologue<OpId::to_dtype>(*this);
  if (target == self.dtype()) return self;
  // A permutation of a contiguous tensor keeps its layout (as PyTorch's preserve_format does):
  // the cast then streams through memory instead of gathering through strides.
  const Tensor out = [&, &self = self] {  // named: clang < 16 cannot capture a structured binding
    NoGradGuard views_only;  // layout permutes; the cast itself is recorded below
    const std::vector<int64_t> order = self.is_contiguous() ? std::vector<int64_t>{} : dense_axis_order(self);
    if (order.empty()) {
      Tensor cast = empty(self.shape(), {.dtype = target, .device = self.device()});
      copy_same_device(cast, self);
      return cast;
    }
    std::vector<int64_t> inverse(order.size());
    for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
    Tensor dense = self.permute(order);
    Tensor cast = empty(dense.shape(), {.dtype = target, .device = self.device()});
    copy_same_device(cast, dense);
    return cast.permute(inverse);
  }();
  if (is_floating(target) && needs_grad({self})) {
    DType source = self.dtype();
    record("to_dtype", {self}, {out}, [source](const TensorList& g) { return TensorList{g[0].to(source)}; });
  }
  return out;
}

Tensor Tensor::to(Device target) const {
  auto [self] = detail::op_prologue<OpId::to_device>(*this);
  if (target == self.device()) return self;
  Tensor out = transfer(self, target);
  if (needs_grad({self})) {
    Device source = self.device();
    record("to_device", {self}, {out}, [source](const TensorList& g) { return TensorList{g[0].to(source)}; });
  }
  return out;
}

Tensor& Tensor::copy_(const Tensor& src) {
  detail::check_defined("copy_", src, "src");
  detail::check_inplace("copy_", *this);
  GENESIS_CHECK(!needs_grad({src}), AutogradError,
                "copy_: gradients do not flow through copy_; detach the source or copy under NoGradGuard");
  Tensor s = src.device() == device() ? src : transfer(src, device());
  s = s.expand(shape());
  if (s.shares_storage(*this)) s = s.clone();  // overlapping source and destination
  copy_same_device(*this, s);
  return *this;
}

Tensor& Tensor::fill_(double value) {
  detail::check_inplace("fill_", *this);
  if (is_contiguous()) {
    if (device().is_cpu()) {
      kernels::cpu::fill(dtype(), numel(), data_ptr(), value);
    } else {
      GENESIS_ON_CUDA(kernels::cuda::fill(dtype(), numel(), data_ptr(), value, cuda::current_stream()));
    }
    return *this;
  }
  // A strided destination (a region of a larger buffer): one element broadcast by zero strides.
  Tensor value_tensor = full({}, value, {.dtype = dtype(), .device = device()});
  copy_same_device(*this, value_tensor.expand(shape()));
  return *this;
}

// Tensor's host reads (declared in core/tensor.h): a copy to the host in the asked dtype.
double Tensor::item() const {
  GENESIS_CHECK(numel() == 1, ValueError, "item(): the tensor has ", numel(), " elements (shape ", shape(),
                "); item() needs exactly one");
  Tensor host = to(kCPU).to(DType::f64).contiguous();
  return *host.data<double>();
}

template <class T> std::vector<T> Tensor::to_vector() const {
  Tensor host = to(kCPU).to(dtype_of<T>()).contiguous();
  const T* p = host.data<T>();
  return std::vector<T>(p, p + host.numel());
}
#define GENESIS_INSTANTIATE_TO_VECTOR(name, type, str) template std::vector<type> Tensor::to_vector<type>() const;
GENESIS_FORALL_DTYPES(GENESIS_INSTANTIATE_TO_VECTOR)
#undef GENESIS_INSTANTIATE_TO_VECTOR

}  // namespace genesis
