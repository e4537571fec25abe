#pragma once
// The device's measured ceilings: copy bandwidth (bytes read + written) and GEMM rates.
// `genesis bench ops` divides each case's GB/s or TFLOP/s by these.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "apps/genesis/bench_timing.h"
#include "libgenesis/core/dtype.h"

namespace genesis::cli::bench {

struct Ceilings {
  double copy_gbps = 0;         // cudaMemcpyAsync device-to-device (memcpy on the CPU)
  double copy_kernel_gbps = 0;  // genesis's own copy kernel (Tensor::copy_) on f32
  int64_t gemm_size = 0;        // n of the n^3 products below
  double gemm_f32_tflops = 0;
  double gemm_bf16_tflops = 0;
};

Ceilings measure_ceilings(DeviceTimer& timer, int64_t gemm_size);
nlohmann::json ceilings_json(const Ceilings& c);
// Reads the "ceilings" object of a `genesis bench ceilings --json` file (or of an ops result).
Ceilings read_ceilings(const std::string& path);
// The ceiling a case is measured against: GEMM rate (TFLOP/s) for arithmetic-bound cases,
// copy bandwidth (GB/s) otherwise; nullopt when there is none for the dtype.
std::optional<double> ceiling_for(const Ceilings& c, bool arithmetic, DType dtype);

}  // namespace genesis::cli::bench
