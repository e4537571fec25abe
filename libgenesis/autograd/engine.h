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

}  // namespace genesis
