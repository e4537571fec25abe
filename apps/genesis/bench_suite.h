#pragma once
// The declarative benchmark suite (recipes/bench/ops.toml): one [[case]] table per case.
// docs/benchmarks.md describes the keys; scripts/bench/torch_ops.py reads the same file.
#include <cstdint>
#include <string>
#include <vector>

#include "libgenesis/core/dtype.h"
#include "libgenesis/core/shape.h"

namespace genesis::cli::bench {

struct BenchCase {
  std::string name;           // unique in the suite; JSON results are matched on (name, dtype)
  std::string op;             // a key of the op registry (bench_ops.cpp)
  std::vector<Shape> shapes;  // input shapes, meaning fixed per op
  std::vector<DType> dtypes;  // floating dtypes to run (default f32 and bf16)
  bool backward = false;      // time forward + backward (gradients are checked too)
  std::vector<int64_t> axes;  // reductions; empty = all axes
  int64_t dim = -1;           // softmax family, cat
  double scalar = 2.0;        // mul_scalar
  std::string variant;        // op-specific flavour, e.g. gelu "tanh"
  int64_t check_rows = 0;     // > 0: check only this many output rows (row-separable ops)
  double tolerance = 0.0;     // relative L2 error allowed; 0 = the dtype's default
  std::string where;          // "file:line" of the [[case]] table, for messages
};

// Parses and validates a suite file; throws UsageError naming file:line on unknown keys,
// unknown ops (checked against `known_ops`), bad values and duplicate names.
std::vector<BenchCase> load_suite(const std::string& path, const std::vector<std::string>& known_ops);

std::string shape_text(const std::vector<Shape>& shapes);  // "4096x4096, 4096"

}  // namespace genesis::cli::bench
