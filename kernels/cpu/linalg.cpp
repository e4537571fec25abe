#include "kernels/cpu/linalg.h"

#include <cblas.h>
#if GENESIS_WITH_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include <algorithm>
#include <vector>

#include "kernels/cpu/loops.h"

namespace genesis::kernels::cpu {

namespace {

CBLAS_TRANSPOSE blas_trans(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

// A stored matrix of one batch entry: `rows` rows of `cols` elements, `ld` apart.
struct StoredMatrix {
  int64_t rows, cols, ld;
};

StoredMatrix stored_a(const GemmArgs& g) { return {g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda}; }
StoredMatrix stored_b(const GemmArgs& g) { return {g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb}; }

// Copies a strided matrix into a dense f32 buffer (leading dimension = cols).
template <class T>
void widen_matrix(const T* src, StoredMatrix m, float* dst) {
  parallel_for(m.rows, m.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t c = 0; c < m.cols; ++c) dst[r * m.cols + c] = static_cast<float>(src[r * m.ld + c]);
  });
}

// f16/bf16: each batch entry's A and B (and C when beta != 0) are widened to f32 scratch,
// multiplied by sgemm, and the f32 result is rounded back into C.
template <class T>
void gemm_half(const GemmArgs& g) {
  StoredMatrix a = stored_a(g), b = stored_b(g), c{g.m, g.n, g.ldc};
  std::vector<float> a32(static_cast<size_t>(a.rows * a.cols)), b32(static_cast<size_t>(b.rows * b.cols));
  std::vector<float> c32(static_cast<size_t>(c.rows * c.cols), 0.0f);
  const T* a_base = static_cast<const T*>(g.a);
  const T* b_base = static_cast<const T*>(g.b);
  T* c_base = static_cast<T*>(g.c);
  for (int64_t i = 0; i < g.batch; ++i) {
    T* ci = c_base + i * g.stride_c;
    widen_matrix(a_base + i * g.stride_a, a, a32.data());
    widen_matrix(b_base + i * g.stride_b, b, b32.data());
    if (g.beta != 0.0) widen_matrix<T>(ci, c, c32.data());
    sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, static_cast<float>(g.alpha), a32.data(), std::max<int64_t>(a.cols, 1),
          b32.data(), std::max<int64_t>(b.cols, 1), static_cast<float>(g.beta), c32.data(), c.cols);
    parallel_for(c.rows, c.cols, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        for (int64_t col = 0; col < c.cols; ++col) ci[r * g.ldc + col] = T(c32[static_cast<size_t>(r * c.cols + col)]);
    });
  }
}

struct GemmChoice {
  CpuGemm gemm;
  const char* source;
};

GemmChoice choose_gemm() {
  const char* asked = std::getenv("GENESIS_CPU_GEMM");
  const std::string_view name = asked ? asked : "";
#if GENESIS_WITH_DNNL
  if (name == "openblas") return {CpuGemm::openblas, "GENESIS_CPU_GEMM"};
  if (name == "onednn") return {CpuGemm::onednn, "GENESIS_CPU_GEMM"};
  return {CpuGemm::onednn, "the build has oneDNN, whose JIT sgemm measured 2x OpenBLAS's"};
#else
  if (name == "onednn") return {CpuGemm::openblas, "GENESIS_CPU_GEMM=onednn, but this build has no oneDNN"};
  return {CpuGemm::openblas, "the build has no oneDNN"};
#endif
}

const GemmChoice& gemm_choice() {
  static const GemmChoice c = choose_gemm();
  return c;
}

}  // namespace

CpuGemm cpu_gemm() { return gemm_choice().gemm; }
const char* cpu_gemm_source() { return gemm_choice().source; }
const char* cpu_gemm_name(CpuGemm gemm) { return gemm == CpuGemm::onednn ? "onednn" : "openblas"; }

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
#if GENESIS_WITH_DNNL
  if (cpu_gemm() == CpuGemm::onednn) {
    const dnnl_status_t status =
        dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (status != dnnl_success) throw std::runtime_error("oneDNN sgemm failed (status " + std::to_string(status) + ")");
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, blas_trans(trans_a), blas_trans(trans_b), static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

void gemm(DType dtype, const GemmArgs& g) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const auto m = static_cast<int>(g.m), n = static_cast<int>(g.n), k = static_cast<int>(g.k);
  const auto lda = static_cast<int>(g.lda), ldb = static_cast<int>(g.ldb), ldc = static_cast<int>(g.ldc);
  const CBLAS_TRANSPOSE ta = blas_trans(g.trans_a), tb = blas_trans(g.trans_b);
  // One GEMM per batch entry; OpenBLAS threads each of them.
  switch (dtype) {
    case DType::f32: {
      const auto* a = static_cast<const float*>(g.a);
      const auto* b = static_cast<const float*>(g.b);
      auto* c = static_cast<float*>(g.c);
      for (int64_t i = 0; i < g.batch; ++i)
        sgemm(g.trans_a, g.trans_b, g.m, g.n, g.k, static_cast<float>(g.alpha), a + i * g.stride_a, g.lda,
              b + i * g.stride_b, g.ldb, static_cast<float>(g.beta), c + i * g.stride_c, g.ldc);
      return;
    }
    case DType::f64: {
      const auto* a = static_cast<const double*>(g.a);
      const auto* b = static_cast<const double*>(g.b);
      auto* c = static_cast<double*>(g.c);
      for (int64_t i = 0; i < g.batch; ++i)
        cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, g.alpha, a + i * g.stride_a, lda, b + i * g.stride_b, ldb, g.beta,
                    c + i * g.stride_c, ldc);
      return;
    }
    case DType::f16: return gemm_half<float16>(g);
    case DType::bf16: return gemm_half<bfloat16>(g);
    default: throw_unsupported_dtype("gemm", dtype);
  }
}


}  // namespace genesis::kernels::cpu
