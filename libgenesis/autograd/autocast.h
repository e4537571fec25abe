#pragma once
// Autocast (automatic mixed precision): a thread-local low dtype, like grad mode. While it is
// set, each op casts its floating inputs by its op-table policy (libgenesis/ops/op_table.h):
// matrix products run in the low dtype, numerically sensitive ops (softmax, losses,
// reductions, exp/log) in f32, multi-input ops at their widest input. The casts are ordinary
// differentiable ops, so gradients reach f32 parameters in f32.
//
//   AutocastGuard autocast(DType::bf16);   // like torch.autocast(device, torch.bfloat16)
//   Tensor loss = model(x) ...;
//
// Inside an op (between its prologue and its return) autocast is suspended, so ops that call
// other ops cast once, at the outer op, as PyTorch's dispatcher does. Backward formulas run
// with autocast off.
#include <optional>

#include "libgenesis/core/dtype.h"

namespace genesis {

// The thread's autocast dtype (f16 or bf16), or nullopt when autocast is off.
std::optional<DType> autocast_dtype();
// Sets it; accepts nullopt, f16 and bf16 (anything else is a ValueError).
void set_autocast_dtype(std::optional<DType> dtype);

// Sets the thread's autocast dtype for its lifetime (nullopt turns autocast off, as a
// keep-in-f32 region does) and restores the previous state on exit.
class AutocastGuard {
 public:
  explicit AutocastGuard(std::optional<DType> dtype) : previous_(autocast_dtype()) { set_autocast_dtype(dtype); }
  ~AutocastGuard() { set_autocast_dtype(previous_); }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_;
};

}  // namespace genesis
