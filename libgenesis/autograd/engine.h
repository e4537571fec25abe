#pragma once
// The backward engine: iterative (no recursion), processes nodes in reverse creation order
// once all their gradient contributions have arrived.
#include "libgenesis/autograd/node.h"

namespace genesis {

// Backpropagates grads[i] from roots[i].
void run_backward(const TensorList& roots, const TensorList& grads, bool retain_graph);

// The edge through which a gradient for `t` enters the graph: its grad_fn, or its leaf
// accumulator (created on first use); an invalid edge when t does not require grad.
Edge gradient_edge(const Tensor& t);

// Bytes of the distinct live storages that the graph behind `root` keeps for its backward
// (the tensors its nodes saved), leaving out the storages of `excluding` (the parameters,
// which live on anyway). 0 once a backward without retain_graph has freed them.
size_t saved_storage_bytes(const Tensor& root, const TensorList& excluding = {});

}  // namespace genesis
