#pragma once
// `genesis bench compare A.json B.json`: per case B ms / A ms (above 1: A is faster), a
// verdict, and a summary (geometric mean, cases below 1.0x). Reads ops and alloc results.
#include <string>

namespace genesis::cli::bench {

int compare_results(const std::string& path_a, const std::string& path_b);

}  // namespace genesis::cli::bench
