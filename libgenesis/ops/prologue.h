#pragma once
// The op prologue: what every op does first, driven by its row of the op table
// (libgenesis/ops/op_table.h), so no op repeats it by hand:
//   1. all defined tensor arguments on one device (a DeviceError naming the op otherwise);
//   2. that device current for the op's scope, so a cuda:N tensor's kernels launch on N;
//   3. under autocast, floating arguments cast by the op's policy (differentiable casts);
//   4. autocast suspended until the op returns, so the ops it calls do not cast again.
//
//   Tensor matmul(const Tensor& a_arg, const Tensor& b_arg) {
//     auto [a, b] = detail::op_prologue<OpId::matmul>(a_arg, b_arg);
//     ... uses a and b (the cast arguments) ...
//
// Undefined tensors (an absent bias) pass through unchanged. An op whose policy is f32_math
// reads current_op_autocast() to return f32 under autocast.
#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <tuple>
#include <vector>

#include "libgenesis/core/tensor.h"
#include "libgenesis/ops/op_table.h"

namespace genesis::detail {

// The autocast dtype that was on when the innermost running op began (its prologue suspended
// it), or nullopt.
std::optional<DType> current_op_autocast();

// Steps 1-4 on `args` (cast in place); undoes 2 and 4 on destruction.
class OpScope {
 public:
  OpScope(const OpInfo& op, std::span<Tensor> args);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  int previous_device_ = -1;                // CUDA device to make current again; -1: unchanged
  std::optional<DType> suspended_autocast_;  // autocast dtype to restore
  std::optional<DType> outer_op_autocast_;   // current_op_autocast() to restore
  std::string_view name_;
  int64_t profile_start_ = 0;  // GENESIS_HOST_PROFILE: when this outermost op began (ns)
};

// An op's tensor arguments after the prologue; binds as `auto [a, b] = ...` and keeps the
// scope alive as long as the bindings.
template <size_t N>
class OpArgs {
 public:
  template <class... T>
  explicit OpArgs(const OpInfo& op, const T&... args) : tensors_{args...}, scope_(op, tensors_) {}
  template <size_t I>
  Tensor& get() {
    return tensors_[I];
  }

 private:
  std::array<Tensor, N> tensors_;
  OpScope scope_;  // declared after tensors_: constructed from them
};

template <OpId id, class... T>
OpArgs<sizeof...(T)> op_prologue(const T&... args) {
  return OpArgs<sizeof...(T)>(op_info(id), args...);
}

// The prologue of ops over a list of tensors (cat, stack).
class OpListArgs {
 public:
  OpListArgs(const OpInfo& op, const std::vector<Tensor>& tensors) : tensors(tensors), scope_(op, this->tensors) {}
  std::vector<Tensor> tensors;

 private:
  OpScope scope_;
};

template <OpId id>
OpListArgs op_prologue_list(const std::vector<Tensor>& tensors) {
  return OpListArgs(op_info(id), tensors);
}

}  // namespace genesis::detail

template <size_t N>
struct std::tuple_size<genesis::detail::OpArgs<N>> : std::integral_constant<size_t, N> {};
template <size_t I, size_t N>
struct std::tuple_element<I, genesis::detail::OpArgs<N>> {
  using type = genesis::Tensor;
};
