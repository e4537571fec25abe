#pragma once
// `genesis bench ops` over the op-case registry: for each case, the inputs to draw, the call to
// time, a CPU float64 reference to check it against, and the fewest bytes / flops it needs.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/genesis/bench_suite.h"
#include "libgenesis/core/device.h"
#include "libgenesis/core/tensor.h"
#include "libgenesis/ops/op_cases.h"

namespace genesis::cli::bench {

// Fewest bytes through memory and flops of a case (libgenesis/ops/op_cases.h).
using Cost = OpCost;

class Workload {
 public:
  virtual ~Workload() = default;
  // Checks the device result against the CPU float64 reference on input set 0 and returns
  // the largest relative L2 error over the outputs (and gradients); NaN stays NaN.
  virtual double check() = 0;
  // One timed call on input set `rep` modulo the number of sets.
  virtual void run(int rep) = 0;
};

// The registry's case names and "adamw" (an optimizer step, not a table op).
std::vector<std::string> bench_op_names();
// `--suite all`: every registry case at its benchmark size (`all-test`: at the small size of the
// tests), forward and, where the op has one, forward + backward, in f32 and bf16.
std::vector<BenchCase> registry_suite(bool test_sizes);
// A case resolved for scripts/bench/torch_ops.py: its inputs (shape, kind, bound, grad), the
// PyTorch expression, the cost per dtype (`genesis bench ops --emit-cases`).
nlohmann::json describe_case(const BenchCase& c);
// Throws UsageError naming the case when its shapes do not fit the op.
void validate_case(const BenchCase& c);
Cost case_cost(const BenchCase& c, DType dtype);
// Draws the inputs on `device` (several sets when one set is smaller than cache_bytes).
std::unique_ptr<Workload> make_workload(const BenchCase& c, DType dtype, Device device, size_t cache_bytes);

// Relative L2 error ||out - ref|| / ||ref|| in float64 (0 when both are zero), in chunks so
// that outputs of billions of elements do not need a float64 copy on the host at once.
double relative_error(const Tensor& out, const Tensor& ref);

}  // namespace genesis::cli::bench
