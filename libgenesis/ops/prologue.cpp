#include "libgenesis/ops/prologue.h"

#include <chrono>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/autograd/autocast_weights.h"
#include "libgenesis/core/error.h"
#include "libgenesis/core/host_profile.h"
#include "libgenesis/ops/dispatch.h"
#if GENESIS_WITH_CUDA
#include <cuda_runtime_api.h>

#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis::detail {

namespace {

thread_local std::optional<DType> t_op_autocast;
thread_local int t_op_depth = 0;  // ops in progress on this thread (host profile: outermost only)

// The dtype a floating argument of dtype `t` is cast to under `policy`, or nullopt to keep it.
std::optional<DType> autocast_target(AutocastPolicy policy, DType low, DType widest, DType t) {
  if (!is_floating(t)) return std::nullopt;
  switch (policy) {
    case AutocastPolicy::none:
    case AutocastPolicy::f32_math:
    case AutocastPolicy::low_out:
    case AutocastPolicy::promote_math: return std::nullopt;
    // f64 stays f64, as in PyTorch: autocast is for f32 code paths.
    case AutocastPolicy::lower: return t == DType::f64 || t == low ? std::nullopt : std::optional(low);
    case AutocastPolicy::f32: return is_half(t) ? std::optional(DType::f32) : std::nullopt;
    case AutocastPolicy::promote: return t == widest ? std::nullopt : std::optional(widest);
  }
  return std::nullopt;
}

void autocast_args(AutocastPolicy policy, DType low, std::span<Tensor> args) {
  if (policy == AutocastPolicy::none || policy == AutocastPolicy::f32_math || policy == AutocastPolicy::low_out ||
      policy == AutocastPolicy::promote_math)
    return;
  std::optional<DType> widest;
  if (policy == AutocastPolicy::promote) {
    for (const Tensor& t : args)
      if (t.defined() && is_floating(t.dtype())) widest = widest ? promote_types(*widest, t.dtype()) : t.dtype();
    if (!widest) return;
  }
  for (Tensor& t : args) {
    if (!t.defined()) continue;
    std::optional<DType> to = autocast_target(policy, low, widest.value_or(low), t.dtype());
    // A matrix product's weight: its kept copy where it has one (autograd/autocast_weights.h).
    if (to) t = policy == AutocastPolicy::lower ? autocast_weights::cast(t, *to) : t.to(*to);
  }
}

}  // namespace

std::optional<DType> current_op_autocast() { return t_op_autocast; }

OpScope::OpScope(const OpInfo& op, std::span<Tensor> args) : name_(op.name) {
  if (host_profile::enabled() && t_op_depth++ == 0)
    profile_start_ = std::chrono::steady_clock::now().time_since_epoch().count();
  [[maybe_unused]] const Tensor* first = check_same_device(op.name, args);
#if GENESIS_WITH_CUDA
  if (first && first->device().is_cuda()) {
    int current = 0;
    GENESIS_CUDA_CHECK(cudaGetDevice(&current));
    if (current != first->device().index) {
      GENESIS_CUDA_CHECK(cudaSetDevice(first->device().index));
      previous_device_ = current;
    }
  }
#endif
  outer_op_autocast_ = t_op_autocast;
  const std::optional<DType> low = autocast_dtype();
  t_op_autocast = low;
  if (!low) return;
  autocast_args(op.autocast, *low, args);
  set_autocast_dtype(std::nullopt);
  suspended_autocast_ = low;
}

OpScope::~OpScope() {
  if (host_profile::enabled()) {
    --t_op_depth;
    if (profile_start_ != 0)
      host_profile::add("op", name_, std::chrono::steady_clock::now().time_since_epoch().count() - profile_start_);
  }
  t_op_autocast = outer_op_autocast_;
  if (suspended_autocast_) set_autocast_dtype(suspended_autocast_);
#if GENESIS_WITH_CUDA
  if (previous_device_ >= 0) cudaSetDevice(previous_device_);  // cannot throw from a destructor
#endif
}

}  // namespace genesis::detail
