// Copies, casts and device transfers: contiguous, clone, to(dtype), to(device), copy_, fill_.
#include <cstring>

#include "kernels/cpu/elementwise.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/factory.h"
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

}  // namespace

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), {.dtype = dtype(), .device = device()});
  copy_same_device(out, *this);
  if (needs_grad({*this})) record("clone", {*this}, {out}, [](const TensorList& g) { return TensorList{g[0]}; });
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = empty(shape(), {.dtype = target, .device = device()});
  copy_same_device(out, *this);
  if (is_floating(target) && needs_grad({*this})) {
    DType source = dtype();
    record("to_dtype", {*this}, {out}, [source](const TensorList& g) { return TensorList{g[0].to(source)}; });
  }
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor out = transfer(*this, target);
  if (needs_grad({*this})) {
    Device source = device();
    record("to_device", {*this}, {out}, [source](const TensorList& g) { return TensorList{g[0].to(source)}; });
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
  Tensor filled = full(shape(), value, {.dtype = dtype(), .device = device()});
  copy_same_device(*this, filled);
  return *this;
}

}  // namespace genesis
