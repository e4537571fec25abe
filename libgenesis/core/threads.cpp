#include "libgenesis/core/threads.h"


#include <alloca.h>
#include <fcntl.h>
#include <omp.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

extern "C" void openblas_set_num_threads(int);
extern "C" int openblas_get_parallel(void);
extern "C" char* openblas_get_corename(void);

namespace genesis {

namespace {

std::string cores_text(double n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", n);
  return buf;
}

std::string plural(int64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// CPUs in this process's affinity mask (the ids index /proc/stat's cpuN lines), in ascending
// order, into ids[CPU_SETSIZE]; returns how many (0 when the mask cannot be read). A system
// call and a loop: the start-up hook uses it before the C library is initialised.
int affinity_cpus(int* ids) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int count = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int i = 0; i < CPU_SETSIZE; ++i)
      if (CPU_ISSET(i, &set)) ids[count++] = i;
  return count;
}

std::vector<int> allowed_cpus() {
  std::vector<int> ids(CPU_SETSIZE);
  ids.resize(static_cast<size_t>(affinity_cpus(ids.data())));
  if (ids.empty()) {
    unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < n; ++i) ids.push_back(static_cast<int>(i));
  }
  return ids;
}

// Whole cores granted by a cgroup CPU quota (v2 cpu.max, v1 cfs_quota_us), rounded up; 0 = none.
int cgroup_quota_cores() {
  double quota = -1, period = 0;
  if (std::ifstream f("/sys/fs/cgroup/cpu.max"); f) {
    std::string q;
    if (f >> q >> period && q != "max") quota = std::atof(q.c_str());
  } else {
    for (const char* dir : {"/sys/fs/cgroup/cpu/", "/sys/fs/cgroup/cpu,cpuacct/"}) {
      std::ifstream fq(std::string(dir) + "cpu.cfs_quota_us"), fp(std::string(dir) + "cpu.cfs_period_us");
      if (fq >> quota && fp >> period) break;
      quota = -1;
    }
  }
  if (quota <= 0 || period <= 0) return 0;
  return std::max(1, static_cast<int>(std::ceil(quota / period)));
}

// Busy and total clock ticks of the given CPUs since boot, from /proc/stat. Plain system calls
// and loops only: the start-up hook (preinit_wait_policy) calls it before the C and C++
// libraries are initialised.
struct CpuTicks {
  unsigned long long busy = 0, total = 0;
  int cpus = 0;  // how many of the given CPUs had a line
};

// Reads a decimal number at p, skipping spaces first; moves p past it.
unsigned long long parse_ticks(const char*& p, const char* end) {
  while (p < end && *p == ' ') ++p;
  unsigned long long v = 0;
  for (; p < end && *p >= '0' && *p <= '9'; ++p) v = v * 10 + static_cast<unsigned long long>(*p - '0');
  return v;
}

