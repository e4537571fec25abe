#pragma once
// Autocast's copies of parameters, kept across steps. Under bf16 autocast every matrix product
// casts its f32 weight to bf16 (Tensor::to), each forward of each step: about 390 small launches
// a step for a 0.5B-parameter model. A registered parameter's cast is kept instead, and reused
// while the parameter's storage version is the one it was cast from; the fused AdamW step, which
// rewrites the parameter, writes the copy beside it (the same rounding as the cast, so the bits
// the products read do not change) and marks it current again. A parameter written any other
// way (another optimizer, load_state_dict, an in-place op) is cast again on its next use.
//
// The copies cost 2 bytes per registered parameter between steps; during the step the forward
// holds the same copies anyway (the products keep their operands for the backward). One set of
// parameters is registered at a time, by its owner (train::TrainStep), for the owner's life.
#include <vector>

#include "libgenesis/core/tensor.h"

namespace genesis::autocast_weights {

// Registers contiguous floating parameters (others are skipped) and drops any earlier set; the
// destructor drops them and their copies.
class Registration {
 public:
  explicit Registration(const std::vector<Tensor>& params);
  ~Registration();
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
};

// t.to(target) for autocast's matrix products (ops/prologue.cpp). When t views a registered
// parameter whose copy in `target` is current: a view of the copy with t's geometry, recorded as
// the cast it stands for (the gradient flows back to t as through Tensor::to). Otherwise the cast,
// kept as the parameter's copy when t covers a whole registered parameter (the parameter itself
// or a permutation of it, as GPT-2's Conv1D reads its weight).
Tensor cast(const Tensor& t, DType target);

// For an optimizer about to rewrite `param` whole: the current copy's data (bf16 only) and
// mark_written() to call once the update that writes it is queued; null when there is none (the
// copy is then dropped, and the next use casts again).
struct Refresh {
  void* data = nullptr;
  Tensor param;
  void mark_written() const;
};
Refresh refresh(const Tensor& param);

}  // namespace genesis::autocast_weights
