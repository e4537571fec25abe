// cuBLAS is opened at its first use (kernels/cuda/cublas_api.h), not when a process starts: a
// process that does only CPU work never maps it, the loader finds every entry point genesis
// calls, and a library that cannot be found is one Error that says what to install. None of
// this needs a GPU. A build without the CUDA backend has no cuBLAS and no cases here.
#include "tests/testing.h"

#if GENESIS_WITH_CUDA
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "kernels/cuda/cublas_api.h"

using namespace genesis;
using namespace genesis::testing;
using Catch::Matchers::Contains;

namespace {

bool cublas_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libcublas") != std::string::npos) return true;
  return false;
}

}  // namespace

// Run by the case below in a fresh process, as a test process that does CPU work starts. By hand:
//   build/bin/genesis_tests "[.cublas_unloaded_worker]"
TEST_CASE("cublas: CPU work in a fresh process (worker)", "[.cublas_unloaded_worker]") {
  REQUIRE_FALSE(cublas_mapped());
  Tensor x = rand_values({8, 16}), w = rand_leaf({4, 16}), b = rand_leaf({4});
  sum(linear(x.to(DType::f64), w, b)).backward();
  CHECK(matmul(x, rand_values({16, 3})).shape() == Shape{8, 3});
  CHECK(w.grad().defined());
  CHECK_FALSE(cublas_mapped());
}

TEST_CASE("cublas: a process that does CPU work never loads cuBLAS", "[cpu][cublas]") {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  FILE* pipe = popen(("'" + self + "' '[.cublas_unloaded_worker]' 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  std::array<char, 4096> buffer{};
  for (size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  INFO(output);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_THAT(output, Contains("All tests passed"));
}

TEST_CASE("cublas: the loader finds every entry point genesis calls", "[cpu][cublas]") {
  const kernels::cuda::CublasApi& api = kernels::cuda::cublas_api();
  CHECK(cublas_mapped());
  CHECK(std::string(api.cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED)) == "CUBLAS_STATUS_NOT_SUPPORTED");
  // Every pointer is set, or cublas_api() would have thrown; a second call reuses them.
  CHECK(&kernels::cuda::cublas_api() == &api);
  CHECK(api.cublasLtMatmul != nullptr);
  CHECK(api.cublasGemmStridedBatchedEx != nullptr);
}

TEST_CASE("cublas: a CUDA library that cannot be loaded is one error saying what to do", "[cpu][cublas]") {
  CHECK_THROWS_AS(kernels::cuda::open_cuda_library("libgenesis_absent.so.1", "cuAbsent"), Error);
  CHECK_THROWS_WITH(kernels::cuda::open_cuda_library("libgenesis_absent.so.1", "cuAbsent"),
                    Contains("cuAbsent is needed for this CUDA work but libgenesis_absent.so.1 could not be loaded") &&
                        Contains("install the CUDA toolkit's cuAbsent") && Contains("LD_LIBRARY_PATH") &&
                        !Contains("\n"));
}

#endif
