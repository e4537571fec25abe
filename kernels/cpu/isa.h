#pragma once
// The x86 instruction sets the CPU kernels' hot loops are compiled for, chosen once per
// process at run time. A loop body (a lambda) handed to with_cpu_isa is inlined into a function
// built for the best set the CPU and the operating system support (GCC's target attribute
// plus flatten), so one source serves AVX-512, AVX2 + FMA and the x86-64 baseline. Only that
// function and what it inlines use the wider instructions: a callee the compiler leaves out of
// line keeps the baseline code, so no AVX instruction can reach a CPU without it.
#include <cstdint>

namespace genesis::kernels::cpu {

// What CPUID and XGETBV report (the operating system must save the wider registers).
struct CpuFeatures {
  bool avx2 = false;    // AVX2, FMA and F16C, enabled by the OS
  bool avx512 = false;  // AVX-512 F, DQ, BW and VL, enabled by the OS
};
CpuFeatures cpu_features();

enum class CpuIsa : uint8_t { baseline, avx2, avx512 };

// The set the kernels use: the best of cpu_features(), or a lower one named by
// GENESIS_CPU_ISA (baseline, avx2, avx512; for comparisons and tests). Read once.
CpuIsa cpu_isa();
const char* cpu_isa_name(CpuIsa isa);
// Why cpu_isa() is what it is, for `genesis info`.
const char* cpu_isa_source();

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GENESIS_CPU_MULTI_ISA 1
template <class F>
__attribute__((target("arch=x86-64-v4"), flatten)) void run_avx512(F& body) {
  body();
}
template <class F>
__attribute__((target("arch=x86-64-v3"), flatten)) void run_avx2(F& body) {
  body();
}
#else
#define GENESIS_CPU_MULTI_ISA 0
#endif
template <class F>
__attribute__((flatten)) void run_baseline(F& body) {
  body();
}

// Runs body() compiled for cpu_isa().
template <class F>
void with_cpu_isa(F&& body) {
#if GENESIS_CPU_MULTI_ISA
  switch (cpu_isa()) {
    case CpuIsa::avx512: return run_avx512(body);
    case CpuIsa::avx2: return run_avx2(body);
    case CpuIsa::baseline: break;
  }
#endif
  run_baseline(body);
}

}  // namespace genesis::kernels::cpu
