// CPU threads (libgenesis/core/threads.h): the decision rule (cores, load, explicit settings ->
// threads), OMP_NUM_THREADS parsing, the notes, applying a choice, and the OpenMP wait policy
// that main() gets before libgomp reads its environment.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "libgenesis/core/threads.h"

using namespace genesis;

namespace {

ThreadChoice choose(int64_t run_threads, int64_t env_threads, int cores, double busy) {
  return choose_threads({.run_threads = run_threads, .env_threads = env_threads, .cores = cores, .busy_cores = busy});
}

}  // namespace

TEST_CASE("threads: the automatic choice is the free cores, never below 1", "[cpu][threads]") {
  // cores, busy cores of other processes -> threads
  struct Row {
    int cores;
    double busy;
    int64_t threads;
  };
  for (Row r : {Row{2, 0.0, 2}, Row{2, 0.4, 2}, Row{2, 0.5, 1}, Row{2, 1.0, 1}, Row{2, 1.6, 1}, Row{2, 2.0, 1},
                Row{16, 3.2, 13}, Row{16, 16.0, 1}, Row{1, 0.0, 1}, Row{1, 1.0, 1}, Row{8, -1.0, 8}, Row{0, 0.0, 1}}) {
    INFO("cores " << r.cores << ", busy " << r.busy);
    ThreadChoice c = choose(0, 0, r.cores, r.busy);
    CHECK(c.threads == r.threads);
    CHECK(c.free_cores == r.threads);
    CHECK(c.source == "automatic");
    CHECK_FALSE(c.oversubscribed);
  }
  CHECK(choose(0, 0, 2, 1.0).reason == "1 free core: other processes keep ~1.0 of 2 cores busy");
  CHECK(choose(0, 0, 4, 0.0).reason ==
        "all 4 cores this process may use are free (other processes keep ~0.0 of 4 cores busy)");
  CHECK(choose(0, 0, 4, -1.0).reason == "all 4 cores this process may use are free (load not measured)");
}

TEST_CASE("threads: run.threads, then OMP_NUM_THREADS, win over the automatic choice", "[cpu][threads]") {
  ThreadChoice c = choose(3, 5, 2, 0.0);
  CHECK(c.threads == 3);
  CHECK(c.source == "run.threads");
  CHECK(c.oversubscribed);  // 3 threads on 2 free cores
  c = choose(0, 5, 8, 0.0);
  CHECK(c.threads == 5);
  CHECK(c.source == "OMP_NUM_THREADS");
  CHECK_FALSE(c.oversubscribed);
  // Explicit settings stand under load; they are only flagged.
  c = choose(2, 0, 2, 1.0);
  CHECK(c.threads == 2);
  CHECK(c.free_cores == 1);
  CHECK(c.oversubscribed);
  c = choose(1, 0, 2, 1.0);
  CHECK(c.threads == 1);
  CHECK_FALSE(c.oversubscribed);
  // Load not measured: only more threads than cores is oversubscription.
  CHECK_FALSE(choose(2, 0, 2, -1.0).oversubscribed);
  CHECK(choose(4, 0, 2, -1.0).oversubscribed);
}

TEST_CASE("threads: the notes name the cause and the fix, and say nothing otherwise", "[cpu][threads]") {
  CHECK(thread_note(choose(0, 0, 2, 0.0)).empty());
  CHECK(thread_note(choose(2, 0, 2, 0.0)).empty());
  CHECK(thread_note(choose(0, 4, 8, 1.0)).empty());
  CHECK(thread_note(choose(2, 0, 2, 1.0)) ==
        "note: 2 CPU threads (run.threads) but only 1 core free (other processes keep ~1.0 of 2 cores busy): steps "
        "may run several times slower; run.threads = 0 picks the free cores");
  CHECK(thread_note(choose(0, 2, 2, 1.2)).find("unsetting OMP_NUM_THREADS picks the free cores") != std::string::npos);
  CHECK(thread_note(choose(0, 0, 2, 1.0)) == "note: using 1 CPU thread: other processes keep ~1.0 of 2 cores busy");
}

TEST_CASE("threads: OMP_NUM_THREADS is read as OpenMP reads it", "[cpu][threads]") {
  CHECK(parse_omp_num_threads(nullptr) == 0);
  CHECK(parse_omp_num_threads("") == 0);
  CHECK(parse_omp_num_threads("4") == 4);
  CHECK(parse_omp_num_threads(" 3") == 3);
  CHECK(parse_omp_num_threads("4,2") == 4);
  CHECK(parse_omp_num_threads("0") == 0);
  CHECK(parse_omp_num_threads("-2") == 0);
  CHECK(parse_omp_num_threads("2x") == 0);
  CHECK(parse_omp_num_threads("many") == 0);
}

