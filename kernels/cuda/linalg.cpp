// Row-major GEMM on column-major libraries: a row-major matrix is the transpose of the
// column-major matrix with the same buffer and leading dimension, so C = op(A) op(B) is
// computed as C^T = op(B)^T op(A)^T, i.e. with A and B swapped. In cuBLASLt's terms the
// row-major B is its A', the row-major A its B', and C^T its D.
#include "kernels/cuda/linalg.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/cublas_check.h"
#include "libgenesis/core/error.h"

namespace genesis::kernels::cuda {

namespace {

std::atomic<GemmResourcesLender> resources_lender{nullptr};

// Runs body(resources) with what the runtime lends for `stream`.
template <class Body>
void with_resources(cudaStream_t stream, Body&& body) {
  GemmResourcesLender lender = resources_lender.load(std::memory_order_acquire);
  GENESIS_CHECK(lender != nullptr, Error, "gemm: the CUDA runtime has not registered its cuBLAS resources");
  lender(stream, &body, [](void* context, const GemmResources& resources) {
    (*static_cast<std::remove_reference_t<Body>*>(context))(resources);
  });
}

}  // namespace

// Everything cuBLASLt's algorithm choice depends on (the cache is the device's). Alignments
// are in bytes, capped at 16 (the widest vector access of any kernel).
struct LtKey {
  DType dtype = DType::f32;
  bool tf32 = false;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0, stride_a = 0, stride_b = 0, stride_c = 0, batch = 1;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int64_t ld_pre = 0;
  uint32_t align_a = 0, align_b = 0, align_c = 0, align_bias = 0, align_pre = 0;
  auto operator<=>(const LtKey&) const = default;
};

// Heuristic candidates timed on a plan's first use (GENESIS_GEMM_AUTOTUNE=0: the first one is taken).
constexpr int kCandidates = 8;
constexpr int kTimedRuns = 2;
// A later candidate replaces the heuristic's first choice only when this much faster, so timing
// noise rarely flips the choice between runs.
constexpr float kRequiredGain = 0.97f;

// Descriptors of one cached GEMM and the algorithm the heuristic chose (found = false when it
// had none: such GEMMs go the fallback way without asking again). Until `tuned`, `candidates`
// holds the heuristic's results, best guess first, and algo the first of them.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // cuBLASLt's A', B', D
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
  bool tuned = false;
  std::vector<cublasLtMatmulAlgo_t> candidates;
};

struct GemmPlanCache {
  std::map<LtKey, LtPlan> plans;
};

namespace {

bool autotune_enabled() {
  static const bool enabled = [] {
    const char* text = std::getenv("GENESIS_GEMM_AUTOTUNE");
    return !text || std::string_view(text) != "0";
  }();
  return enabled;
}

int checked_int(int64_t v, const char* what) {
  GENESIS_CHECK(v >= 0 && v <= INT_MAX, ValueError, "gemm: ", what, " = ", v, " exceeds the cuBLAS limit of ", INT_MAX);
  return static_cast<int>(v);
}

// cuBLASLt takes 64-bit extents, but the cuBLAS fallback does not: both paths keep its limits.
void check_extents(const GemmArgs& args) {
  using Extent = std::pair<int64_t, const char*>;
  for (const auto& [value, what] :
       {Extent{args.m, "m"}, Extent{args.n, "n"}, Extent{args.k, "k"}, Extent{args.batch, "batch"},
        Extent{args.lda, "lda"}, Extent{args.ldb, "ldb"}, Extent{args.ldc, "ldc"}})
    checked_int(value, what);
}

// The largest power of two up to 16 that divides the address and every step (in elements of
// `element_bytes`) taken from it: rows and batch entries must be as aligned as the base.
uint32_t alignment(const void* p, size_t element_bytes, std::initializer_list<int64_t> steps = {}) {
  auto bits = reinterpret_cast<uintptr_t>(p);
  for (int64_t step : steps) bits |= static_cast<uintptr_t>(step) * element_bytes;
  uint32_t align = 1;
  while (align < 16 && bits % (2 * align) == 0) align *= 2;
  return align;
}

cudaDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f64:
      return CUDA_R_64F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      throw_unsupported_dtype("gemm", dtype);
  }
}

