#pragma once
// Shared test helpers: float64 finite-difference gradient checks, comparisons with
// tolerances, random inputs, and the registries that tie tests to the op table.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "libgenesis/genesis.h"

namespace genesis::testing {

using Fn = std::function<Tensor(const TensorList&)>;

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-5;
};

// Checks every input's analytic gradient of sum(f(inputs) * w), for a fixed random w,
// against central finite differences. Inputs are contiguous leaves; those that require grad
// are f64 (indices and masks pass through). f may make them non-contiguous (transpose, slice, expand) before calling the op.
void gradcheck(const Fn& f, const TensorList& inputs, GradcheckOptions options = {});

// Random f64 leaf in [lo, hi) that requires grad.
Tensor rand_leaf(const Shape& shape, double lo = -1.0, double hi = 1.0);
// Random values for forward tests, any dtype.
Tensor rand_values(const Shape& shape, DType dtype = DType::f32, double lo = -1.0, double hi = 1.0);

// max |a - b| <= atol + rtol * |b| elementwise (compared in f64, on the CPU); NaNs must match.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
// REQUIRE-style assertion with a message that shows the worst element.
void require_close(const Tensor& actual, const Tensor& expected, double rtol = 1e-5, double atol = 1e-8);

// Registries filled by the macros below; the op-table coverage tests read them.
std::set<std::string>& gradcheck_registry();
std::set<std::string>& cuda_parity_registry();
bool register_name(std::set<std::string>& registry, const char* name);

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "genesis");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// True when a CUDA device can run the tests; prints the skip message once otherwise.
bool cuda_ready();

// Sets an environment variable for the scope (unsets it for a null value), then puts back what
// was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace genesis::testing

#define GENESIS_CONCAT_INNER(a, b) a##b
#define GENESIS_CONCAT(a, b) GENESIS_CONCAT_INNER(a, b)

// GENESIS_GRADCHECK("op") { ...gradcheck(...) calls... }: the gradient test of an op in the
// op table. Registers the name so "every differentiable op has a gradient check" can see it.
#define GENESIS_GRADCHECK(OP)                                                                                     \
  static const bool GENESIS_CONCAT(genesis_gradcheck_reg_, __LINE__) =                                           \
      ::genesis::testing::register_name(::genesis::testing::gradcheck_registry(), OP);                          \
  TEST_CASE("gradcheck " OP, "[cpu][gradcheck]")

// GENESIS_CUDA_PARITY("op") { ... }: CUDA-vs-CPU test of an op; skipped without a GPU.
#define GENESIS_CUDA_PARITY(OP)                                                                                   \
  static const bool GENESIS_CONCAT(genesis_cuda_reg_, __LINE__) =                                                \
      ::genesis::testing::register_name(::genesis::testing::cuda_parity_registry(), OP);                        \
  static void GENESIS_CONCAT(genesis_cuda_body_, __LINE__)();                                                     \
  TEST_CASE("cuda parity " OP, "[cuda]") {                                                                        \
    if (::genesis::testing::cuda_ready()) GENESIS_CONCAT(genesis_cuda_body_, __LINE__)();                        \
  }                                                                                                               \
  static void GENESIS_CONCAT(genesis_cuda_body_, __LINE__)()
