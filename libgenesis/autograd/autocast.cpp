#include "libgenesis/autograd/autocast.h"

#include "libgenesis/core/error.h"

namespace genesis {

namespace {
thread_local std::optional<DType> t_autocast_dtype;
}  // namespace

std::optional<DType> autocast_dtype() { return t_autocast_dtype; }

void set_autocast_dtype(std::optional<DType> dtype) {
  GENESIS_CHECK(!dtype || is_half(*dtype), ValueError, "autocast: the low dtype must be f16 or bf16, got ",
                dtype_name(*dtype));
  t_autocast_dtype = dtype;
}

}  // namespace genesis
