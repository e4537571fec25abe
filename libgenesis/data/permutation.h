#pragma once
// Seeded permutations from the counter-based Philox generator: permutation(n, seed, stream)
// depends only on its arguments, so epoch e's shuffle can be recomputed on resume.
#include <cstdint>
#include <vector>

namespace genesis::data {

std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t stream);

}  // namespace genesis::data
