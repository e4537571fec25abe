#pragma once
// CPU indexing kernels: index validation, gather / scatter-add along one axis, and the
// triangle mask of tril/triu. Strides are in elements. Index buffers are i32 or i64 and
// were validated by the op layer (first_out_of_range) before gather or scatter_add run.
#include <cstdint>

#include "libgenesis/core/dtype.h"

namespace genesis::kernels::cpu {

// Position of the first of the n entries of the contiguous `index` outside [0, bound), or -1.
int64_t first_out_of_range(DType index_dtype, int64_t n, const void* index, int64_t bound);

// Over every position p of `shape` (the index tensor's shape):
// out[p] = x[p with its `axis` coordinate replaced by index[p]].
void gather(DType dtype, DType index_dtype, int ndim, const int64_t* shape, int axis, const void* x,
            const int64_t* x_strides, const void* index, const int64_t* index_strides, void* out,
            const int64_t* out_strides);

// Over every position p of `shape`: dst[p with its `axis` coordinate replaced by index[p]] += src[p].
// Each destination element is updated by a single thread in increasing order of p's axis
// coordinate, so repeated indices sum in a fixed order.
void scatter_add(DType dtype, DType index_dtype, int ndim, const int64_t* shape, int axis, void* dst,
                 const int64_t* dst_strides, const void* index, const int64_t* index_strides, const void* src,
                 const int64_t* src_strides);

// out[b, i, j] = x[b, i, j] where j - i <= diagonal (lower) or j - i >= diagonal (upper), else 0.
// Both contiguous [batch, rows, cols].
void triangle(DType dtype, bool lower, int64_t batch, int64_t rows, int64_t cols, int64_t diagonal, const void* x,
              void* out);

}  // namespace genesis::kernels::cpu