cublasComputeType_t compute_type(DType dtype, bool tf32) {
  if (dtype == DType::f64) return CUBLAS_COMPUTE_64F;
  if (dtype == DType::f32 && tf32) return CUBLAS_COMPUTE_32F_FAST_TF32;
  return CUBLAS_COMPUTE_32F;  // f32, and f16/bf16 with f32 accumulation
}

template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  GENESIS_CUBLAS_CHECK(cublas_api().cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

template <class T>
void set_layout(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute, const T& value) {
  GENESIS_CUBLAS_CHECK(cublas_api().cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value)));
}

template <class T>
void set_preference(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attribute, const T& value) {
  GENESIS_CUBLAS_CHECK(cublas_api().cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof(value)));
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  GENESIS_CUBLAS_CHECK(cublas_api().cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                                               static_cast<uint64_t>(cols), std::max<int64_t>(ld, 1)));
  if (batch > 1) {
    set_layout(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch));
    set_layout(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
  }
  return layout;
}

// Epilogue pointers live in the (cached) descriptor: set before the heuristic, whose choice
// depends on their alignment, and again before each run.
void set_epilogue_pointers(const LtPlan& plan, const LtKey& key, const GemmEpilogue* e) {
  if (!e) return;
  const void* bias = e->kind == EpilogueKind::bias_grad ? e->bias_grad : e->bias;
  if (bias) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (e->pre_activation) {
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, e->pre_activation);
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, key.ld_pre);
  }
}

LtPlan make_plan(const GemmResources& r, const LtKey& key, const GemmEpilogue* epilogue) {
  const cudaDataType_t type = data_type(key.dtype);
  LtPlan plan;
  GENESIS_CUBLAS_CHECK(
      cublas_api().cublasLtMatmulDescCreate(&plan.desc, compute_type(key.dtype, key.tf32), CUDA_R_32F));
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  if (key.epilogue != CUBLASLT_EPILOGUE_DEFAULT) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, key.epilogue);
  set_epilogue_pointers(plan, key, epilogue);
  // Stored shapes, column-major: A' is the row-major B ([n, k] when not transposed), B' the
  // row-major A ([k, m]), D the row-major C ([n, m]).
  plan.a = key.trans_b ? make_layout(type, key.k, key.n, key.ldb, key.batch, key.stride_b)
                       : make_layout(type, key.n, key.k, key.ldb, key.batch, key.stride_b);
  plan.b = key.trans_a ? make_layout(type, key.m, key.k, key.lda, key.batch, key.stride_a)
                       : make_layout(type, key.k, key.m, key.lda, key.batch, key.stride_a);
  plan.d = make_layout(type, key.n, key.m, key.ldc, key.batch, key.stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  GENESIS_CUBLAS_CHECK(cublas_api().cublasLtMatmulPreferenceCreate(&pref));
  set_preference(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(r.workspace_bytes));
  set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);
  set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
  set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
  set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c);
  cublasLtMatmulHeuristicResult_t results[kCandidates]{};
  int count = 0;
  cublasStatus_t status = cublas_api().cublasLtMatmulAlgoGetHeuristic(
      r.lt, plan.desc, plan.a, plan.b, plan.d, plan.d, pref, autotune_enabled() ? kCandidates : 1, results, &count);
  GENESIS_CUBLAS_CHECK(cublas_api().cublasLtMatmulPreferenceDestroy(pref));
  if (status != CUBLAS_STATUS_SUCCESS) count = 0;
  for (int i = 0; i < count; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) plan.candidates.push_back(results[i].algo);
  plan.found = !plan.candidates.empty();
  if (plan.found) plan.algo = plan.candidates.front();
  plan.tuned = plan.candidates.size() < 2;
  return plan;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  GENESIS_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

