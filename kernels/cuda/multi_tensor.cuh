#pragma once
// Multi-tensor launches: the pointers of up to kMaxTensorsPerLaunch buffers travel in the kernel
// arguments (a table), each cut into chunks that blocks stride over. The optimizer updates
// (optim.cu) have their own table; the gradients of mixed floating dtypes (global norm, norm
// clipping, loss-scale unscaling) share GradTable, in chunks of kGradChunk elements.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/optim.h"

namespace genesis::kernels::cuda {

inline constexpr int kGradChunk = 4096;

// Tensors of one launch; dtypes per tensor because a model may mix them.
struct GradTable {
  void* data[kMaxTensorsPerLaunch];
  int64_t n[kMaxTensorsPerLaunch];
  int64_t chunk_start[kMaxTensorsPerLaunch + 1];  // first chunk of each tensor; [count] = all chunks
  DType dtype[kMaxTensorsPerLaunch];
  int count;
};

// Refuses tensors that are not f32, f64, f16 or bf16.
template <class Tensors>
void check_grad_dtypes(const char* what, const Tensors& tensors) {
  for (const auto& t : tensors) {
    if (t.dtype != DType::f32 && t.dtype != DType::f64 && t.dtype != DType::f16 && t.dtype != DType::bf16)
      throw_unsupported_dtype(what, t.dtype);
  }
}

// Calls visit(table) for consecutive groups of at most kMaxTensorsPerLaunch tensors with elements,
// each cut into chunks of kChunk elements. A Table has n, chunk_start and count;
// add(table, i, t) fills in the rest of slot i from tensor t (anything with n).
template <class Table, int64_t kChunk, class Tensors, class Add, class Visit>
void for_each_table(const Tensors& tensors, Add&& add, Visit&& visit) {
  Table table{};
  auto flush = [&] {
    if (table.count > 0) visit(table);
    table = Table{};
  };
  for (const auto& t : tensors) {
    if (t.n == 0) continue;
    const int i = table.count++;
    table.n[i] = t.n;
    add(table, i, t);
    table.chunk_start[i + 1] = table.chunk_start[i] + (t.n + kChunk - 1) / kChunk;
    if (table.count == kMaxTensorsPerLaunch) flush();
  }
  flush();
}

// For gradients: `tensors` holds anything with data, dtype and n.
template <class Tensors, class Visit>
void for_each_grad_table(const Tensors& tensors, Visit&& visit) {
  for_each_table<GradTable, kGradChunk>(
      tensors,
      [](GradTable& table, int i, const auto& t) {
        table.data[i] = t.data;
        table.dtype[i] = t.dtype;
      },
      visit);
}

// Chunk `chunk` of a table cut into chunks of kChunk elements: its tensor (a short linear scan)
// and the elements [begin, end) of it that the chunk covers.
struct TableChunk {
  int tensor;
  int64_t begin, end;
};
template <int64_t kChunk, class Table>
__device__ __forceinline__ TableChunk table_chunk(const Table& table, int64_t chunk) {
  int t = 0;
  while (chunk >= table.chunk_start[t + 1]) ++t;
  const int64_t begin = (chunk - table.chunk_start[t]) * kChunk;
  return {t, begin, begin + kChunk < table.n[t] ? begin + kChunk : table.n[t]};
}

__device__ __forceinline__ float load_as_float(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f64:
      return static_cast<float>(static_cast<const double*>(data)[i]);
    case DType::f16:
      return __half2float(static_cast<const __half*>(data)[i]);
    case DType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

}  // namespace genesis::kernels::cuda
