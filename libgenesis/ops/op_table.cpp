// The op table's lookups, and docs/ops.md generated from the table and the op-case registry.
#include "libgenesis/ops/op_table.h"

#include "libgenesis/ops/op_cases.h"

namespace genesis {

std::string_view autocast_policy_name(AutocastPolicy policy) {
  switch (policy) {
    case AutocastPolicy::none: return "none";
    case AutocastPolicy::lower: return "lower";
    case AutocastPolicy::f32: return "f32";
    case AutocastPolicy::f32_math: return "f32_math";
    case AutocastPolicy::low_out: return "low_out";
    case AutocastPolicy::promote: return "promote";
    case AutocastPolicy::promote_math: return "promote_math";
  }
  return "?";
}

std::span<const OpInfo> op_table() { return kOpTable; }

const OpInfo* find_op(std::string_view name) {
  for (const OpInfo& op : kOpTable)
    if (op.name == name) return &op;
  return nullptr;
}

namespace {

// What the op prologue (prologue.cpp) does with an op's floating arguments under each policy.
std::string_view autocast_policy_doc(AutocastPolicy policy) {
  switch (policy) {
    case AutocastPolicy::none: return "nothing: the op runs in its arguments' dtypes (rope's tables follow the input's)";
    case AutocastPolicy::lower: return "floating arguments (not f64) to the autocast dtype";
    case AutocastPolicy::f32: return "16-bit arguments to f32";
    case AutocastPolicy::f32_math:
      return "nothing: the kernels read 16-bit inputs and compute in f32; the result is f32 (bf16 logits are never "
             "copied to f32)";
    case AutocastPolicy::low_out:
      return "nothing: the kernels read the input (f32 or 16-bit) and f32 parameters as they are, take the statistics "
             "and math in f32, and write the autocast dtype (f64 stays f64): outputs that feed matrix products need no "
             "f32 activation and no cast pass";
    case AutocastPolicy::promote: return "floating arguments to the widest floating argument";
    case AutocastPolicy::promote_math:
      return "nothing: the kernels read each operand as it is and compute in the widest floating dtype (an f32 "
             "residual plus a bf16 branch needs no cast pass)";
  }
  return "?";
}

// The policy table's rows, in the order op_table.h describes them.
constexpr AutocastPolicy kPolicies[] = {AutocastPolicy::lower,   AutocastPolicy::f32,     AutocastPolicy::f32_math,
                                        AutocastPolicy::low_out, AutocastPolicy::promote, AutocastPolicy::promote_math,
                                        AutocastPolicy::none};

constexpr const char* kSemantics = R"md(# Operators: semantics, dtypes and promotion

<!-- Generated from the op table (libgenesis/ops/op_table.h) and the op-case registry
     (libgenesis/ops/op_cases.h) by op_reference_markdown(); do not edit by hand. The test
     "docs/ops.md matches the op table" (genesis_tests "[optable]") fails when this file is
     stale: it writes the expected text to a temporary file and prints the command that copies
     it here. -->

`genesis ops --list` prints every operator with its family, whether it is differentiable,
whether its op case runs the float64 finite-difference gradient check, and its autocast policy;
`genesis ops --json` gives the same table to scripts, and the last section of this page lists
it. The table lives in `libgenesis/ops/op_table.h`. Every op has CPU and CUDA kernels, and every
op has a case in the op-case registry (`libgenesis/ops/op_cases.h`) that the tests run through
the CUDA-vs-CPU comparison (random ops: through the moments of their output); the suite fails
when an op has no case or a differentiable op's case gives it no differentiable input.

## Dtypes

| dtype | C++ type | notes |
|---|---|---|
| `f32` | `float` | the default |
| `f64` | `double` | CPU and CUDA; used by the gradient checks |
| `f16` | `genesis::float16` | IEEE half; arithmetic in f32, rounded to nearest even on store |
| `bf16` | `genesis::bfloat16` | bfloat16; arithmetic in f32, rounded to nearest even on store |
| `i32`, `i64` | `int32_t`, `int64_t` | indices, labels, counts |
| `bool` | `bool` (one byte) | masks, comparison results |

Casts (`to(dtype)`) from floating to integer truncate toward zero; to `bool` test `!= 0`;
to `f16`/`bf16` round to nearest, ties to even (NaN stays NaN, overflow gives ±inf).

## Type promotion (binary ops, `where`, `cat`)

Categories are ordered `bool < integer < floating`. Two tensors promote to the higher
category; inside a category the wider type wins:

| a \ b | bool | i32 | i64 | f16 | bf16 | f32 | f64 |
|---|---|---|---|---|---|---|---|
| **bool** | bool | i32 | i64 | f16 | bf16 | f32 | f64 |
| **i32** | i32 | i32 | i64 | f16 | bf16 | f32 | f64 |
| **i64** | i64 | i64 | i64 | f16 | bf16 | f32 | f64 |
| **f16** | f16 | f16 | f16 | f16 | **f32** | f32 | f64 |
| **bf16** | bf16 | bf16 | bf16 | **f32** | bf16 | f32 | f64 |
| **f32** | f32 | f32 | f32 | f32 | f32 | f32 | f64 |
| **f64** | f64 | f64 | f64 | f64 | f64 | f64 | f64 |

Scalars (`add(x, 2.0)`, `x * 0.5`) behave like Python numbers in PyTorch: they take the
tensor's dtype, except that a non-integral scalar with an integer or bool tensor gives
`f32`. So `bf16_tensor * 0.5` stays `bf16`, `i64_tensor + 1` stays `i64`,
`i64_tensor + 0.5` is `f32`.

Op-specific rules:

- `div` is true division: integer or bool operands give `f32`.
- `pow` on integers stays integer (negative exponents give 0); on bool gives `f32`.
- Comparisons (`eq ne lt le gt ge`) compare in the promoted type and return `bool`.
- `sub` on two bools computes in `i64`.
- Float-valued unary ops (`exp`, `log`, `sqrt`, `sin`, `tanh`, `sigmoid`, `gelu`, ...) on
  integer or bool tensors compute in `f32`; `neg`, `abs`, `relu`, `sign` and `clamp` keep
  integer dtypes.
- Reductions: `sum` and `prod` of integers or bools give `i64`; `mean`, `var`, `std`,
  `norm`, `logsumexp` of integers give `f32`; `max`/`min` keep the dtype.
- Half-precision inputs (`f16`, `bf16`) accumulate in `f32` in every reduction, norm,
  softmax and matmul; `f64` accumulates in `f64`.
- `layer_norm` and `rms_norm` take parameters of the input's dtype, or `f32` parameters with
  an `f32`, `f16` or `bf16` input (mixed precision); the result has the input's dtype
  (under autocast: the autocast dtype), grad_x the input's, the parameter gradients theirs.

## Autocast (mixed precision)

Every op starts with the op prologue (`libgenesis/ops/prologue.h`), driven by the op's row of
the table: it checks that all tensor arguments share a device (a `DeviceError` naming the op),
makes that device current for the op (`cuda:N` tensors launch on GPU N), and, while autocast
is on (`AutocastGuard guard(DType::bf16)`, the trainer's `[amp] dtype`), casts the op's
floating arguments by its autocast policy, then suspends autocast until the op returns (the
ops it calls do not cast again). `genesis ops` prints the policy of each op; PyTorch's
autocast op lists are the model:

)md";

constexpr const char* kAfterAutocast = R"md(
The casts are ordinary differentiable `to_dtype` ops, so gradients reach f32 parameters as f32
(the optimizer and its state stay f32). Backward formulas run with autocast off. A test
(`tests/test_autocast.cpp`) runs every op of the table under bf16 and f16 autocast and checks
the result's dtype against its policy, and fails when an op has no entry.

## Broadcasting

NumPy rules: shapes are aligned from the right; each pair of dimensions must be equal or one
of them 1. Broadcast operands are never copied: they are read through zero strides. The
gradient of a broadcast operand is summed back to its shape.

## NaN and ties

- `maximum`/`minimum` propagate NaN. Their gradient splits evenly between tied inputs.
- `max`/`min` over an axis return the first index among ties, and the gradient goes to
  that index only; over all elements the gradient is shared by all tied maxima.
- `clamp` with a missing bound leaves that side open; NaN inputs stay NaN.

## Errors

Shape, dtype and device mismatches throw `genesis::ShapeError`, `DTypeError` and
`DeviceError`; out-of-range indices (gather, scatter_add, index_select, embedding,
one_hot, cross_entropy targets) throw `IndexError` before any memory is touched. Every
message names the op and the shapes or dtypes involved, e.g.
`add: shapes [2, 3] and [4] cannot be broadcast together (dimension 1: 3 vs 4)`.
)md";

constexpr const char* kTableIntro = R"md(
## The op table

Every op of `libgenesis/ops/op_table.h`, in its order. *backward*: the op is differentiable;
*gradient check*: its op case runs the float64 finite-difference gradient check
(`genesis_tests "[opcases]"`); *autocast*: its policy (above).

| op | family | backward | gradient check | autocast |
|---|---|---|---|---|
)md";

std::string yes_or_dash(bool yes) { return yes ? "yes" : "-"; }

}  // namespace

std::string op_reference_markdown() {
  std::string out = kSemantics;
  out += "| policy | what the prologue does | ops |\n|---|---|---|\n";
  for (AutocastPolicy policy : kPolicies) {
    std::string ops;
    for (const OpInfo& op : kOpTable)
      if (op.autocast == policy) ops += (ops.empty() ? "" : ", ") + std::string(op.name);
    out += "| `" + std::string(autocast_policy_name(policy)) + "` | " + std::string(autocast_policy_doc(policy)) +
           " | " + ops + " |\n";
  }
  out += kAfterAutocast;
  out += kTableIntro;
  for (const OpInfo& op : kOpTable)
    out += "| `" + std::string(op.name) + "` | " + std::string(op.family) + " | " + yes_or_dash(op.backward) + " | " +
           yes_or_dash(op_gradient_checked(op_id(op))) + " | `" + std::string(autocast_policy_name(op.autocast)) +
           "` |\n";
  return out;
}

}  // namespace genesis
