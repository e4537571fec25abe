#pragma once
// The op-case registry: every op of the op table (op_table.h) has at least one case here,
// and a case says all that tests and benchmarks need to know about the op:
//   - the inputs it takes for given shapes (data, positive values, indices, masks),
//   - how to call it, with the arguments a suite file may set (axes, dim, scalar, variant),
//   - what a call costs (bytes moved, flops), for GB/s, TFLOP/s and the share of a ceiling,
//   - the same call in PyTorch, as a Python expression,
//   - small odd-sized arguments for the tests and a representative size for the benchmark.
// tests/test_op_cases.cpp runs every case through the float64 gradient check and the
// CUDA-vs-CPU comparison (contiguous and strided inputs), and checks the moments of every random
// case's output on the CPU and on CUDA; `genesis bench ops` times the cases of a suite file (or
// of every case, `--suite all`) and `--emit-cases` writes them, resolved, for
// scripts/bench/torch_ops.py, so the cost model and the inputs exist once. docs/development.md
// lists every place an added op touches.
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libgenesis/core/generator.h"
#include "libgenesis/core/tensor.h"
#include "libgenesis/ops/op_table.h"
#include "libgenesis/ops/reduce.h"

namespace genesis {

// What a call fixes besides its input values. Suite files set these keys (recipes/bench/ops.toml).
struct OpArgs {
  std::vector<Shape> shapes{};  // the case's shapes; what each means is fixed per case
  Axes axes{};                // reductions; empty = all axes (or the case's default)
  int64_t dim = -1;           // softmax family, cat, stack, split, index ops
  double scalar = 2.0;        // the scalar operand or parameter of scalar cases
  std::string variant{};      // a case-specific flavour, e.g. gelu "tanh", cast "bf16"
};

enum class InputKind : uint8_t {
  normal,       // N(0, 1), in the case's floating dtype
  positive,     // U[0.5, 2): log, sqrt and pow bases, divisors
  probability,  // U[0.05, 0.95): binary targets
  index,        // i64 in [0, bound)
  mask,         // bool, true with probability 1/2
};
std::string_view input_kind_name(InputKind kind);

struct CaseInput {
  Shape shape{};
  InputKind kind = InputKind::normal;
  int64_t bound = 0;           // InputKind::index: values in [0, bound)
  bool differentiable = true;  // a floating input whose gradient is checked and timed
};

struct OpCost {
  double bytes = 0;  // the floor of memory traffic: each input read once, each output written once
  double flops = 0;  // floating-point operations (products and convolutions), 0 elsewhere
};

// A random case's output distribution at its test arguments (other than the shapes, which the
// moment check enlarges), with its inputs drawn as `inputs` says: the mean and variance, and the
// range every value lies in.
struct OutputMoments {
  double mean = 0;
  double variance = 0;
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
};

using CaseInputs = std::function<std::vector<CaseInput>(const OpArgs&)>;
using CaseForward = std::function<Tensor(const OpArgs&, const std::vector<Tensor>&, const TensorOptions&)>;
using CaseCost = std::function<OpCost(const OpArgs&, bool backward, double element_bytes)>;
using CaseCheck = std::function<std::string(const OpArgs&)>;

struct OpCase {
  std::string name{};  // the `op` key of suite files: "add", "mul_scalar", "transpose_copy"
  OpId op;           // the table op it exercises
  OpArgs test{};     // small, odd-sized: the gradient check and the CUDA comparison
  OpArgs bench{};    // a representative size: `genesis bench ops --suite all`
  size_t min_shapes = 1, max_shapes = 1;
  CaseInputs inputs{};   // null: every shape is a normal, differentiable input
  CaseForward forward{}; // the call; `options` gives the dtype and device for ops without inputs
  CaseCost cost{};       // null: one streaming pass (read the inputs, write the output)
  std::string torch{};   // the call in PyTorch over x (inputs), a (OpArgs as a dict), dtype, device
  CaseCheck check_args{};  // null or "" when a suite's arguments fit the case, else why not
  std::vector<size_t> row_inputs{};  // inputs whose axis 0 is the output's axis 0 (row checks)
  bool random = false;        // random output: compared by shape, dtype and moments, not values
  OutputMoments moments{};    // random cases: what the moment check expects
  bool strided_inputs = true;  // false: the op requires contiguous inputs (view), not tested strided
  double parity_rtol = 0;     // CUDA-vs-CPU tolerance in f32 beyond the elementwise default
};

std::span<const OpCase> op_cases();
const OpCase* find_op_case(std::string_view name);  // by OpCase::name

// The case's inputs for `args`, and a suite-level check ("" when fine, else the reason).
std::vector<CaseInput> case_inputs(const OpCase& c, const OpArgs& args);
std::string check_case_args(const OpCase& c, const OpArgs& args);
OpCost case_cost(const OpCase& c, const OpArgs& args, bool backward, double element_bytes);
// A floating input whose gradient is taken (indices and masks never are), and whether any of
// the case's inputs at `args` is one.
bool takes_gradient(const CaseInput& input);
bool has_gradient_input(const OpCase& c, const OpArgs& args);
// Whether tests/test_op_cases.cpp runs the float64 gradient check on the case (a differentiable
// op given a differentiable input at its test arguments), and on some case of `op`: the
// `gradcheck` column of `genesis ops` and docs/ops.md.
bool gradient_checked(const OpCase& c);
bool op_gradient_checked(OpId op);

// One input drawn from `gen`: floating kinds in `dtype`, indices i64, masks bool; on `device`.
Tensor draw_case_input(const CaseInput& input, DType dtype, Device device, Generator& gen);

// Cost helpers shared by the case files.
double numel_d(const Shape& s);
OpCost streaming_cost(const OpArgs& args, bool backward, double es);  // one pass in, one out

}  // namespace genesis
