#pragma once
// Joining, splitting and indexing: cat, stack, split, chunk, index_select, gather,
// scatter_add, tril/triu, repeat, flip. Index tensors are i32 or i64; out-of-range
// indices throw IndexError naming the op, the index and the bound: on the CPU from the op,
// on CUDA at the next synchronization (see cuda::KernelFault; the op does not wait).
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

}  // namespace genesis