CpuTicks read_cpu_ticks(const int* cpus, int count) {
  CpuTicks t;
  // The cpu lines come first; 64 KiB holds them for about 800 CPUs (complete lines only count).
  char text[64 << 10];
  const int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return t;
  size_t size = 0;
  for (ssize_t got = 1; got > 0 && size < sizeof text;) {
    got = read(fd, text + size, sizeof text - size);
    if (got > 0) size += static_cast<size_t>(got);
  }
  close(fd);
  const char* const end = text + size;
  for (const char* line = text; line < end;) {
    const char* next = static_cast<const char*>(std::memchr(line, '\n', static_cast<size_t>(end - line)));
    if (next == nullptr || std::strncmp(line, "cpu", 3) != 0) break;  // a cut-off line, or past the cpu lines
    if (line[3] >= '0' && line[3] <= '9') {
      const char* p = line + 3;
      const auto id = static_cast<int>(parse_ticks(p, next));
      if (std::binary_search(cpus, cpus + count, id)) {  // affinity_cpus lists them in ascending order
        // user nice system idle iowait irq softirq steal (guest time is already in user).
        unsigned long long v[8] = {};
        for (unsigned long long& x : v) x = parse_ticks(p, next);
        const unsigned long long idle = v[3] + v[4];
        const unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
        t.busy += busy;
        t.total += busy + idle;
        ++t.cpus;
      }
    }
    line = next + 1;
  }
  return t;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// CPU time that other processes used on `cpus` (ascending) over sample_ms, in cores; -1 when unreadable.
// System calls only, as read_cpu_ticks.
double sample_busy_cores(const int* cpus, int count, long sample_ms) {
  const double own0 = process_cpu_seconds();
  const CpuTicks a = read_cpu_ticks(cpus, count);
  timespec pause{sample_ms / 1000, sample_ms % 1000 * 1000000};
  while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {
  }
  const CpuTicks b = read_cpu_ticks(cpus, count);
  const double own = process_cpu_seconds() - own0;
  if (a.cpus == 0 || b.cpus != a.cpus || b.total <= a.total || b.busy < a.busy) return -1;
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double window_ticks = static_cast<double>(b.total - a.total) / static_cast<double>(a.cpus);
  const double others = static_cast<double>(b.busy - a.busy) - own * hz;
  return std::clamp(others / window_ticks, 0.0, static_cast<double>(a.cpus));
}

bool starts_with(const char* s, const char* prefix) {
  return std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

}  // namespace

int64_t parse_omp_num_threads(const char* value) {
  if (value == nullptr) return 0;
  char* end = nullptr;
  long long n = std::strtoll(value, &end, 10);
  if (end == value || n <= 0) return 0;
  while (*end == ' ') ++end;
  return *end == '\0' || *end == ',' ? n : 0;
}

ThreadChoice choose_threads(const ThreadInputs& in) {
  ThreadChoice c;
  c.cores = std::max(1, in.cores);
  c.busy_cores = in.busy_cores;
  // A core counts as busy when other processes use at least half of it.
  c.free_cores =
      in.busy_cores < 0 ? c.cores : std::clamp(c.cores - static_cast<int>(std::lround(in.busy_cores)), 1, c.cores);
  const std::string load = in.busy_cores < 0 ? "load not measured"
                                             : "other processes keep ~" + cores_text(in.busy_cores) + " of " +
                                                   plural(c.cores, "core") + " busy";
  if (in.run_threads > 0 || in.env_threads > 0) {
    c.source = in.run_threads > 0 ? "run.threads" : "OMP_NUM_THREADS";
    c.threads = in.run_threads > 0 ? in.run_threads : in.env_threads;
    c.oversubscribed = c.threads * std::max(1, in.ranks_per_host) > c.free_cores;
    c.reason = c.source + " = " + std::to_string(c.threads) + " (explicit; " + load + ")";
    return c;
  }
  c.source = "automatic";
  const int ranks = std::max(1, in.ranks_per_host);
  c.threads = std::max(1, c.free_cores / ranks);
  c.reason = c.free_cores == c.cores
                 ? "all " + plural(c.cores, "core") + " this process may use are free (" + load + ")"
                 : plural(c.free_cores, "free core") + ": " + load;
  if (ranks > 1) c.reason += ", shared by " + std::to_string(ranks) + " ranks on this host";
  return c;
}

ThreadChoice configure_threads(int64_t run_threads, const ThreadOptions& options) {
  std::vector<int> cpus = allowed_cpus();
  ThreadInputs in;
  in.run_threads = run_threads;
  in.env_threads = parse_omp_num_threads(std::getenv("OMP_NUM_THREADS"));
  in.cores = static_cast<int>(cpus.size());
  in.ranks_per_host = options.ranks_per_host;
  if (int quota = cgroup_quota_cores(); quota > 0) in.cores = std::min(in.cores, quota);
  if (options.measure_load)
    in.busy_cores =
        sample_busy_cores(cpus.data(), static_cast<int>(cpus.size()), std::lround(options.sample_s * 1e3));
  ThreadChoice c = choose_threads(in);
  if (c.source != "OMP_NUM_THREADS") {
    omp_set_num_threads(static_cast<int>(c.threads));
    openblas_set_num_threads(static_cast<int>(c.threads));
  }
  return c;
}

std::string thread_note(const ThreadChoice& c) {
  const std::string busy =
      "other processes keep ~" + cores_text(c.busy_cores) + " of " + plural(c.cores, "core") + " busy";
  if (c.oversubscribed) {
    const std::string fix = c.source == "run.threads" ? "run.threads = 0" : "unsetting OMP_NUM_THREADS";
    return "note: " + plural(c.threads, "CPU thread") + " (" + c.source + ") but only " + plural(c.free_cores, "core") +
           " free (" + busy + "): steps may run several times slower; " + fix + " picks the free cores";
  }
  if (c.source == "automatic" && c.free_cores < c.cores)
    return "note: using " + plural(c.threads, "CPU thread") + ": " + busy;
  return "";
}

WaitPolicy wait_policy() {
  WaitPolicy w;
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  w.omp_wait_policy = policy ? policy : "";
  w.gomp_spincount = spin ? spin : "";
  const char* marker_env = std::getenv("GENESIS_WAIT_POLICY");
  const std::string marker = marker_env ? marker_env : "";
  if (policy == nullptr && spin == nullptr)
    w.source = "libgomp default";
  else if (policy == nullptr && marker == "free" && w.gomp_spincount == kSpinCountFree)
    w.source = kWaitSourceFreeHost;
  else if (policy == nullptr && marker == "shared" && w.gomp_spincount == kSpinCountShared)
    w.source = kWaitSourceSharedHost;
  else
    w.source = "user";
  return w;
}

bool is_free_host(double busy_cores) { return busy_cores >= 0 && busy_cores < kFreeHostBusyCores; }

const char* spin_count_for(double busy_cores) {
  return is_free_host(busy_cores) ? kSpinCountFree : kSpinCountShared;
}

std::string blas_threading() {
  switch (openblas_get_parallel()) {
    case 0:
      return "sequential";
    case 1:
      return "pthreads";
    case 2:
      return "openmp";
    default:
      return "unknown";
  }
}

const char* blas_core_for(const CpuFeatures& features, const char* detected) {
  static constexpr const char* kGeneric[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                                             "Katmai",   "Coppermine", "Northwood", "Banias"};
  bool generic = false;
  for (const char* name : kGeneric) generic |= detected != nullptr && std::strcmp(detected, name) == 0;
  if (!generic) return "";
  return features.avx512 ? "SkylakeX" : features.avx2 ? "Haswell" : "";
}

void reexec_for_blas_core(char** argv) {
  if (argv == nullptr || argv[0] == nullptr) return;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || std::getenv("GENESIS_BLAS_CORE") != nullptr) return;
  const char* core = blas_core_for(cpu_features(), openblas_get_corename());
  if (core[0] == '\0') return;
  setenv("OPENBLAS_CORETYPE", core, 1);
  setenv("GENESIS_BLAS_CORE", "auto", 1);
  execv("/proc/self/exe", argv);
  // The exec failed: OpenBLAS's own choice stays (genesis train prints a note about it).
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("GENESIS_BLAS_CORE");
}

