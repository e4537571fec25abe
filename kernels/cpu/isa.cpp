#include "kernels/cpu/isa.h"

#include <cpuid.h>

#include <cstdlib>
#include <string_view>

namespace genesis::kernels::cpu {

CpuFeatures cpu_features() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return f;  // no OSXSAVE: no XGETBV
  const bool fma = (ecx & (1u << 12)) != 0;
  const bool f16c = (ecx & (1u << 29)) != 0;  // x86-64-v3, the AVX2 functions' target, includes it
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool os_ymm = (xcr0_lo & 0x6u) == 0x6u;    // SSE and AVX state
  const bool os_zmm = (xcr0_lo & 0xE6u) == 0xE6u;  // and opmask, ZMM upper halves, ZMM16-31
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  f.avx2 = os_ymm && fma && f16c && (ebx & (1u << 5)) != 0;
  const unsigned avx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);  // F, DQ, BW, VL
  f.avx512 = f.avx2 && os_zmm && (ebx & avx512) == avx512;
  return f;
}

namespace {

struct IsaChoice {
  CpuIsa isa;
  const char* source;
};

// Chosen on first use and kept: the kernels' results must not change within a process.
const IsaChoice& isa_choice() {
  static const IsaChoice chosen = [] {
    const CpuFeatures f = cpu_features();
    CpuIsa best = f.avx512 ? CpuIsa::avx512 : f.avx2 ? CpuIsa::avx2 : CpuIsa::baseline;
    if (!GENESIS_CPU_MULTI_ISA)
      return IsaChoice{CpuIsa::baseline, "this build has one instruction set (x86-64 baseline)"};
    const char* asked = std::getenv("GENESIS_CPU_ISA");
    if (asked != nullptr && *asked != '\0') {
      const std::string_view name(asked);
      const CpuIsa wanted = name == "avx512" ? CpuIsa::avx512 : name == "avx2" ? CpuIsa::avx2 : CpuIsa::baseline;
      if (wanted <= best) return IsaChoice{wanted, "GENESIS_CPU_ISA"};
      return IsaChoice{best, "GENESIS_CPU_ISA asks for more than the CPU supports; using the best it has"};
    }
    return IsaChoice{best, "the best the CPU and operating system support (CPUID, XGETBV)"};
  }();
  return chosen;
}

}  // namespace

CpuIsa cpu_isa() { return isa_choice().isa; }
const char* cpu_isa_source() { return isa_choice().source; }

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::avx512: return "avx512";
    case CpuIsa::avx2: return "avx2";
    case CpuIsa::baseline: break;
  }
  return "baseline";
}

}  // namespace genesis::kernels::cpu
