#include "libgenesis/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/core/host_profile.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"

namespace genesis {

namespace {

// Feeds the user-supplied gradients into the graph.
class GraphRoot final : public Node {
 public:
  explicit GraphRoot(TensorList grads) : Node("GraphRoot", 1), grads_(std::move(grads)) {}
  TensorList apply(TensorList&&) override { return std::move(grads_); }

 private:
  TensorList grads_;
};

struct ByNewestFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

}  // namespace

Edge gradient_edge(const Tensor& t) {
  if (!t.requires_grad()) return {};
  if (t.grad_fn()) return {t.grad_fn(), t.autograd_meta()->output_nr};
  AutogradMeta& meta = t.impl_ptr()->autograd_meta();
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

size_t saved_storage_bytes(const Tensor& root, const TensorList& excluding) {
  std::unordered_set<const Storage*> counted;
  for (const Tensor& t : excluding)
    if (t.defined()) counted.insert(t.storage().get());
  size_t bytes = 0;
  std::vector<const Node*> stack;
  std::unordered_set<const Node*> seen;
  if (root.grad_fn()) stack.push_back(root.grad_fn().get());
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (const auto* f = dynamic_cast<const FunctionNode*>(n); f && f->holds_saved()) {
      for (const FunctionNode::SavedVersion& s : f->saved_versions) {
        std::shared_ptr<Storage> storage = s.storage.lock();
        if (storage && counted.insert(storage.get()).second) bytes += storage->nbytes();
      }
    }
    for (const Edge& e : n->next_edges)
      if (e.valid()) stack.push_back(e.node.get());
  }
  return bytes;
}

void run_backward(const TensorList& roots, const TensorList& grads, bool retain_graph) {
  GENESIS_CHECK(roots.size() == grads.size(), AutogradError, "backward: ", roots.size(), " outputs but ",
                grads.size(), " gradients");
  auto root = std::make_shared<GraphRoot>(grads);
  for (const Tensor& r : roots) {
    Edge e = gradient_edge(r);
    GENESIS_CHECK(e.valid(), AutogradError,
                  "backward: the tensor does not require grad and has no grad_fn (did you call requires_grad_() on "
                  "the inputs, or run the forward under NoGradGuard?)");
    root->next_edges.push_back(std::move(e));
  }

  // Count, for every reachable node, how many edges point at it.
  std::unordered_map<Node*, int> dependencies;
  {
    std::vector<Node*> stack{root.get()};
    std::unordered_map<Node*, bool> seen{{root.get(), true}};
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next_edges) {
        if (!e.valid()) continue;
        ++dependencies[e.node.get()];
        if (seen.emplace(e.node.get(), true).second) stack.push_back(e.node.get());
      }
    }
  }

  NoGradGuard no_grad;
  AutocastGuard no_autocast(std::nullopt);  // gradients keep the dtypes the forward chose
  std::unordered_map<Node*, TensorList> buffers;
  std::priority_queue<Node*, std::vector<Node*>, ByNewestFirst> ready;
  ready.push(root.get());
  // Nodes are kept alive by the graph (root owns the edges) while the loop runs.
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    TensorList inputs;
    if (auto it = buffers.find(node); it != buffers.end()) {
      inputs = std::move(it->second);
      buffers.erase(it);
    }
    inputs.resize(node->num_outputs());
    TensorList outputs;
    {
      host_profile::Scope timed("backward", node->name());
      outputs = node->apply(std::move(inputs));
    }
    if (!retain_graph) node->release_saved();
    GENESIS_CHECK(outputs.empty() || outputs.size() == node->next_edges.size(), AutogradError, "backward of '",
                  node->name(), "' returned ", outputs.size(), " gradients for ", node->next_edges.size(), " inputs");
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      Node* next = e.node.get();
      if (i < outputs.size() && outputs[i].defined()) {
        TensorList& buf = buffers[next];
        if (buf.size() < next->num_outputs()) buf.resize(next->num_outputs());
        Tensor& slot = buf[e.input_nr];
        slot = slot.defined() ? add(slot, outputs[i]) : std::move(outputs[i]);
      }
      if (--dependencies[next] == 0) ready.push(next);
    }
  }
}

}  // namespace genesis