std::string blas_core_note() {
  const char* detected = openblas_get_corename();
  const char* better = blas_core_for(cpu_features(), detected);
  if (better[0] == '\0') return "";
  return std::string("OpenBLAS runs its generic '") + detected + "' kernels on this CPU; set OPENBLAS_CORETYPE=" +
         better + " for faster matrix products";
}

std::string blas_core_source() {
  const char* marker = std::getenv("GENESIS_BLAS_CORE");
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  if (core == nullptr) return "OpenBLAS";
  if (marker != nullptr && std::strcmp(marker, "auto") == 0)
    return std::string("genesis (OpenBLAS fell back to a generic core: OPENBLAS_CORETYPE=") + core + ")";
  return std::string("user (OPENBLAS_CORETYPE=") + core + ")";
}

void preinit_wait_policy(int argc, char** argv, char** envp) {
  // Only system calls and plain loops here: the C library is not initialised yet.
  (void)argc;
  if (argv == nullptr || argv[0] == nullptr || envp == nullptr) return;
  size_t n = 0;
  for (; envp[n] != nullptr; ++n) {
    if (starts_with(envp[n], "OMP_WAIT_POLICY=") || starts_with(envp[n], "GOMP_SPINCOUNT=") ||
        starts_with(envp[n], "GENESIS_WAIT_POLICY="))
      return;  // the user's settings (or this hook's, after the exec) stand
  }
  // Started through the dynamic loader (ld.so PROGRAM): /proc/self/exe is the loader.
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return;
  exe[len] = '\0';
  if (std::strstr(exe, "/ld-linux") != nullptr || std::strstr(exe, "/ld.so") != nullptr) return;
  // The load on this process's CPUs decides how long idle threads spin.
  int cpus[CPU_SETSIZE];
  const int count = affinity_cpus(cpus);
  const double busy = count > 0 ? sample_busy_cores(cpus, count, kWaitPolicySampleMs) : -1;
  const bool free_host = is_free_host(busy);
  static char spin[32] = "GOMP_SPINCOUNT=";
  std::strncat(spin, spin_count_for(busy), sizeof spin - std::strlen(spin) - 1);
  static char marker_free[] = "GENESIS_WAIT_POLICY=free";
  static char marker_shared[] = "GENESIS_WAIT_POLICY=shared";
  auto** env = static_cast<char**>(alloca((n + 3) * sizeof(char*)));
  for (size_t i = 0; i < n; ++i) env[i] = envp[i];
  env[n] = spin;
  env[n + 1] = free_host ? marker_free : marker_shared;
  env[n + 2] = nullptr;
  execve("/proc/self/exe", argv, env);
  // The exec failed: carry on with libgomp's defaults (genesis info reports them).
}

}  // namespace genesis
