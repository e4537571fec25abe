#pragma once
// CPU threads: how many OpenMP threads (and OpenBLAS threads, the same pool in the OpenMP
// build of OpenBLAS) the kernels use, and how idle threads wait. On a shared machine the
// libgomp defaults collapse: threads that wait at a barrier spin for ~3 ms (300,000 polls)
// while the thread they wait for is descheduled by another process, so a 2-core host with one
// busy neighbour ran the MLP recipe 12x slower at 2 threads than at 1. Two remedies:
//  - the wait policy: before libgomp reads its environment (GENESIS_PREINIT in main.cpp), the
//    load on this process's CPUs is sampled and GOMP_SPINCOUNT set from it: 1,000 polls
//    (microseconds, then a futex sleep) when other processes use half a core or more, 10,000
//    on a free host, where sleeping between ops cost more than the spinning (waking a thread takes
//    tens of microseconds on a VM: MLP steps 16% slower at 1,000 on the 2-core build host);
//    with a busy neighbour 10,000 made them 4.8x slower, 1,000 1.4x;
//  - the thread count: run.threads when > 0, else OMP_NUM_THREADS when set, else the free
//    cores (choose_threads), and a note when explicit settings ask for more than are free.
// docs/architecture.md ("CPU threads") describes the rule and the measurements behind it.
#include <cstdint>
#include <functional>
#include <string>

#include "kernels/cpu/isa.h"

