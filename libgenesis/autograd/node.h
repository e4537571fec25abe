#pragma once
// The autograd graph. Each differentiable op that sees an input requiring grad records a
// Node: it holds the backward formula and one Edge per input, pointing at the Node that
// produced that input (or at the AccumulateGrad node of a leaf). Saved tensors are always
// detached, so the graph's ownership runs only along edges (no cycles, and the
// destructor below can free a 100,000-node chain without recursion).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "libgenesis/core/tensor.h"

namespace genesis {

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: this input needs no gradient
  uint32_t input_nr = 0;       // which of node's outputs this edge feeds
  bool valid() const { return node != nullptr; }
};

using TensorList = std::vector<Tensor>;

class Node {
 public:
  explicit Node(std::string name, uint32_t num_outputs = 1);
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Maps gradients w.r.t. this node's outputs (undefined where none flowed) to gradients
  // w.r.t. its inputs, one per next_edges entry (undefined = no gradient).
  virtual TensorList apply(TensorList&& grad_outputs) = 0;
  // Frees saved tensors once backward has used them (unless retain_graph).
  virtual void release_saved() {}

  const std::string& name() const { return name_; }
  uint32_t num_outputs() const { return num_outputs_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  std::vector<Edge> next_edges;

 private:
  std::string name_;
  uint32_t num_outputs_;
  uint64_t sequence_nr_;
};

using BackwardFn = std::function<TensorList(const TensorList& grad_outputs)>;

// What a closure receives for an output that got no gradient: a zero tensor (formulas need
// not check), or an undefined tensor (multi-output views such as split, whose backward
// writes zeros only where a piece got no gradient).
enum class MissingGrads { zeros, undefined };

// A node whose backward is a closure (the common case: ops/<family>.cpp writes the formula
// next to the forward).
class FunctionNode final : public Node {
 public:
  struct OutputInfo {
    Shape shape;
    DType dtype;
    Device device;
  };
  FunctionNode(std::string name, std::vector<OutputInfo> outputs, BackwardFn fn, MissingGrads missing)
      : Node(std::move(name), static_cast<uint32_t>(outputs.size())),
        outputs_(std::move(outputs)),
        fn_(std::move(fn)),
        missing_(missing) {}
  // Substitutes zeros for outputs that received no gradient (unless MissingGrads::undefined),
  // then runs the closure.
  TensorList apply(TensorList&& grad_outputs) override;
  void release_saved() override { fn_ = nullptr; }
  // False once backward has freed the saved tensors.
  bool holds_saved() const { return fn_ != nullptr; }

  struct SavedVersion {
    std::weak_ptr<Storage> storage;
    uint64_t version;
  };
  std::vector<SavedVersion> saved_versions;

 private:
  std::vector<OutputInfo> outputs_;
  BackwardFn fn_;
  MissingGrads missing_;
};

// Adds incoming gradients into a leaf's .grad, running its hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : Node("AccumulateGrad", 1), leaf_(std::move(leaf)) {}
  TensorList apply(TensorList&& grad_outputs) override;

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

}  // namespace genesis
