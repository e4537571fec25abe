// genesis info: build options, BLAS, threads, CUDA devices.
#include <omp.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/genesis/commands.h"
#include "kernels/cpu/linalg.h"
#include "libgenesis/core/threads.h"
#include "libgenesis/ops/conv.h"
#include "libgenesis/ops/op_table.h"
#if GENESIS_WITH_CUDA
#include <cuda_runtime_api.h>

#include "libgenesis/cuda/runtime.h"
#endif

extern "C" char* openblas_get_config(void);
extern "C" int openblas_get_num_threads(void);

namespace genesis::cli {

void add_info_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("info", "Build options, BLAS, threads and CUDA devices (JSON)");
  sub->add_flag("--json")->description("JSON on stdout (what info always prints)");
  register_command(sub, [] {
    // The thread count genesis train would choose now with run.threads = 0, and why.
    ThreadChoice threads = configure_threads(0);
    WaitPolicy wait = wait_policy();
    nlohmann::json j{{"version", GENESIS_VERSION_STRING},
                     {"ops", op_table().size()},
                     {"openmp_threads", omp_get_max_threads()},
                     {"blas", openblas_get_config()},
                     {"blas_threads", openblas_get_num_threads()}};
    j["blas_threading"] = blas_threading();  // openmp: one pool with genesis's own kernels
    j["blas_core_source"] = blas_core_source();
    j["cpu_conv2d"] = cpu_conv2d_kernels();
    // The f32 GEMM library (linear, matmul, im2col convolutions), and why.
    j["cpu_gemm"] = {{"library", kernels::cpu::cpu_gemm_name(kernels::cpu::cpu_gemm())},
                     {"source", kernels::cpu::cpu_gemm_source()}};
    // The instruction set of the elementwise, reduction, softmax and norm loops, and why.
    j["cpu_isa"] = {{"isa", kernels::cpu::cpu_isa_name(kernels::cpu::cpu_isa())},
                    {"source", kernels::cpu::cpu_isa_source()}};
    j["threads"] = {{"threads", threads.threads},
                    {"source", threads.source},
                    {"reason", threads.reason},
                    {"cores", threads.cores},
                    {"free_cores", threads.free_cores},
                    {"busy_cores", threads.busy_cores < 0 ? nlohmann::json() : nlohmann::json(threads.busy_cores)},
                    {"omp_wait_policy", wait.omp_wait_policy},
                    {"gomp_spincount", wait.gomp_spincount},
                    {"wait_policy_source", wait.source}};
#if GENESIS_WITH_CUDA
    j["cuda_backend"] = true;
    nlohmann::json devices = nlohmann::json::array();
    if (cuda::is_available()) {
      for (int d = 0; d < cuda::device_count(); ++d) {
        cudaDeviceProp p{};
        if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
        devices.push_back({{"index", d},
                           {"name", p.name},
                           {"compute_capability", std::to_string(p.major) + "." + std::to_string(p.minor)},
                           {"memory_bytes", p.totalGlobalMem},
                           {"multiprocessors", p.multiProcessorCount}});
      }
    }
    j["cuda_devices"] = devices;
#else
    j["cuda_backend"] = false;
#endif
    std::cout << j.dump(2) << "\n";
    return 0;
  });
}

}  // namespace genesis::cli
