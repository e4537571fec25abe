#include "libgenesis/core/dtype.h"

#include "libgenesis/core/error.h"

namespace genesis {

std::string_view dtype_name(DType t) {
  switch (t) {
#define GENESIS_DTYPE_NAME(name, type, str) \
  case DType::name: return str;
    GENESIS_FORALL_DTYPES(GENESIS_DTYPE_NAME)
#undef GENESIS_DTYPE_NAME
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "f32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f64" || s == "float64" || s == "double") return DType::f64;
  if (s == "f16" || s == "float16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "i64" || s == "int64" || s == "long") return DType::i64;
  if (s == "bool" || s == "u8") return DType::boolean;
  return std::nullopt;
}

static int category(DType t) { return t == DType::boolean ? 0 : is_integral(t) ? 1 : 2; }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 1) return DType::i64;  // i32 with i64
  // Both floating and different.
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  return DType::f32;  // f32 with a half type, or f16 with bf16
}

void throw_unsupported_dtype(std::string_view what, DType t) {
  GENESIS_THROW(DTypeError, what, ": dtype ", dtype_name(t), " is not supported");
}

}  // namespace genesis
