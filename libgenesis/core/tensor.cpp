#include "libgenesis/core/tensor.h"

#include "libgenesis/core/error.h"

namespace genesis {

TensorImpl::TensorImpl(std::shared_ptr<Storage> s, Shape sh, Strides st, int64_t off, DType dt)
    : storage(std::move(s)), shape(std::move(sh)), strides(std::move(st)), offset(off), dtype(dt) {
  GENESIS_CHECK(static_cast<int64_t>(shape.size()) <= kMaxTensorDims, ShapeError, "tensor of ", shape.size(),
                " dimensions: at most ", kMaxTensorDims, " are supported");
}

TensorImpl::~TensorImpl() = default;

AutogradMeta& TensorImpl::autograd_meta() {
  if (!autograd) autograd = std::make_unique<AutogradMeta>();
  return *autograd;
}

TensorImpl& Tensor::impl() const {
  GENESIS_CHECK(impl_ != nullptr, ValueError, "use of an undefined (default-constructed) Tensor");
  return *impl_;
}

int64_t Tensor::size(int64_t axis) const { return shape()[normalize_axis(axis, dim(), "size")]; }
int64_t Tensor::stride(int64_t axis) const { return strides()[normalize_axis(axis, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // an empty tensor has no layout to violate
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;
    if (strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

void* Tensor::data_ptr() const {
  return static_cast<char*>(storage()->data()) + offset() * static_cast<int64_t>(element_size());
}

void Tensor::set_data(const Tensor& src) {
  GENESIS_CHECK(src.defined(), ValueError, "set_data: the source tensor is undefined");
  GENESIS_CHECK(src.shape() == shape() && src.dtype() == dtype(), ValueError, "set_data: a ", dtype_name(dtype()),
                " tensor of shape ", shape(), " cannot view ", dtype_name(src.dtype()), " data of shape ", src.shape());
  TensorImpl& self = impl();
  self.storage = src.storage();
  self.strides = src.strides();
  self.offset = src.offset();
}

Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(base.storage(), std::move(shape), std::move(strides), offset, base.dtype()));
}

}  // namespace genesis
