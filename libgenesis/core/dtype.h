#pragma once
// Element types. Kernels dispatch on DType with the GENESIS_DISPATCH_* macros below;
// the promotion rules are documented in docs/ops.md.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "libgenesis/core/half.h"

namespace genesis {

#define GENESIS_FORALL_DTYPES(X) \
  X(f32, float, "f32")           \
  X(f64, double, "f64")          \
  X(f16, float16, "f16")         \
  X(bf16, bfloat16, "bf16")      \
  X(i32, int32_t, "i32")         \
  X(i64, int64_t, "i64")         \
  X(boolean, bool, "bool")

enum class DType : uint8_t {
#define GENESIS_DTYPE_ENUM(name, type, str) name,
  GENESIS_FORALL_DTYPES(GENESIS_DTYPE_ENUM)
#undef GENESIS_DTYPE_ENUM
};

constexpr int kNumDTypes = 7;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::boolean: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; }
constexpr bool is_integral(DType t) { return t == DType::i32 || t == DType::i64; }
constexpr bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

std::string_view dtype_name(DType t);
// Parses "f32", "float32", "bf16", "bool", ...; nullopt when unknown.
std::optional<DType> parse_dtype(std::string_view s);

// Result type of a binary op between two tensors: bool < integer < floating;
// within a category the wider type wins; f16 with bf16 gives f32.
DType promote_types(DType a, DType b);

// The dtype that float-valued ops (exp, div, mean, ...) produce for an input of type t:
// floating types are kept, integers and bool become f32.
constexpr DType float_result_type(DType t) { return is_floating(t) ? t : DType::f32; }

// Accumulator type for kernels: double for f64, float for every other floating type.
template <class T> struct acc_type { using type = float; };
template <> struct acc_type<double> { using type = double; };
template <> struct acc_type<int32_t> { using type = int64_t; };
template <> struct acc_type<int64_t> { using type = int64_t; };
template <> struct acc_type<bool> { using type = int64_t; };
template <class T> using acc_t = typename acc_type<T>::type;

template <class T> constexpr DType dtype_of();
#define GENESIS_DTYPE_OF(name, type, str) \
  template <> constexpr DType dtype_of<type>() { return DType::name; }
GENESIS_FORALL_DTYPES(GENESIS_DTYPE_OF)
#undef GENESIS_DTYPE_OF

[[noreturn]] void throw_unsupported_dtype(std::string_view what, DType t);

}  // namespace genesis

// Dispatch helpers: run __VA_ARGS__ with `scalar_t` bound to the C++ type of DTYPE.
#define GENESIS_DTYPE_CASE(enum_name, type, ...) \
  case ::genesis::DType::enum_name: {            \
    using scalar_t = type;                       \
    __VA_ARGS__;                                 \
    break;                                       \
  }

#define GENESIS_DISPATCH_FLOAT(DTYPE, WHAT, ...)                               \
  switch (DTYPE) {                                                              \
    GENESIS_DTYPE_CASE(f32, float, __VA_ARGS__)                                 \
    GENESIS_DTYPE_CASE(f64, double, __VA_ARGS__)                                \
    GENESIS_DTYPE_CASE(f16, ::genesis::float16, __VA_ARGS__)                    \
    GENESIS_DTYPE_CASE(bf16, ::genesis::bfloat16, __VA_ARGS__)                  \
    default: ::genesis::throw_unsupported_dtype(WHAT, DTYPE);                   \
  }

#define GENESIS_DISPATCH_NUMERIC(DTYPE, WHAT, ...)                             \
  switch (DTYPE) {                                                              \
    GENESIS_DTYPE_CASE(f32, float, __VA_ARGS__)                                 \
    GENESIS_DTYPE_CASE(f64, double, __VA_ARGS__)                                \
    GENESIS_DTYPE_CASE(f16, ::genesis::float16, __VA_ARGS__)                    \
    GENESIS_DTYPE_CASE(bf16, ::genesis::bfloat16, __VA_ARGS__)                  \
    GENESIS_DTYPE_CASE(i32, int32_t, __VA_ARGS__)                               \
    GENESIS_DTYPE_CASE(i64, int64_t, __VA_ARGS__)                               \
    default: ::genesis::throw_unsupported_dtype(WHAT, DTYPE);                   \
  }

#define GENESIS_DISPATCH_ALL(DTYPE, WHAT, ...)                                 \
  switch (DTYPE) {                                                              \
    GENESIS_DTYPE_CASE(f32, float, __VA_ARGS__)                                 \
    GENESIS_DTYPE_CASE(f64, double, __VA_ARGS__)                                \
    GENESIS_DTYPE_CASE(f16, ::genesis::float16, __VA_ARGS__)                    \
    GENESIS_DTYPE_CASE(bf16, ::genesis::bfloat16, __VA_ARGS__)                  \
    GENESIS_DTYPE_CASE(i32, int32_t, __VA_ARGS__)                               \
    GENESIS_DTYPE_CASE(i64, int64_t, __VA_ARGS__)                               \
    GENESIS_DTYPE_CASE(boolean, bool, __VA_ARGS__)                              \
  }

#define GENESIS_DISPATCH_INDEX(DTYPE, WHAT, ...)                               \
  switch (DTYPE) {                                                              \
    GENESIS_DTYPE_CASE(i32, int32_t, __VA_ARGS__)                               \
    GENESIS_DTYPE_CASE(i64, int64_t, __VA_ARGS__)                               \
    default: ::genesis::throw_unsupported_dtype(WHAT, DTYPE);                   \
  }
