#include "libgenesis/autograd/node.h"

#include <atomic>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"

namespace genesis {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
thread_local bool t_grad_enabled = true;
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

Node::Node(std::string name, uint32_t num_outputs)
    : name_(std::move(name)), num_outputs_(num_outputs), sequence_nr_(g_next_sequence_nr++) {}

// Destroying the head of a long chain would recurse once per node through the
// shared_ptrs in next_edges. Instead, nodes about to die are parked on a thread-local
// list and released one at a time by the outermost destructor.
Node::~Node() {
  thread_local std::vector<std::shared_ptr<Node>> pending;
  thread_local bool draining = false;
  // Park every child, not only those this node holds last: a node may reach one child
  // through two edges, and the reference count only drops to one in the drain loop.
  for (Edge& e : next_edges) {
    if (e.node) pending.push_back(std::move(e.node));
  }
  next_edges.clear();
  if (draining) return;
  draining = true;
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    n.reset();  // may push that node's children
  }
  draining = false;
}

TensorList FunctionNode::apply(TensorList&& grad_outputs) {
  GENESIS_CHECK(fn_ != nullptr, AutogradError, "backward through '", name(),
                "' a second time: its saved tensors were freed; call backward(grad, /*retain_graph=*/true) the first time");
  for (const SavedVersion& s : saved_versions) {
    std::shared_ptr<Storage> storage = s.storage.lock();
    GENESIS_CHECK(!storage || storage->version() == s.version, AutogradError, "backward of '", name(),
                  "': a tensor it saved was modified in place after the forward pass (version ", storage->version(),
                  ", saved at ", s.version, "); clone() it before modifying it, or modify it after backward");
  }
  grad_outputs.resize(outputs_.size());
  for (size_t i = 0; missing_ == MissingGrads::zeros && i < outputs_.size(); ++i) {
    if (!grad_outputs[i].defined())
      grad_outputs[i] = zeros(outputs_[i].shape, {.dtype = outputs_[i].dtype, .device = outputs_[i].device});
  }
  return fn_(grad_outputs);
}

namespace {
// True when `t` is the only reference to its storage and covers all of it, contiguously.
bool owns_whole_storage(const Tensor& t) {
  return t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1 && t.is_contiguous() && t.offset() == 0 &&
         t.storage()->nbytes() == static_cast<size_t>(t.numel()) * t.element_size();
}
}  // namespace

TensorList AccumulateGrad::apply(TensorList&& grad_outputs) {
  Tensor leaf(leaf_);
  Tensor g = std::move(grad_outputs[0]);
  if (!g.defined()) return {};
  AutogradMeta& meta = leaf_->autograd_meta();
  for (const GradHook& hook : meta.hooks) {
    Tensor replaced = hook(g);
    if (replaced.defined()) g = std::move(replaced);
  }
  GENESIS_CHECK(g.shape() == leaf.shape(), AutogradError, "gradient of shape ", g.shape(), " for a leaf of shape ",
                leaf.shape());
  if (meta.grad.defined() && meta.grad_zeroed) {
    meta.grad.copy_(g);  // after zero_grad_: overwritten in place (cast to .grad's dtype), no add
    meta.grad_zeroed = false;
  } else if (meta.grad.defined()) {
    add_(meta.grad, g);  // in place (casting g to .grad's dtype): .grad's storage persists across steps
  } else if (owns_whole_storage(g) && g.dtype() == leaf.dtype()) {
    meta.grad = std::move(g);  // nothing else holds the buffer: adopt it
  } else {
    // A buffer of the leaf's dtype owned by .grad alone: two leaves never share one, and a
    // 16-bit gradient of an f32 parameter accumulates in f32.
    meta.grad = empty(leaf.shape(), {.dtype = leaf.dtype(), .device = leaf.device()});
    meta.grad.copy_(g);
  }
  for (const PostAccumulateHook& hook : meta.post_accumulate_hooks) hook(leaf);
  return {};
}

}  // namespace genesis