namespace genesis {

// What the thread count is chosen from.
struct ThreadInputs {
  int64_t run_threads = 0;  // the recipe's run.threads; 0 = automatic
  int64_t env_threads = 0;  // OMP_NUM_THREADS (its first value); 0 = not set or not a number
  int cores = 1;            // CPUs this process may run on: the affinity mask, capped by a cgroup CPU quota
  double busy_cores = -1;   // CPU time other processes used over a short sample, in cores; < 0 = unknown
  int ranks_per_host = 1;   // processes of one distributed run on this host: each takes its share of the cores
};

struct ThreadChoice {
  int64_t threads = 1;
  std::string source;  // "run.threads", "OMP_NUM_THREADS" or "automatic"
  int cores = 1;
  int free_cores = 1;           // cores minus the busy ones (a core counts as busy at >= 0.5 used), at least 1
  double busy_cores = -1;       // as measured; < 0 = not measured
  bool oversubscribed = false;  // threads > free_cores: expect steps several times slower
  std::string reason;           // one sentence: why this many threads
};

// The decision, without reading the machine: run.threads > 0 wins, then OMP_NUM_THREADS, then
// the free cores. Never below 1.
ThreadChoice choose_threads(const ThreadInputs& in);

// OMP_NUM_THREADS's first value (OpenMP's list syntax "4,2" gives 4); 0 when unset or invalid.
int64_t parse_omp_num_threads(const char* value);

struct ThreadOptions {
  // Sample the other processes' CPU use (blocks for sample_s); false: assume no load
  // (CUDA runs, where CPU threads matter little).
  bool measure_load = true;
  double sample_s = 0.1;
  int ranks_per_host = 1;  // a distributed run's local ranks: the automatic count is a share of the free cores
};

// Reads the machine (affinity, cgroup quota, /proc/stat over sample_s, OMP_NUM_THREADS),
// chooses and applies the choice (omp_set_num_threads and openblas_set_num_threads; an
// OMP_NUM_THREADS setting is left to the runtimes as before). Called by genesis train, eval,
// bench and info.
ThreadChoice configure_threads(int64_t run_threads, const ThreadOptions& options = {});

// One "note: ..." line for the run log, or "" when there is nothing to say: explicit settings
// that oversubscribe the free cores (the collapse warning), or an automatic choice below the
// cores because other processes keep some busy.
std::string thread_note(const ThreadChoice& choice);

// The libgomp wait settings of this process and who set them.
struct WaitPolicy {
  std::string omp_wait_policy;  // OMP_WAIT_POLICY ("" = unset)
  std::string gomp_spincount;   // GOMP_SPINCOUNT ("" = unset)
  std::string source;  // kWaitSourceFreeHost, kWaitSourceSharedHost, "user" or "libgomp default"
};
inline constexpr const char* kWaitSourceFreeHost = "genesis, free host";
inline constexpr const char* kWaitSourceSharedHost = "genesis, shared host";
WaitPolicy wait_policy();

// How the linked OpenBLAS runs in parallel: "openmp", "pthreads" or "sequential".
std::string blas_threading();

// The spin counts set when the user sets neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT, on a
// host that other processes keep busy and on a free one; the start-up sample that decides.
inline constexpr const char* kSpinCountShared = "1000";
inline constexpr const char* kSpinCountFree = "10000";
inline constexpr long kWaitPolicySampleMs = 50;
// A host is free while other processes use less than this many cores of this process's CPUs
// (choose_threads's rule: a core counts as busy when others use half of it or more).
inline constexpr double kFreeHostBusyCores = 0.5;
// Free below kFreeHostBusyCores; a load that could not be measured (< 0) is not free.
bool is_free_host(double busy_cores);
// kSpinCountFree on a free host, else kSpinCountShared.
const char* spin_count_for(double busy_cores);

// What the CPU offers that OpenBLAS's kernel choice depends on (kernels/cpu/isa.h).
using kernels::cpu::CpuFeatures;
using kernels::cpu::cpu_features;

// The OPENBLAS_CORETYPE to run with when OpenBLAS picked `detected` on a CPU with `features`:
// "" when its choice stands; "SkylakeX" (AVX-512) or "Haswell" (AVX2) when it fell back to a
// generic core (Prescott, Core2, Penryn, Nehalem, Atom, ...), as OpenBLAS 0.3.21 does on CPUs
// newer than its tables, e.g. Sapphire Rapids Xeons: a CNN step ran 2.2x slower there
// (docs/benchmarks.md).
const char* blas_core_for(const CpuFeatures& features, const char* detected);

// Called first in main(): when blas_core_for asks for another core and neither
// OPENBLAS_CORETYPE nor GENESIS_BLAS_CORE is set, re-executes the program (/proc/self/exe, same
// pid and arguments) with OPENBLAS_CORETYPE and GENESIS_BLAS_CORE=auto added. OpenBLAS reads
// the variable once, when it loads; this runs after it did, so that the re-execution happens
// only where its own detection failed. Returns when nothing needs to change or the exec fails.
void reexec_for_blas_core(char** argv);

// A note for the run log when OpenBLAS still runs a generic core on a CPU with AVX2 (the user
// forced it, or the re-execution failed), naming the OPENBLAS_CORETYPE to set; "" otherwise.
std::string blas_core_note();

// Who chose OpenBLAS's kernels, for `genesis info`: "OpenBLAS", "user (OPENBLAS_CORETYPE=...)"
// or "genesis (OpenBLAS fell back to a generic core: OPENBLAS_CORETYPE=...)".
std::string blas_core_source();

// Runs before any shared library's constructor (from .preinit_array, see GENESIS_PREINIT):
// when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, samples the load for
// kWaitPolicySampleMs and re-executes the program (/proc/self/exe, same pid and arguments)
// with GOMP_SPINCOUNT=spin_count_for(load) and GENESIS_WAIT_POLICY=free or shared added.
// libgomp reads its environment once, in its own constructor, before main() and before any
// constructor of the executable, so a setenv() in main() would be too late, and at preinit
// time the C library's environment is not set up yet for setenv(). Does nothing when the
// exec fails (the libgomp defaults then apply). Ranks that dist/launcher.cpp starts beside
// each other get the shared count when the launcher had the free one.
void preinit_wait_policy(int argc, char** argv, char** envp);

}  // namespace genesis

// In the executable's main.cpp: the dynamic loader runs .preinit_array entries of the
// executable only, and before any shared library's constructor (libgomp's included).
#define GENESIS_PREINIT                                                                                       \
  [[gnu::section(".preinit_array"), gnu::used]] static void (*genesis_preinit)(int, char**, char**) = \
      &genesis::preinit_wait_policy
