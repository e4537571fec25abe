// The op table is the contract: every op has a case in the op-case registry
// (libgenesis/ops/op_cases.h), which tests/test_op_cases.cpp runs through the float64 gradient
// check (differentiable ops) and the CUDA-vs-CPU comparison (every op). The hand-written
// GENESIS_GRADCHECK / GENESIS_CUDA_PARITY tests add edge cases on top and may only name ops of
// the table. docs/ops.md is generated from the table.
#include "libgenesis/ops/op_cases.h"
#include "tests/generated_docs.h"
#include "tests/testing.h"

using namespace genesis;

// op_gradient_checked is the `gradcheck` column of `genesis ops` and docs/ops.md, and the
// cases it counts are those "op cases: float64 gradient checks" runs.
TEST_CASE("every differentiable op has a gradient-checked op case", "[cpu][optable]") {
  for (const OpInfo& op : op_table()) {
    if (!op.backward) continue;
    INFO("op '" << op.name << "' is differentiable but no op case gives it a differentiable input");
    CHECK(op_gradient_checked(op_id(op)));
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
    CHECK(find_op(name) != nullptr);
  }
}

TEST_CASE("op names are unique", "[cpu][optable]") {
  std::set<std::string_view> seen;
  for (const OpInfo& op : op_table()) CHECK(seen.insert(op.name).second);
}

TEST_CASE("docs/ops.md matches the op table", "[cpu][optable]") {
  testing::require_generated_doc("docs/ops.md", op_reference_markdown());
}
