#include "apps/genesis/bench_ceilings.h"

#include <cstring>
#include <fstream>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/io/json_text.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/linalg.h"
#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis::cli::bench {
namespace {

double median_ms(DeviceTimer& timer, const std::function<void(int)>& fn, int max_reps) {
  int reps = timer.warm_up(fn, max_reps, 1000.0);
  return summarize(timer.time(fn, reps)).median_ms;
}

double gemm_tflops(DeviceTimer& timer, int64_t n, DType dtype) {
  NoGradGuard no_grad;
  Generator gen(7);
  TensorOptions options{.dtype = DType::f32, .device = timer.device()};
  Tensor a = randn({n, n}, options, &gen).to(dtype), b = randn({n, n}, options, &gen).to(dtype);
  double ms = median_ms(
      timer, [&](int) { matmul(a, b); }, 30);
  return 2.0 * static_cast<double>(n) * n * n / (ms * 1e9);
}

}  // namespace

Ceilings measure_ceilings(DeviceTimer& timer, int64_t gemm_size) {
  Ceilings c;
  Device device = timer.device();
  // Large enough that neither copy fits in any cache.
  int64_t bytes = device.is_cuda() ? int64_t{1} << 30 : int64_t{64} << 20;
  Tensor src = empty({bytes / 4}, {.dtype = DType::f32, .device = device});
  Tensor dst = empty({bytes / 4}, {.dtype = DType::f32, .device = device});
  src.fill_(1.0);
  std::function<void(int)> raw_copy = [&](int) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(bytes));
  };
#if GENESIS_WITH_CUDA
  if (device.is_cuda()) {
    raw_copy = [&](int) {
      GENESIS_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(bytes),
                                         cudaMemcpyDeviceToDevice, cuda::current_stream()));
    };
  }
#endif
  c.copy_gbps = 2.0 * static_cast<double>(bytes) / (median_ms(timer, raw_copy, 30) * 1e6);
  c.copy_kernel_gbps = 2.0 * static_cast<double>(bytes) /
                       (median_ms(
                            timer, [&](int) { dst.copy_(src); }, 30) *
                        1e6);
  c.gemm_size = gemm_size;
  c.gemm_f32_tflops = gemm_tflops(timer, gemm_size, DType::f32);
  c.gemm_bf16_tflops = gemm_tflops(timer, gemm_size, DType::bf16);
  return c;
}

nlohmann::json ceilings_json(const Ceilings& c) {
  return {{"copy_gbps", c.copy_gbps},
          {"copy_kernel_gbps", c.copy_kernel_gbps},
          {"gemm_size", c.gemm_size},
          {"gemm_tflops", {{"f32", c.gemm_f32_tflops}, {"bf16", c.gemm_bf16_tflops}}}};
}

Ceilings read_ceilings(const std::string& path) {
  std::ifstream in(path);
  GENESIS_CHECK(in.good(), UsageError, "--ceilings: cannot read '", path, "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
    if (j.contains("ceilings")) j = j.at("ceilings");
    Ceilings c;
    c.copy_gbps = j.at("copy_gbps").get<double>();
    c.copy_kernel_gbps = j.value("copy_kernel_gbps", 0.0);
    c.gemm_size = j.value("gemm_size", int64_t{0});
    c.gemm_f32_tflops = j.at("gemm_tflops").at("f32").get<double>();
    c.gemm_bf16_tflops = j.at("gemm_tflops").at("bf16").get<double>();
    return c;
  } catch (const nlohmann::json::exception& e) {
    GENESIS_THROW(UsageError, "--ceilings: '", path, "' is not a ceilings JSON (", io::json_error_text(e), ")");
  }
}

std::optional<double> ceiling_for(const Ceilings& c, bool arithmetic, DType dtype) {
  if (!arithmetic) return c.copy_gbps > 0 ? std::optional(c.copy_gbps) : std::nullopt;
  double rate = dtype == DType::f32 ? c.gemm_f32_tflops : is_half(dtype) ? c.gemm_bf16_tflops : 0.0;
  return rate > 0 ? std::optional(rate) : std::nullopt;
}

}  // namespace genesis::cli::bench
