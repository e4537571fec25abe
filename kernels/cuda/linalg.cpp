// Row-major strided-batched GEMM through cuBLAS (column-major): a row-major matrix is the
// transpose of the column-major matrix with the same buffer and leading dimension, so
// C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T, i.e. with A and B swapped.
#include "kernels/cuda/linalg.h"

#include <cublas_v2.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <map>
#include <mutex>
#include <utility>

#include "libgenesis/core/error.h"
#include "libgenesis/cuda/runtime.h"

#define GENESIS_CUBLAS_CHECK(expr)                                                                            \
  do {                                                                                                        \
    cublasStatus_t genesis_status_ = (expr);                                                                  \
    if (genesis_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                                \
      GENESIS_THROW(Error, "cuBLAS error ", cublasGetStatusName(genesis_status_), ": ",                       \
                    cublasGetStatusString(genesis_status_), " at " #expr " (", __FILE__, ":", __LINE__, ")"); \
  } while (0)

namespace genesis::kernels::cuda {

namespace {

std::atomic<bool> tf32_allowed{false};

// cuBLAS' recommended workspace on Hopper.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

// A cuBLAS handle per device, and a workspace per (device, stream): kernels that run
// concurrently on different streams must not share scratch memory.
struct BlasContext {
  // Held from bind() until the GEMM is enqueued: a handle's stream and workspace are per-call state.
  std::mutex mutex;
  std::map<int, cublasHandle_t> handles;
  std::map<std::pair<int, cudaStream_t>, void*> workspaces;

  // The handle of the current device, bound to `stream` and its workspace.
  cublasHandle_t bind(cudaStream_t stream) {
    int device = 0;
    GENESIS_CUDA_CHECK(cudaGetDevice(&device));
    cublasHandle_t& handle = handles[device];
    if (!handle) GENESIS_CUBLAS_CHECK(cublasCreate(&handle));
    void*& workspace = workspaces[{device, stream}];
    if (!workspace) GENESIS_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
    GENESIS_CUBLAS_CHECK(cublasSetStream(handle, stream));
    GENESIS_CUBLAS_CHECK(cublasSetWorkspace(handle, workspace, kWorkspaceBytes));
    return handle;
  }
};

// Never destroyed: handles and workspaces live as long as the CUDA context.
BlasContext& blas_context() {
  static auto* context = new BlasContext;
  return *context;
}

int checked_int(int64_t v, const char* what) {
  GENESIS_CHECK(v >= 0 && v <= INT_MAX, ValueError, "gemm: ", what, " = ", v, " exceeds the cuBLAS limit of ", INT_MAX);
  return static_cast<int>(v);
}

struct GemmTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
};

GemmTypes gemm_types(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return {CUDA_R_32F, tf32_allowed.load() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    case DType::f64:
      return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case DType::f16:
      return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    case DType::bf16:
      return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    default:
      throw_unsupported_dtype("gemm", dtype);
  }
}

}  // namespace

void set_allow_tf32(bool allow) {
  tf32_allowed.store(allow);
}

bool allow_tf32() {
  return tf32_allowed.load();
}

void gemm(DType dtype, const cpu::GemmArgs& args, cudaStream_t stream) {
  if (args.m == 0 || args.n == 0 || args.batch == 0) return;
  const GemmTypes types = gemm_types(dtype);
  const int m = checked_int(args.m, "m"), n = checked_int(args.n, "n"), k = checked_int(args.k, "k");
  const int batch = checked_int(args.batch, "batch");
  // cuBLAS requires leading dimensions >= 1 even where a k = 0 operand is never read.
  const int lda = std::max(1, checked_int(args.lda, "lda"));
  const int ldb = std::max(1, checked_int(args.ldb, "ldb"));
  const int ldc = std::max(1, checked_int(args.ldc, "ldc"));
  const cublasOperation_t op_a = args.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = args.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  // alpha and beta have the compute type's precision: double for f64, float otherwise.
  const double alpha64 = args.alpha, beta64 = args.beta;
  const float alpha32 = static_cast<float>(args.alpha), beta32 = static_cast<float>(args.beta);
  const void* alpha = dtype == DType::f64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = dtype == DType::f64 ? static_cast<const void*>(&beta64) : &beta32;

  BlasContext& context = blas_context();
  std::lock_guard lock(context.mutex);
  cublasHandle_t handle = context.bind(stream);
  GENESIS_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle, op_b, op_a, n, m, k, alpha, args.b, types.data, ldb, args.stride_b, args.a, types.data, lda,
      args.stride_a, beta, args.c, types.data, ldc, args.stride_c, batch, types.compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace genesis::kernels::cuda