// Times each candidate (one warm-up, then kTimedRuns runs between events on `stream`; this
// waits for the stream once per plan) and keeps the fastest. Candidates that fail to run are
// skipped. matmul(algo) enqueues the plan's GEMM with that algorithm.
template <class Matmul>
void tune(LtPlan& plan, const Matmul& matmul, cudaStream_t stream) {
  cudaEvent_t start = nullptr, stop = nullptr;
  GENESIS_CUDA_CHECK(cudaEventCreate(&start));
  GENESIS_CUDA_CHECK(cudaEventCreate(&stop));
  float best_ms = 0.0f;
  bool timed_any = false;
  for (const cublasLtMatmulAlgo_t& algo : plan.candidates) {
    if (matmul(algo) != CUBLAS_STATUS_SUCCESS) continue;
    GENESIS_CUDA_CHECK(cudaEventRecord(start, stream));
    bool ran = true;
    for (int run = 0; run < kTimedRuns && ran; ++run) ran = matmul(algo) == CUBLAS_STATUS_SUCCESS;
    GENESIS_CUDA_CHECK(cudaEventRecord(stop, stream));
    GENESIS_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    GENESIS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (!ran) continue;
    if (!timed_any || ms < best_ms * kRequiredGain) {
      timed_any = true;
      best_ms = ms;
      plan.algo = algo;
    }
  }
  GENESIS_CUDA_CHECK(cudaEventDestroy(start));
  GENESIS_CUDA_CHECK(cudaEventDestroy(stop));
  plan.tuned = true;
  plan.candidates.clear();
}

cublasLtEpilogue_t lt_epilogue(const GemmEpilogue* e) {
  if (!e) return CUBLASLT_EPILOGUE_DEFAULT;
  switch (e->kind) {
    case EpilogueKind::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case EpilogueKind::gelu_tanh:
      if (e->pre_activation) return e->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      return e->bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case EpilogueKind::bias_grad:
      return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// One GEMM through cuBLASLt; false when it has no algorithm for the case (nothing enqueued).
bool run_lt(const GemmResources& r, DType dtype, const GemmArgs& args, const GemmEpilogue* epilogue,
            cudaStream_t stream) {
  const size_t element = dtype_size(dtype);
  LtKey key{.dtype = dtype,
            .tf32 = dtype == DType::f32 && r.allow_tf32,
            .trans_a = args.trans_a,
            .trans_b = args.trans_b,
            .m = args.m,
            .n = args.n,
            .k = args.k,
            .lda = args.lda,
            .ldb = args.ldb,
            .ldc = args.ldc,
            .stride_a = args.batch > 1 ? args.stride_a : 0,
            .stride_b = args.batch > 1 ? args.stride_b : 0,
            .stride_c = args.batch > 1 ? args.stride_c : 0,
            .batch = args.batch,
            .epilogue = lt_epilogue(epilogue)};
  key.align_a = alignment(args.a, element, {key.lda, key.stride_a});
  key.align_b = alignment(args.b, element, {key.ldb, key.stride_b});
  key.align_c = alignment(args.c, element, {key.ldc, key.stride_c});
  if (epilogue) {
    const void* bias = epilogue->kind == EpilogueKind::bias_grad ? epilogue->bias_grad : epilogue->bias;
    key.align_bias = bias ? alignment(bias, element) : 0;
    key.align_pre = epilogue->pre_activation ? alignment(epilogue->pre_activation, element, {epilogue->ld_pre}) : 0;
    key.ld_pre = epilogue->pre_activation ? epilogue->ld_pre : 0;
  }

  auto [it, inserted] = r.plans->plans.try_emplace(key);
  if (inserted) it->second = make_plan(r, key, epilogue);
  LtPlan& plan = it->second;
  if (!plan.found) return false;
  set_epilogue_pointers(plan, key, epilogue);
  const float alpha = static_cast<float>(args.alpha), beta = static_cast<float>(args.beta);
  auto matmul = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublas_api().cublasLtMatmul(r.lt, plan.desc, &alpha, args.b, plan.a, args.a, plan.b, &beta, args.c, plan.d,
                                       args.c, plan.d, &algo, r.workspace, r.workspace_bytes, stream);
  };
  // Tuning runs overwrite C, so only a GEMM that does not read it (beta = 0) tunes its plan.
  if (!plan.tuned && beta == 0.0f && !capturing(stream)) tune(plan, matmul, stream);
  GENESIS_CUBLAS_CHECK(matmul(plan.algo));
  return true;
}

// The cuBLAS path: f64, k = 0, broadcast batches, GEMMs cuBLASLt has no algorithm for, and
// 16-bit operands with an f32 C (c_dtype).
void run_cublas(const GemmResources& r, DType dtype, const GemmArgs& args, DType c_dtype) {
  const int m = checked_int(args.m, "m"), n = checked_int(args.n, "n"), k = checked_int(args.k, "k");
  const int batch = checked_int(args.batch, "batch");
  // cuBLAS requires leading dimensions >= 1 even where a k = 0 operand is never read.
  const int lda = std::max(1, checked_int(args.lda, "lda"));
  const int ldb = std::max(1, checked_int(args.ldb, "ldb"));
  const int ldc = std::max(1, checked_int(args.ldc, "ldc"));
  const cublasOperation_t op_a = args.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = args.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType_t type = data_type(dtype);
  const cublasComputeType_t compute = compute_type(dtype, r.allow_tf32);
  // alpha and beta have the compute type's precision: double for f64, float otherwise.
  const double alpha64 = args.alpha, beta64 = args.beta;
  const float alpha32 = static_cast<float>(args.alpha), beta32 = static_cast<float>(args.beta);
  const void* alpha = dtype == DType::f64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = dtype == DType::f64 ? static_cast<const void*>(&beta64) : &beta32;

  GENESIS_CUBLAS_CHECK(cublas_api().cublasGemmStridedBatchedEx(
      r.blas, op_b, op_a, n, m, k, alpha, args.b, type, ldb, args.stride_b, args.a, type, lda, args.stride_a, beta,
      args.c, data_type(c_dtype), ldc, args.stride_c, batch, compute, CUBLAS_GEMM_DEFAULT));
}

bool lt_dtype(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
}

}  // namespace

