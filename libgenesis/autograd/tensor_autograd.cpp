// Tensor's autograd methods.
#include "libgenesis/autograd/engine.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/factory.h"

namespace genesis {

bool Tensor::requires_grad() const {
  const AutogradMeta* m = autograd_meta();
  return m != nullptr && m->requires_grad;
}

Tensor& Tensor::requires_grad_(bool value) {
  GENESIS_CHECK(is_leaf() || value, AutogradError,
                "requires_grad_(false) on a non-leaf tensor: use detach() to cut it from the graph");
  GENESIS_CHECK(!value || is_floating(dtype()), AutogradError, "requires_grad_: only floating tensors can require "
                "gradients (this one is ", dtype_name(dtype()), ")");
  impl().autograd_meta().requires_grad = value;
  return *this;
}

bool Tensor::is_leaf() const {
  const AutogradMeta* m = autograd_meta();
  return m == nullptr || m->grad_fn == nullptr;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = autograd_meta();
  if (!m) return Tensor();
  if (m->grad_zeroed) {
    NoGradGuard no_grad;
    Tensor buffer = m->grad;  // a handle to the same storage
    buffer.fill_(0.0);
    m->grad_zeroed = false;
  }
  return m->grad;
}

void Tensor::set_grad(const Tensor& g) {
  GENESIS_CHECK(!g.defined() || g.shape() == shape(), ShapeError, "set_grad: gradient of shape ", g.shape(),
                " for a tensor of shape ", shape());
  AutogradMeta& m = impl().autograd_meta();
  m.grad = g;
  m.grad_zeroed = false;
}

void Tensor::zero_grad_(bool set_to_none) {
  AutogradMeta* m = autograd_meta();
  if (!m || !m->grad.defined()) return;
  if (set_to_none) {
    m->grad = Tensor();
    m->grad_zeroed = false;
  } else {
    m->grad_zeroed = true;
  }
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> kNone;
  const AutogradMeta* m = autograd_meta();
  return m ? m->grad_fn : kNone;
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  Tensor g = grad;
  if (!g.defined()) {
    GENESIS_CHECK(numel() == 1, AutogradError, "backward: a gradient must be given for a non-scalar output of shape ",
                  shape());
    g = ones(shape(), {.dtype = dtype(), .device = device()});
  }
  GENESIS_CHECK(g.shape() == shape(), ShapeError, "backward: gradient of shape ", g.shape(), " for an output of shape ",
                shape());
  run_backward({*this}, {g}, retain_graph);
}

Tensor Tensor::detach() const {
  return Tensor(std::make_shared<TensorImpl>(storage(), shape(), strides(), offset(), dtype()));
}

void Tensor::register_hook(GradHook hook) {
  GENESIS_CHECK(requires_grad(), AutogradError, "register_hook: the tensor does not require grad");
  GENESIS_CHECK(is_leaf(), AutogradError, "register_hook: hooks are supported on leaf tensors");
  impl().autograd_meta().hooks.push_back(std::move(hook));
}

void Tensor::register_post_accumulate_grad_hook(PostAccumulateHook hook) {
  GENESIS_CHECK(requires_grad() && is_leaf(), AutogradError,
                "register_post_accumulate_grad_hook: the tensor must be a leaf that requires grad");
  impl().autograd_meta().post_accumulate_hooks.push_back(std::move(hook));
}

}  // namespace genesis
