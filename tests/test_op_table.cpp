// The op table is the contract: every differentiable op has a gradient check, every op
// that claims CUDA kernels has a CUDA-vs-CPU test, and no test names an op that is absent.
#include "tests/testing.h"

using namespace genesis;

TEST_CASE("every differentiable op has a gradient check", "[cpu][optable]") {
  for (const OpInfo& op : op_table()) {
    if (!op.backward) continue;
    INFO("op '" << op.name << "' is differentiable but has no GENESIS_GRADCHECK(\"" << op.name << "\") test");
    CHECK(testing::gradcheck_registry().count(std::string(op.name)) == 1);
  }
}

TEST_CASE("every CUDA op has a CUDA parity test", "[cpu][optable]") {
  for (const OpInfo& op : op_table()) {
    if (!op.cuda) continue;
    INFO("op '" << op.name << "' claims CUDA kernels but has no GENESIS_CUDA_PARITY(\"" << op.name << "\") test");
    CHECK(testing::cuda_parity_registry().count(std::string(op.name)) == 1);
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
