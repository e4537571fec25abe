#include "libgenesis/ops/dispatch.h"

#include "libgenesis/autograd/grad_mode.h"

namespace genesis::detail {

void throw_no_cuda() { GENESIS_THROW(DeviceError, "this build of genesis has no CUDA backend (rebuild with -DGENESIS_CUDA=ON)"); }

void check_defined(std::string_view op, const Tensor& t, std::string_view arg) {
  GENESIS_CHECK(t.defined(), ValueError, op, ": argument '", arg, "' is an undefined tensor");
}

const Tensor* check_same_device(std::string_view op, std::span<const Tensor> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (!first) {
      first = &t;
      continue;
    }
    GENESIS_CHECK(t.device() == first->device(), DeviceError, op, ": tensors are on different devices (",
                  first->device().str(), " and ", t.device().str(), "); move them to one device with .to(device)");
  }
  return first;
}

void check_same_dtype(std::string_view op, const Tensor& a, const Tensor& b) {
  GENESIS_CHECK(a.dtype() == b.dtype(), DTypeError, op, ": dtype mismatch (", dtype_name(a.dtype()), " and ",
                dtype_name(b.dtype()), ")");
}

void check_floating(std::string_view op, const Tensor& t) {
  GENESIS_CHECK(is_floating(t.dtype()), DTypeError, op, ": expected a floating tensor, got ", dtype_name(t.dtype()));
}

void check_index_dtype(std::string_view op, const Tensor& index) {
  GENESIS_CHECK(is_integral(index.dtype()), DTypeError, op, ": indices must be i32 or i64, got ",
                dtype_name(index.dtype()));
}

void check_inplace(std::string_view op, const Tensor& t) {
  GENESIS_CHECK(!grad_enabled() || !t.requires_grad(), AutogradError, op,
                ": in-place update of a tensor that requires grad; wrap it in NoGradGuard (optimizer updates) or "
                "use the out-of-place op");
  for (int64_t d = 0; d < t.dim(); ++d) {
    GENESIS_CHECK(t.stride(d) != 0 || t.size(d) <= 1, ValueError, op, ": the destination of shape ", t.shape(),
                  " is an expanded view (several elements share one memory location); write into a clone()");
  }
  t.storage()->bump_version();
}

}  // namespace genesis::detail
