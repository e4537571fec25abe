#pragma once
// The IDX format of MNIST and Fashion-MNIST (big-endian header: two zero bytes, a type
// code, the number of dimensions, then one u32 size per dimension), plain or gzip'd.
#include <string>

#include "libgenesis/core/tensor.h"

namespace genesis::data {

// Reads an .idx / .idx.gz file into a CPU tensor: u8 data becomes i64 for 1-D label
// files and f32 (raw 0..255 values) otherwise; i32 and f32 payloads keep their types.
// Throws ValueError naming the file on a missing file, bad magic or truncated data.
Tensor read_idx(const std::string& path);

}  // namespace genesis::data
