#pragma once
// Joining, splitting and indexing: cat, stack, split, chunk, index_select, gather,
// scatter_add, tril/triu, repeat, flip. Index tensors are i32 or i64; out-of-range
// indices throw IndexError naming the op, the index and the bound.
#include <vector>

#include "libgenesis/core/tensor.h"

namespace genesis {

Tensor cat(const std::vector<Tensor>& tensors, int64_t axis = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t axis = 0);
// Pieces of `size` along axis (the last may be smaller); views of the input.
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t axis = 0);
// Pieces with the given sizes (must sum to the axis length).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis = 0);
// `chunks` nearly equal pieces (like torch.chunk).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis = 0);
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index);
// out[i][j] = x[index[i][j]][j] along `axis` (index has x's rank).
Tensor gather(const Tensor& x, int64_t axis, const Tensor& index);
// Returns x with src added at positions given by index along axis (out-of-place).
Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src);
// Lower/upper triangle of the last two dimensions (diagonal offset like PyTorch).
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
// Tiles x: repeats[i] copies along dimension i (torch.Tensor.repeat).
Tensor repeat(const Tensor& x, const std::vector<int64_t>& repeats);
Tensor flip(const Tensor& x, const std::vector<int64_t>& axes);

namespace detail {

// The first entry of an index tensor outside [0, bound): position in row-major order (-1 when
// every entry is inside) and value.
struct BadIndex {
  int64_t position = -1;
  int64_t value = 0;
};
// Works on either device; `index` is contiguous, i32 or i64. On CUDA a device pass finds the
// position and only its result is read back (one wait on the current stream).
BadIndex first_index_out_of_range(const Tensor& index, int64_t bound);

}  // namespace detail

}  // namespace genesis
