#pragma once
// Documents generated from the code (docs/recipes.md from the recipe schema, docs/ops.md from
// the op table) and the check that the committed file is the text the code generates.
#include <string>

namespace genesis::testing {

// `relative` in the source tree: under $GENESIS_SOURCE_DIR, else the tree this binary was built
// from, else the working directory (a binary copied to another machine and run from a
// checkout); the first of them that has it.
std::string source_path(const std::string& relative);

// Fails the test when the committed file `relative` differs from `expected`: writes `expected`
// to a temporary file and names the cp command that puts it in place.
void require_generated_doc(const std::string& relative, const std::string& expected);

}  // namespace genesis::testing
