#include "libgenesis/cuda/blas.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "kernels/cuda/cublas_check.h"
#include "libgenesis/core/allocator.h"
#include "libgenesis/cuda/device_guard.h"
#include "libgenesis/cuda/runtime.h"

namespace genesis::cuda {
namespace {

using kernels::cuda::cublas_api;

// cuBLAS' recommended workspace on Hopper.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

std::atomic<bool> tf32_allowed{false};

struct DeviceBlas {
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  kernels::cuda::GemmPlanCache* plans = nullptr;
  // Kernels that run at the same time on different streams must not share scratch memory.
  std::map<cudaStream_t, void*> workspaces;
  // The stream the cuBLAS handle is bound to (with its workspace): rebound only on a change,
  // as binding costs host time on every GEMM otherwise.
  std::optional<cudaStream_t> bound_stream;
};

// Held from lookup until the GEMM is enqueued: a handle's stream and the plans are per-call state.
std::mutex blas_mutex;

// Never destroyed: handles, workspaces and descriptors live as long as the CUDA context.
DeviceBlas& device_blas(int device) {
  static auto* devices = new std::map<int, DeviceBlas>;
  DeviceBlas& d = (*devices)[device];
  if (!d.blas) GENESIS_CUBLAS_CHECK(cublas_api().cublasCreate(&d.blas));
  if (!d.lt) GENESIS_CUBLAS_CHECK(cublas_api().cublasLtCreate(&d.lt));
  if (!d.plans) d.plans = kernels::cuda::new_gemm_plan_cache();
  return d;
}

// The stream's workspace, allocated on that stream so that the caching allocator files the
// block under it.
void* workspace(DeviceBlas& d, int device, cudaStream_t stream) {
  void*& ws = d.workspaces[stream];
  if (!ws) {
    StreamGuard on(stream);
    ws = allocator_for({DeviceType::cuda, device}).allocate(kWorkspaceBytes);
  }
  return ws;
}

}  // namespace

void set_allow_tf32(bool allow) {
  tf32_allowed.store(allow);
}

bool allow_tf32() {
  return tf32_allowed.load();
}

kernels::cuda::GemmPlanStats gemm_plan_stats() {
  std::lock_guard lock(blas_mutex);
  return kernels::cuda::gemm_plan_stats(*device_blas(current_device()).plans);
}

void lend_gemm_resources(cudaStream_t stream, void* context,
                         void (*use)(void* context, const kernels::cuda::GemmResources& resources)) {
  const int device = current_device();
  std::lock_guard lock(blas_mutex);
  DeviceBlas& d = device_blas(device);
  void* ws = workspace(d, device, stream);
  if (d.bound_stream != stream) {
    GENESIS_CUBLAS_CHECK(cublas_api().cublasSetStream(d.blas, stream));
    GENESIS_CUBLAS_CHECK(cublas_api().cublasSetWorkspace(d.blas, ws, kWorkspaceBytes));
    d.bound_stream = stream;
  }
  use(context, {.blas = d.blas,
                .lt = d.lt,
                .workspace = ws,
                .workspace_bytes = kWorkspaceBytes,
                .plans = d.plans,
                .allow_tf32 = tf32_allowed.load()});
}

}  // namespace genesis::cuda
