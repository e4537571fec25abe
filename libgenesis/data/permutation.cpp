#include "libgenesis/data/permutation.h"

#include <cstddef>
#include <numeric>
#include <utility>

#include "kernels/common/philox.h"

namespace genesis::data {

// Fisher-Yates with Philox draws: swap i with j = floor(u * (i + 1)), u from counter
// (i / 4, stream), lane i % 4.
std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  kernels::Philox4 block{};
  for (int64_t i = n - 1; i > 0; --i) {
    if (i == n - 1 || i % 4 == 3) block = kernels::philox4x32_10(static_cast<uint64_t>(i / 4), stream, seed);
    uint32_t u = block.v[i % 4];
    auto j = static_cast<int64_t>((static_cast<uint64_t>(u) * static_cast<uint64_t>(i + 1)) >> 32);
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

}  // namespace genesis::data
