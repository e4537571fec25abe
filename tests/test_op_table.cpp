// The op table is the contract: every op has a case in the op-case registry
// (libgenesis/ops/op_cases.h), which tests/test_op_cases.cpp runs through the float64 gradient
// check (differentiable ops) and the CUDA-vs-CPU comparison (ops with CUDA kernels). The
// hand-written GENESIS_GRADCHECK / GENESIS_CUDA_PARITY tests add edge cases on top and may only
// name ops of the table.
#include "libgenesis/ops/op_cases.h"
#include "tests/testing.h"

using namespace genesis;

TEST_CASE("every differentiable op has a gradient-checked op case", "[cpu][optable]") {
  for (const OpInfo& op : op_table()) {
    if (!op.backward) continue;
    bool checked = false;
    for (const OpCase& c : op_cases())
      checked = checked || (op_info(c.op).name == op.name && has_gradient_input(c, c.test));
    INFO("op '" << op.name << "' is differentiable but no op case gives it a differentiable input");
    CHECK(checked);
  }
}

TEST_CASE("test registries only name ops of the table", "[cpu][optable]") {
  for (const std::string& name : testing::gradcheck_registry()) {
    INFO("gradient check for unknown op '" << name << "'");
    const OpInfo* op = find_op(name);
    REQUIRE(op != nullptr);
    CHECK(op->backward);
  }
  for (const std::string& name : testing::cuda_parity_registry()) {
    INFO("CUDA parity test for unknown op '" << name << "'");
    const OpInfo* op = find_op(name);
    REQUIRE(op != nullptr);
    CHECK(op->cuda);
  }
}

TEST_CASE("op names are unique", "[cpu][optable]") {
  std::set<std::string_view> seen;
  for (const OpInfo& op : op_table()) CHECK(seen.insert(op.name).second);
}