TEST_CASE("threads: configure_threads applies run.threads to OpenMP", "[cpu][threads]") {
  const int before = omp_get_max_threads();
  ThreadChoice c = configure_threads(3, {.measure_load = false});
  if (std::getenv("OMP_NUM_THREADS") == nullptr || c.source == "run.threads") {
    CHECK(c.source == "run.threads");
    CHECK(c.threads == 3);
    CHECK(omp_get_max_threads() == 3);
  }
  CHECK(c.busy_cores < 0);
  CHECK(c.cores >= 1);
  ThreadChoice measured = configure_threads(0, {.measure_load = true, .sample_s = 0.02});
  CHECK(measured.threads >= 1);
  CHECK(measured.threads <= std::max<int64_t>(measured.cores, parse_omp_num_threads(std::getenv("OMP_NUM_THREADS"))));
  configure_threads(before, {.measure_load = false});  // OpenMP's and OpenBLAS's counts as before
  CHECK(blas_threading() == "openmp");                 // one thread pool: OpenBLAS's threads are OpenMP's
}

TEST_CASE("threads: the OpenMP wait policy is bounded before libgomp starts", "[cpu][threads]") {
  // The spin count from the start-up load: long only where the load is known and below half a core.
  CHECK(std::string(spin_count_for(0.0)) == kSpinCountFree);
  CHECK(std::string(spin_count_for(0.4)) == kSpinCountFree);
  CHECK(std::string(spin_count_for(0.5)) == kSpinCountShared);
  CHECK(std::string(spin_count_for(1.7)) == kSpinCountShared);
  CHECK(std::string(spin_count_for(-1.0)) == kSpinCountShared);

  // This process: tests/main.cpp re-executed it with GOMP_SPINCOUNT set unless the user had
  // set a policy of their own.
  WaitPolicy w = wait_policy();
  CHECK(w.source != "libgomp default");
  if (w.source == "genesis, free host") CHECK(w.gomp_spincount == kSpinCountFree);
  if (w.source == "genesis, shared host") CHECK(w.gomp_spincount == kSpinCountShared);

  // A fresh process with no policy in its environment: libgomp itself reports the spin count
  // it read (OMP_DISPLAY_ENV prints its settings when it initialises, before main()).
  std::array<char, 4096> exe{};
  ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  REQUIRE(n > 0);
  const std::string command =
      "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u GENESIS_WAIT_POLICY OMP_DISPLAY_ENV=verbose '" +
      std::string(exe.data(), static_cast<size_t>(n)) + "' --list-test-names-only '[threads-no-such-tag]' 2>&1";
  std::FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), pipe) != nullptr) out += buf.data();
  CHECK(pclose(pipe) == 0);
  INFO(out);
  const bool bounded = out.find("GOMP_SPINCOUNT = '" + std::string(kSpinCountShared) + "'") != std::string::npos ||
                       out.find("GOMP_SPINCOUNT = '" + std::string(kSpinCountFree) + "'") != std::string::npos;
  CHECK(bounded);
}

TEST_CASE("threads: OpenBLAS's generic cores are replaced by the CPU's vector kernels", "[cpu][threads]") {
  const CpuFeatures none{}, avx2{.avx2 = true}, avx512{.avx2 = true, .avx512 = true};
  // What OpenBLAS 0.3.21 chose on a Sapphire Rapids Xeon it did not know: its SSE3 kernels.
  CHECK(std::string(blas_core_for(avx512, "Prescott")) == "SkylakeX");
  CHECK(std::string(blas_core_for(avx2, "Nehalem")) == "Haswell");
  CHECK(std::string(blas_core_for(none, "Prescott")).empty());  // nothing better to offer
  // A core OpenBLAS recognised stands.
  for (const char* known : {"Haswell", "SkylakeX", "Cooperlake", "Zen", "SapphireRapids"})
    CHECK(std::string(blas_core_for(avx512, known)).empty());
  CHECK(std::string(blas_core_for(avx512, nullptr)).empty());
  // This machine: the features agree with the compiler's own detection.
  const CpuFeatures here = cpu_features();
  CHECK(here.avx2 == (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")));
  CHECK(here.avx512 == (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")));
  // Who chose the kernels, as genesis info says it.
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  const char* marker = std::getenv("GENESIS_BLAS_CORE");
  const std::string source = blas_core_source();
  if (core == nullptr) CHECK(source == "OpenBLAS");
  else if (marker != nullptr && std::string(marker) == "auto") CHECK(source.rfind("genesis (", 0) == 0);
  else CHECK(source == "user (OPENBLAS_CORETYPE=" + std::string(core) + ")");
}
