#pragma once
// cuBLAS and cuBLASLt, opened with dlopen at their first use instead of being linked: linked,
// their static initializers and page faults ran before main() in every process, CPU runs and
// test cases included (`genesis --version`: 0.6-1.0 s against 0.1 s without them on the
// 2-core build host, `perf record` puts ~70% of it in them). The headers give the types
// only; every call goes through the table below.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>

namespace genesis::kernels::cuda {

// cublasGemmStridedBatchedEx as exported. cublas_api.h overloads it in C++ with an inline form
// that takes the legacy cudaDataType compute type, so decltype cannot name it; cublas_api.cpp
// checks that this type picks the exported overload.
using CublasGemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                                      int, const void*, const void*, cudaDataType, int, long long,
                                                      const void*, cudaDataType, int, long long, const void*, void*,
                                                      cudaDataType, int, long long, int, cublasComputeType_t,
                                                      cublasGemmAlgo_t);

// The entry points genesis calls, each with cuBLAS's own type and exported name (cublas_v2.h
// maps the documented cublasCreate, cublasSetStream, cublasSetWorkspace to their _v2 symbols,
// so call sites write the documented names).
struct CublasApi {
  decltype(&::cublasGetStatusName) cublasGetStatusName = nullptr;
  decltype(&::cublasGetStatusString) cublasGetStatusString = nullptr;
  decltype(&::cublasCreate_v2) cublasCreate_v2 = nullptr;
  decltype(&::cublasSetStream_v2) cublasSetStream_v2 = nullptr;
  decltype(&::cublasSetWorkspace_v2) cublasSetWorkspace_v2 = nullptr;
  CublasGemmStridedBatchedEx cublasGemmStridedBatchedEx = nullptr;

  decltype(&::cublasLtCreate) cublasLtCreate = nullptr;
  decltype(&::cublasLtMatmul) cublasLtMatmul = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) cublasLtMatmulAlgoGetHeuristic = nullptr;
  decltype(&::cublasLtMatmulDescCreate) cublasLtMatmulDescCreate = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) cublasLtMatmulDescSetAttribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) cublasLtMatrixLayoutCreate = nullptr;
  decltype(&::cublasLtMatrixLayoutSetAttribute) cublasLtMatrixLayoutSetAttribute = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) cublasLtMatmulPreferenceCreate = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) cublasLtMatmulPreferenceSetAttribute = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) cublasLtMatmulPreferenceDestroy = nullptr;
};

// The table, filled on the first call (thread-safe) from libcublasLt.so.N and libcublas.so.N,
// N being the major version of the headers genesis was built with. Throws Error, saying what
// to install, when a library cannot be opened or lacks an entry point; a later call tries again.
const CublasApi& cublas_api();

// dlopen(RTLD_NOW | RTLD_LOCAL) of a library of the CUDA toolkit: by soname first (LD_LIBRARY_PATH,
// the executable's RUNPATH, the system's cache), then in the toolkit's library directory found
// at configure time. Throws Error naming the library, both failures, and what to do.
void* open_cuda_library(const std::string& soname, const char* what);

}  // namespace genesis::kernels::cuda
