#pragma once
// Activation checkpointing: trade compute for memory. checkpoint(fn, inputs) runs fn without
// recording a graph, keeps only its inputs (and the default generator's state, so dropout draws
// the same masks again), and records one node whose backward runs fn again with grad on, under
// the autocast dtype of the forward, and backpropagates through that fresh graph:
//
//   Tensor y = checkpoint([&](const TensorList& in) { return TensorList{block(in[0])}; }, {x})[0];
//
// The recomputation gives the same values as the first forward (the ops are deterministic and
// the random draws are replayed), so gradients equal those of fn(inputs) without checkpointing.
// Gradients of the tensors fn reads besides its inputs (parameters, captured tensors) reach their
// leaves inside that nested backward, with their hooks; a parameter used both inside and outside
// fn would see two accumulations per backward (the decoder blocks' parameters are not).
//
// With keep_products, the expensive ops inside fn (GEMMs, attention) keep their results during
// the forward, and the recomputation takes them back instead of running those ops again: only the
// cheap ops (norms, activations, RoPE, dropout, views) run twice (selective checkpointing).
#include <functional>

#include "libgenesis/autograd/node.h"

namespace genesis {

using CheckpointFunction = std::function<TensorList(const TensorList& inputs)>;

struct CheckpointOptions {
  // Keep the outputs of GEMMs and attention (with what their backward reads), recompute the rest.
  bool keep_products = false;
  // Whether a tensor fn reads besides its inputs requires grad (a trainable parameter): when
  // neither this nor any input does, no node is recorded and fn's outputs need no gradient.
  bool inner_requires_grad = true;
};

// fn(inputs) with its activations recomputed in the backward (see above). fn must compute the
// same thing when called again: read no state that changes between the forward and the backward
// (other than the default generator, which is replayed; a Generator passed to an op explicitly
// is not), and modify none of its inputs. Under no-grad it is simply fn(inputs).
TensorList checkpoint(const CheckpointFunction& fn, const TensorList& inputs, const CheckpointOptions& options = {});

// The seam of selective checkpointing for the ops that keep their results. Outside a
// checkpoint with keep_products, `compute()`; inside its forward, `compute()`, kept; inside its
// recomputation, what the forward kept at this point (the op named `op` must be the next one
// to ask, else an AutogradError says the function computed something else the second time).
TensorList kept_or_computed(const char* op, const std::function<TensorList()>& compute);
// True inside a checkpoint's forward (grad mode off): an op takes the path it takes when it
// records a graph, keeping what its backward reads (linear_gelu's pre-activation), so that the
// recomputation repeats the forward's arithmetic and selective checkpointing keeps enough.
bool in_checkpoint_forward();

}  // namespace genesis