GemmPlanCache* new_gemm_plan_cache() {
  return new GemmPlanCache;  // never destroyed: descriptors live as long as the CUDA context
}

void set_gemm_resources_lender(GemmResourcesLender lender) {
  resources_lender.store(lender, std::memory_order_release);
}

void gemm(DType dtype, const GemmArgs& args, cudaStream_t stream) {
  if (args.m == 0 || args.n == 0 || args.batch == 0) return;
  if (dtype != DType::f64 && !lt_dtype(dtype)) throw_unsupported_dtype("gemm", dtype);
  check_extents(args);
  const bool broadcast_batch = args.batch > 1 && (args.stride_a == 0 || args.stride_b == 0);
  with_resources(stream, [&](const GemmResources& r) {
    if (lt_dtype(dtype) && args.k > 0 && !broadcast_batch && run_lt(r, dtype, args, nullptr, stream)) return;
    run_cublas(r, dtype, args, dtype);
  });
}

void gemm_f32_out(DType dtype, const GemmArgs& args, cudaStream_t stream) {
  if (dtype == DType::f32 || dtype == DType::f64) return gemm(dtype, args, stream);
  if (args.m == 0 || args.n == 0 || args.batch == 0) return;
  if (!lt_dtype(dtype)) throw_unsupported_dtype("gemm_f32_out", dtype);
  check_extents(args);
  with_resources(stream, [&](const GemmResources& r) { run_cublas(r, dtype, args, DType::f32); });
}

GemmPlanStats gemm_plan_stats(const GemmPlanCache& cache) {
  GemmPlanStats stats;
  for (const auto& [key, plan] : cache.plans) {
    ++stats.plans;
    if (!plan.found) ++stats.without_algorithm;
  }
  return stats;
}

bool gemm_with_epilogue(DType dtype, const GemmArgs& args, const GemmEpilogue& epilogue, cudaStream_t stream) {
  GENESIS_CHECK(args.batch == 1 && args.m > 0 && args.n > 0 && args.k > 0 && args.alpha == 1.0 && args.beta == 0.0,
                ValueError, "gemm_with_epilogue: needs one GEMM (batch ", args.batch, ") with m, n, k > 0 (got ",
                args.m, ", ", args.n, ", ", args.k, "), alpha = 1 and beta = 0");
  GENESIS_CHECK((epilogue.kind != EpilogueKind::bias || epilogue.bias) &&
                    (epilogue.kind != EpilogueKind::bias_grad || epilogue.bias_grad),
                ValueError, "gemm_with_epilogue: the bias epilogues need their bias pointer");
  GENESIS_CHECK(!epilogue.pre_activation || (epilogue.ld_pre % 8 == 0 && epilogue.ld_pre >= args.n), ValueError,
                "gemm_with_epilogue: the pre-activation leading dimension must be a multiple of 8 and >= n (got ",
                epilogue.ld_pre, " for n = ", args.n, ")");
  check_extents(args);
  if (!lt_dtype(dtype)) return false;
  bool ran = false;
  with_resources(stream, [&](const GemmResources& r) { ran = run_lt(r, dtype, args, &epilogue, stream); });
  return ran;
}

}  // namespace genesis::kernels::cuda
