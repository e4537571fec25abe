#pragma once
// CUDA joining and indexing kernels: the contracts of kernels/cpu/index.h plus a stream, a
// one-launch concatenation and one_hot. Strides are in elements.
// scatter_add is deterministic: contributions are sorted by destination (a stable radix sort)
// and each destination adds its own in the CPU's order, so results match the CPU bit for bit.
// The index-taking kernels validate their indices as they go: an entry outside [0, bound) is
// skipped (nothing is read or written for it) and reported to `fault` as op `fault_op`
// (cuda::KernelFault, raised as IndexError at the host's next synchronization).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "libgenesis/core/dtype.h"
#include "kernels/cuda/check.h"

namespace genesis::kernels::cuda {

using ::genesis::cuda::KernelFault;

// One piece of a concatenation: a contiguous buffer of `outer` rows of `row_bytes` bytes,
// written at byte `column` of each output row.
struct CatPiece {
  const void* data;
  int64_t row_bytes;
  int64_t column;
};
// out [outer, out_row_bytes] (contiguous) <- every piece, in as few launches as the pieces allow.
void cat(int64_t outer, int64_t out_row_bytes, const CatPiece* pieces, int64_t num_pieces, void* out,
         cudaStream_t stream);

// Over every position p of `shape`: out[p] = x[p with its `axis` coordinate replaced by index[p]];
// `bound` is x's size along `axis`, and out[p] is zero where index[p] is outside [0, bound).
void gather(DType dtype, DType index_dtype, int ndim, const int64_t* shape, int axis, int64_t bound, const void* x,
            const int64_t* x_strides, const void* index, const int64_t* index_strides, void* out,
            const int64_t* out_strides, KernelFault* fault, int fault_op, cudaStream_t stream);

// Bytes of device workspace scatter_add needs for `n` contributions (the positions of `shape`).
size_t scatter_add_workspace_bytes(int64_t n, int64_t dst_extent);
// Over every position p of `shape`: dst[p with its `axis` coordinate replaced by index[p]] += src[p],
// repeated destinations summing in increasing order of p's axis coordinate, rounding to the
// dtype after each addition (as the CPU). `bound` is dst's size along `axis`; dst_strides are
// non-negative and every dst offset is below dst_extent; `workspace` holds
// scatter_add_workspace_bytes(n, dst_extent) bytes.
void scatter_add(DType dtype, DType index_dtype, int ndim, const int64_t* shape, int axis, int64_t bound, void* dst,
                 const int64_t* dst_strides, int64_t dst_extent, const void* index, const int64_t* index_strides,
                 const void* src, const int64_t* src_strides, void* workspace, size_t workspace_bytes,
                 KernelFault* fault, int fault_op, cudaStream_t stream);

// grad_x [outer, bound, inner] of index_select along the middle axis: element (o, v, c) sums
// grad_out[o, j, c] over the positions j < length with index[j] == v, ascending, rounding as
// scatter_add does (so equal to it bit for bit); rows never picked are zero. grad_out is contiguous
// [outer, length, inner]; `index` is contiguous; `workspace` holds
// scatter_add_workspace_bytes(length, bound) bytes. Floating dtypes.
void index_select_backward(DType dtype, DType index_dtype, int64_t outer, int64_t bound, int64_t inner, int64_t length,
                           const void* index, const void* grad_out, void* grad_x, void* workspace,
                           size_t workspace_bytes, KernelFault* fault, int fault_op, cudaStream_t stream);

// out[b, i, j] = x[b, i, j] where j - i <= diagonal (lower) or j - i >= diagonal (upper), else 0.
// Both contiguous [batch, rows, cols].
void triangle(DType dtype, bool lower, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal, const void* x,
              void* out, cudaStream_t stream);

// out [n, num_classes] (i64) = 1 where the column equals index[row], else 0 (a row of zeros
// where index[row] is outside [0, num_classes)).
void one_hot(DType index_dtype, int64_t n, const void* index, int64_t num_classes, int64_t* out, KernelFault* fault,
             int fault_op, cudaStream_t stream);

}  // namespace genesis::kernels::cuda
