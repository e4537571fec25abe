#pragma once
// Helpers shared by the op files: argument checks that name the op, and the CPU/CUDA
// branch. Kernels receive raw pointers, extents and element strides.
#include <span>
#include <string_view>

#include "libgenesis/core/error.h"
#include "libgenesis/core/tensor.h"

#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/runtime.h"
// Expands to the CUDA call in CUDA builds. Without the backend no CUDA tensor can exist
// (its allocator is missing), so the branch is unreachable and reports that if ever hit.
#define GENESIS_ON_CUDA(...) __VA_ARGS__
#else
#define GENESIS_ON_CUDA(...) ::genesis::detail::throw_no_cuda()
#endif

namespace genesis::detail {

[[noreturn]] void throw_no_cuda();

void check_defined(std::string_view op, const Tensor& t, std::string_view arg);
// All defined tensors on one device (the op prologue's check; the message names both devices).
// Returns the first defined tensor, or nullptr.
const Tensor* check_same_device(std::string_view op, std::span<const Tensor> tensors);
void check_same_dtype(std::string_view op, const Tensor& a, const Tensor& b);
void check_floating(std::string_view op, const Tensor& t);
void check_index_dtype(std::string_view op, const Tensor& index);
// Refuses in-place writes into tensors that take part in autograd while grad mode is on and
// into expanded (self-overlapping) views; bumps the storage version (see saved()).
void check_inplace(std::string_view op, const Tensor& t);

}  // namespace genesis::detail
