#pragma once
// Tensor: a cheap, shared handle to a TensorImpl (storage + shape + strides + offset +
// dtype + autograd metadata). Views share storage. Copying a Tensor copies the handle.
//
// Method bodies that are operations (views, casts, autograd) live with their ops in
// libgenesis/ops and libgenesis/autograd; this header only declares the handle.
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "libgenesis/core/device.h"
#include "libgenesis/core/dtype.h"
#include "libgenesis/core/shape.h"
#include "libgenesis/core/storage.h"

namespace genesis {

class Tensor;
class Node;  // autograd graph node (libgenesis/autograd)

struct TensorOptions {
  DType dtype = DType::f32;
  Device device = kCPU;
  bool requires_grad = false;
};

// Hook on a leaf's incoming gradient; may return a replacement (or an undefined Tensor to keep it).
using GradHook = std::function<Tensor(const Tensor& grad)>;
// Hook run after a leaf's .grad was updated (data-parallel gradient sync hangs here).
using PostAccumulateHook = std::function<void(Tensor& leaf)>;

struct AutogradMeta;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  std::unique_ptr<AutogradMeta> autograd;  // null until autograd needs it

  TensorImpl(std::shared_ptr<Storage> s, Shape sh, Strides st, int64_t off, DType dt);
  ~TensorImpl();
  AutogradMeta& autograd_meta();
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- metadata -----------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Strides& strides() const { return impl().strides; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t axis) const;
  int64_t stride(int64_t axis) const;
  int64_t offset() const { return impl().offset; }
  int64_t numel() const { return numel_of(impl().shape); }
  DType dtype() const { return impl().dtype; }
  size_t element_size() const { return dtype_size(impl().dtype); }
  Device device() const { return impl().storage->device(); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  // Address of the first element (storage base + offset).
  void* data_ptr() const;
  // Typed pointer; throws DTypeError when T does not match dtype().
  template <class T> T* data() const;
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  // True when both tensors view the same storage.
  bool shares_storage(const Tensor& other) const { return storage() == other.storage(); }

  // --- host reads (synchronize with the device; libgenesis/ops/copy.cpp) ---
  double item() const;
  template <class T> T item() const { return static_cast<T>(item()); }
  // All elements in logical (row-major) order, converted to T.
  template <class T> std::vector<T> to_vector() const;

  // --- views and copies (libgenesis/ops/views.cpp) -------------------------
  Tensor view(const Shape& shape) const;     // requires compatible strides
  Tensor reshape(const Shape& shape) const;  // view when possible, else a copy
  Tensor permute(const std::vector<int64_t>& axes) const;
  Tensor transpose(int64_t a, int64_t b) const;
  Tensor t() const;  // transpose of a 2-D tensor
  Tensor narrow(int64_t axis, int64_t start, int64_t length) const;
  Tensor slice(int64_t axis, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t axis, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor broadcast_to(const Shape& shape) const { return expand(shape); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t axis) const;
  Tensor unsqueeze(int64_t axis) const;
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;

  // --- in-place (refused on tensors that need grad unless grad mode is off) -
  Tensor& copy_(const Tensor& src);  // broadcasts and casts src into this
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }

  // --- autograd (libgenesis/autograd) --------------------------------------
  bool requires_grad() const;
  Tensor& requires_grad_(bool value = true);
  bool is_leaf() const;
  Tensor grad() const;
  void set_grad(const Tensor& g);
  // .grad to zero: dropped with set_to_none, else its buffer kept (and written, not added to, by
  // the next backward: no fill pass).
  void zero_grad_(bool set_to_none = false);
  // Backpropagates from this tensor; `grad` may be omitted for a single-element tensor.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // same storage, no history
  // Makes this tensor view src's elements (PyTorch's `param.data = src`): same shape and dtype
  // required; its autograd metadata (.grad, hooks) stays. Every handle of this tensor sees the
  // change; views taken of it before keep the old storage. For re-homing parameters into one
  // buffer (ZeRO-1); not for tensors a recorded graph has saved.
  void set_data(const Tensor& src);
  const std::shared_ptr<Node>& grad_fn() const;
  AutogradMeta* autograd_meta() const { return impl().autograd.get(); }  // null when never used
  void register_hook(GradHook hook);
  void register_post_accumulate_grad_hook(PostAccumulateHook hook);

  std::string str() const;  // readable print (libgenesis/ops/print.cpp)

 private:
  TensorImpl& impl() const;
  std::shared_ptr<TensorImpl> impl_;
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  // zero_grad_ kept .grad's buffer but its values are logically zero: the next accumulation
  // overwrites it (a copy, not an add) and a read before that fills it with zeros.
  mutable bool grad_zeroed = false;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;  // leaves: the node that adds into .grad
  std::vector<GradHook> hooks;
  std::vector<PostAccumulateHook> post_accumulate_hooks;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);  // libgenesis/ops/print.cpp

// A new, uninitialized contiguous tensor (libgenesis/ops/factory.cpp: requires_grad is autograd's).
Tensor empty(const Shape& shape, TensorOptions options = {});
// A tensor viewing `storage` with the given geometry (no copy).
Tensor make_view(const Tensor& base, Shape shape, Strides strides, int64_t offset);

// --- template definitions ---------------------------------------------------
template <class T> T* Tensor::data() const {
  if (dtype_of<T>() != dtype()) throw_unsupported_dtype("Tensor::data<T>() type mismatch", dtype());
  return static_cast<T*>(data_ptr());
}

}  // namespace genesis
