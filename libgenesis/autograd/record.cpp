#include "libgenesis/autograd/record.h"

#include "libgenesis/autograd/engine.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/reduce.h"

namespace genesis {

namespace {
// Versions noted by saved() since the last record() on this thread.
thread_local std::vector<FunctionNode::SavedVersion> t_pending_saved;
}  // namespace

Tensor saved(const Tensor& t) {
  if (!t.defined()) return Tensor();
  t_pending_saved.push_back({t.storage(), t.storage()->version()});
  return t.detach();
}

bool needs_grad(std::initializer_list<Tensor> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

bool needs_grad(const TensorList& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(std::string name, const TensorList& inputs, const TensorList& outputs, BackwardFn backward,
            MissingGrads missing) {
  std::vector<FunctionNode::OutputInfo> infos;
  infos.reserve(outputs.size());
  for (const Tensor& o : outputs) infos.push_back({o.shape(), o.dtype(), o.device()});
  auto node = std::make_shared<FunctionNode>(std::move(name), std::move(infos), std::move(backward), missing);
  node->saved_versions = std::move(t_pending_saved);
  t_pending_saved.clear();
  node->next_edges.reserve(inputs.size());
  for (const Tensor& in : inputs) node->next_edges.push_back(in.defined() ? gradient_edge(in) : Edge{});
  for (uint32_t i = 0; i < outputs.size(); ++i) {
    // Only floating outputs carry gradients (indices, masks and comparisons do not).
    if (!is_floating(outputs[i].dtype())) continue;
    AutogradMeta& meta = outputs[i].impl_ptr()->autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = i;
  }
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  GENESIS_CHECK(lead >= 0, ShapeError, "sum_to: cannot reduce ", grad.shape(), " to ", shape);
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < grad.dim(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && grad.size(d) != 1)) axes.push_back(d);
  }
  Tensor r = axes.empty() ? grad : sum(grad, axes, /*keepdim=*/true);
  return r.reshape(shape);
}

}  // namespace genesis
