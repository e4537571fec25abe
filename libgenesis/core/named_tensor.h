#pragma once
// A tensor with its name: a module's parameters and buffers, an optimizer's state, the entries
// of a checkpoint or a safetensors file.
#include <string>

#include "libgenesis/core/tensor.h"

namespace genesis {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

}  // namespace genesis
