#include "kernels/cuda/cublas_api.h"

#include <dlfcn.h>

#include <mutex>

#include "kernels/cuda/cublas_check.h"
#include "libgenesis/core/error.h"

#ifndef GENESIS_CUDA_LIBRARY_DIR
#error "GENESIS_CUDA_LIBRARY_DIR (the CUDA toolkit's library directory) is set by kernels/CMakeLists.txt"
#endif

namespace genesis::kernels::cuda {
namespace {

// Compiles only when the alias names one of the declared overloads exactly (unevaluated: no
// reference to the symbol reaches the linker).
static_assert(sizeof(static_cast<CublasGemmStridedBatchedEx>(&::cublasGemmStridedBatchedEx)) > 0);

// The soname of the libraries the headers describe: libcublas.so.13 for cuBLAS 13.x.
std::string cublas_soname(const char* stem) {
  return std::string(stem) + ".so." + std::to_string(CUBLAS_VER_MAJOR);
}

// The last dlerror() as a string (dlerror() itself may return null).
std::string last_dl_error() {
  const char* text = dlerror();
  return text ? text : "unknown error";
}

template <class Function>
void resolve(void* library, const std::string& soname, const char* symbol, Function& function) {
  dlerror();
  void* address = dlsym(library, symbol);
  GENESIS_CHECK(address != nullptr, Error, "cuBLAS: ", soname, " has no ", symbol, " (", last_dl_error(),
                "): genesis was built against cuBLAS ", CUBLAS_VER_MAJOR, ".", CUBLAS_VER_MINOR,
                "; install that version's libraries or put their directory on LD_LIBRARY_PATH");
  function = reinterpret_cast<Function>(address);
}

CublasApi load_cublas() {
  CublasApi api;
  // cuBLASLt first: libcublas needs it, and this finds it in the same places as libcublas.
  const std::string lt_soname = cublas_soname("libcublasLt");
  void* lt = open_cuda_library(lt_soname, "cuBLASLt");
  resolve(lt, lt_soname, "cublasLtCreate", api.cublasLtCreate);
  resolve(lt, lt_soname, "cublasLtMatmul", api.cublasLtMatmul);
  resolve(lt, lt_soname, "cublasLtMatmulAlgoGetHeuristic", api.cublasLtMatmulAlgoGetHeuristic);
  resolve(lt, lt_soname, "cublasLtMatmulDescCreate", api.cublasLtMatmulDescCreate);
  resolve(lt, lt_soname, "cublasLtMatmulDescSetAttribute", api.cublasLtMatmulDescSetAttribute);
  resolve(lt, lt_soname, "cublasLtMatrixLayoutCreate", api.cublasLtMatrixLayoutCreate);
  resolve(lt, lt_soname, "cublasLtMatrixLayoutSetAttribute", api.cublasLtMatrixLayoutSetAttribute);
  resolve(lt, lt_soname, "cublasLtMatmulPreferenceCreate", api.cublasLtMatmulPreferenceCreate);
  resolve(lt, lt_soname, "cublasLtMatmulPreferenceSetAttribute", api.cublasLtMatmulPreferenceSetAttribute);
  resolve(lt, lt_soname, "cublasLtMatmulPreferenceDestroy", api.cublasLtMatmulPreferenceDestroy);

  const std::string blas_soname = cublas_soname("libcublas");
  void* blas = open_cuda_library(blas_soname, "cuBLAS");
  resolve(blas, blas_soname, "cublasGetStatusName", api.cublasGetStatusName);
  resolve(blas, blas_soname, "cublasGetStatusString", api.cublasGetStatusString);
  resolve(blas, blas_soname, "cublasCreate_v2", api.cublasCreate_v2);
  resolve(blas, blas_soname, "cublasSetStream_v2", api.cublasSetStream_v2);
  resolve(blas, blas_soname, "cublasSetWorkspace_v2", api.cublasSetWorkspace_v2);
  resolve(blas, blas_soname, "cublasGemmStridedBatchedEx", api.cublasGemmStridedBatchedEx);
  return api;  // the libraries stay open for the life of the process
}

}  // namespace

void* open_cuda_library(const std::string& soname, const char* what) {
  if (void* library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return library;
  const std::string by_name = last_dl_error();
  const std::string path = std::string(GENESIS_CUDA_LIBRARY_DIR) + "/" + soname;
  if (void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return library;
  GENESIS_THROW(Error, what, " is needed for this CUDA work but ", soname, " could not be loaded (", by_name, "; ",
                last_dl_error(), "): install the CUDA toolkit's ", what, " or put the directory that holds ", soname,
                " on LD_LIBRARY_PATH");
}

const CublasApi& cublas_api() {
  static std::once_flag loaded;
  static CublasApi api;
  std::call_once(loaded, [] { api = load_cublas(); });
  return api;
}

void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file, int line) {
  // A status comes from a loaded library, so the table is already filled here.
  const CublasApi& api = cublas_api();
  GENESIS_THROW(Error, "cuBLAS error ", api.cublasGetStatusName(status), ": ", api.cublasGetStatusString(status),
                " at ", expr, " (", file, ":", line, ")");
}

}  // namespace genesis::kernels::cuda
