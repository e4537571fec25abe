#pragma once
// How ops attach themselves to the graph:
//
//   Tensor y = forward(...);
//   if (needs_grad(x, w)) record("op", {x, w}, {y}, [xs = saved(x), ...](const TensorList& g) {...});
//
// The closure receives one gradient per output (a zero tensor substitutes for outputs that
// received none) and returns one gradient per input (undefined for inputs without one).
// Capture inputs and outputs through saved(): a detached alias, so no ownership cycle forms.
// Keep only what the formula reads (shapes and dtypes by value; an input's partner only when
// that input needs a gradient): every saved tensor stays alive until the backward has run.
#include <initializer_list>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/autograd/node.h"

namespace genesis {

// True when grad mode is on and any defined input requires grad.
bool needs_grad(std::initializer_list<Tensor> inputs);
bool needs_grad(const TensorList& inputs);
// Also notes t's storage version; the next record() on this thread attaches the notes to its
// node, whose backward then refuses to run if the tensor was modified in place meanwhile.
Tensor saved(const Tensor& t);

// Creates the node and points each output's grad_fn at it.
void record(std::string name, const TensorList& inputs, const TensorList& outputs, BackwardFn backward,
            MissingGrads missing = MissingGrads::zeros);

// Reduces a broadcast gradient back to `shape` (sums the broadcast dimensions).
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace genesis
