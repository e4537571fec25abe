// The mpi backend of Communicator (libgenesis/dist/mpi_communicator.h). Its collectives need ranks
// started by mpirun, which one test process is not: the [cpu] cases run this test binary again
// under `mpirun -np 2` on a hidden worker case and check how mpirun exits. A worker by hand:
//   mpirun --oversubscribe -np 2 build/bin/genesis_tests "[.mpi_worker]"
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "libgenesis/dist/mpi_communicator.h"
#include "testing.h"

using namespace genesis;
using namespace genesis::dist;
using Catch::Matchers::Contains;

namespace {

// The timeout worker's rank 0 exits with this once its wait() threw as expected.
constexpr int kTimeoutWorkerExit = 3;
constexpr double kShortTimeoutS = 1.0;

const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64};

// Element i of `rank`'s tensor. Each dtype holds these exactly, and the sums and averages of two
// ranks too: halves in [-15, 15] (8 significant bits at most, bf16's precision); f64 adds a part
// that f32 would round away, i64 a part above 2^32, so a collective in a narrower type shows.
double value(DType dtype, int64_t i, int rank) {
  const double base = static_cast<double>((i * 7 + rank * 13 + 5) % 61 - 30);
  switch (dtype) {
    case DType::f64:
      return base * 0.5 + rank * 0x1p-30;
    case DType::i32:
      return base + rank * 100000.0;
    case DType::i64:
      return base + rank * 0x1p40;
    default:
      return base * 0.5;
  }
}

Tensor filled(DType dtype, int64_t n, const std::function<double(int64_t)>& element) {
  Tensor t = empty({n}, {.dtype = dtype});
  GENESIS_DISPATCH_NUMERIC(dtype, "filled", {
    auto* p = t.data<scalar_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<scalar_t>(element(i));
  });
  return t;
}

// The reduction of every rank's value, as the collective should compute it.
double reduce(ReduceOp op, int size, const std::function<double(int rank)>& of_rank) {
  double result = of_rank(0);
  for (int r = 1; r < size; ++r) result = op == ReduceOp::max ? std::max(result, of_rank(r)) : result + of_rank(r);
  return op == ReduceOp::avg ? result / size : result;
}

const char* op_name(ReduceOp op) {
  return op == ReduceOp::sum ? "sum" : op == ReduceOp::avg ? "avg" : "max";
}

// Exact with two ranks (see value()); with more, 16-bit floats round their partial sums.
void require_result(const Tensor& actual, const Tensor& expected, int size) {
  REQUIRE(actual.dtype() == expected.dtype());
  testing::require_close(actual, expected, size <= 2 ? 0.0 : 1e-2, 0.0);
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(start, end - start) + "/" + program;
    if (end > start && access(candidate.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

// Whether the mpirun cases can run here; WARNs why not.
bool mpirun_ready() {
  if (!mpi_available()) {
    WARN("skipped: genesis was built without MPI (GENESIS_MPI)");
    return false;
  }
  if (!on_path("mpirun")) {
    WARN("skipped: mpirun is not on PATH (install openmpi-bin)");
    return false;
  }
  return true;
}

struct MpirunResult {
  int status = -1;  // mpirun's exit status; 128 + N when a signal N ended it
  std::string output;
  double seconds = 0;
};

// Runs this test binary on the hidden case `tag` under `mpirun -np 2` (Open MPI's flags, what
// scripts/setup.sh installs), bounded by coreutils' timeout.
MpirunResult run_worker(const std::string& tag) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  // Open MPI's session directory under a base of this run's own: two mpiruns started at once
  // (CTest runs cases side by side) race to create the shared /tmp/ompi.HOST.UID otherwise.
  const testing::TempDir session("genesis_mpirun");
  // One OpenMP thread a rank: the two ranks share the cores.
  std::string command = "OMP_NUM_THREADS=1 OMPI_MCA_orte_tmpdir_base='" + session.path().string() + "' ";
  if (geteuid() == 0) command += "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";
  command += "timeout -k 5 30 mpirun --oversubscribe -np 2 '" + self + "' '" + tag + "' 2>&1";
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe);
  MpirunResult result;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::cerr << "mpirun " << tag << ": exit " << result.status << " after " << result.seconds << " s\n";
  return result;
}

}  // namespace

TEST_CASE("mpi: every collective of two ranks matches values computed locally", "[dist][mpi][cpu]") {
  if (!mpirun_ready()) return;
  const MpirunResult run = run_worker("[.mpi_worker]");
  INFO(run.output);
  REQUIRE(run.status == 0);
  CHECK(run.seconds < 20);
}

TEST_CASE("mpi: a rank that skips a collective makes the other's wait() throw within the timeout", "[dist][mpi][cpu]") {
  if (!mpirun_ready()) return;
  const MpirunResult run = run_worker("[.mpi_timeout_worker]");
  INFO(run.output);
  CHECK(run.status == kTimeoutWorkerExit);
  CHECK_THAT(run.output, Contains("all_reduce of 4004 bytes did not complete within 1 s on rank 0 of 2"));
  CHECK(run.seconds < 20);
}

TEST_CASE("mpi: availability without a launcher, and the stub of a build without MPI", "[dist][mpi][cpu]") {
  if (!started_by_mpi()) {
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    CHECK(started_by_mpi());
    unsetenv("OMPI_COMM_WORLD_SIZE");
    CHECK_FALSE(started_by_mpi());
  }
  if (!mpi_available()) {
    CHECK_THROWS_MATCHES(
        make_mpi_communicator(10.0), UsageError,
        Catch::Matchers::Message("genesis was built without MPI (configure with -DGENESIS_MPI=ON after "
                                 "installing libopenmpi-dev)"));
  }
}

TEST_CASE("mpi worker: every collective, dtype and op against values computed locally", "[.mpi_worker]") {
  std::unique_ptr<Communicator> comm = make_mpi_communicator(10.0);
  const int rank = comm->rank(), size = comm->size();
  CHECK(comm->backend() == "mpi");
  REQUIRE(rank >= 0);
  REQUIRE(rank < size);
  const int root = size > 1 ? 1 : 0;

  for (DType dtype : kDTypes) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1001}}) {
      INFO("rank " << rank << " of " << size << ", " << dtype_name(dtype) << ", " << n << " elements");
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
        if (op == ReduceOp::avg && !is_floating(dtype)) continue;
        INFO(op_name(op));
        Tensor t = filled(dtype, n, [&](int64_t i) { return value(dtype, i, rank); });
        comm->all_reduce(t, op)->wait();
        require_result(
            t, filled(dtype, n, [&](int64_t i) { return reduce(op, size, [&](int r) { return value(dtype, i, r); }); }),
            size);

        // Chunk c of the input holds elements c*n .. c*n+n-1; this rank receives chunk `rank`.
        Tensor input = filled(dtype, n * size, [&](int64_t i) { return value(dtype, i, rank); });
        Tensor output = empty({n}, {.dtype = dtype});
        comm->reduce_scatter(input, output, op)->wait();
        require_result(
            output,
            filled(dtype, n,
                   [&](int64_t i) { return reduce(op, size, [&](int r) { return value(dtype, rank * n + i, r); }); }),
            size);
      }

      Tensor t = filled(dtype, n, [&](int64_t i) { return value(dtype, i, rank); });
      comm->broadcast(t, root)->wait();
      require_result(t, filled(dtype, n, [&](int64_t i) { return value(dtype, i, root); }), size);

      Tensor mine = filled(dtype, n, [&](int64_t i) { return value(dtype, i, rank); });
      Tensor gathered = empty({n * size}, {.dtype = dtype});
      comm->all_gather(mine, gathered)->wait();
      const Tensor expected = filled(dtype, n * size, [&](int64_t i) { return value(dtype, i % n, int(i / n)); });
      require_result(gathered, expected, size);

      // In place: the input is this rank's chunk of the output (a shard viewing the full buffer).
      Tensor full = empty({n * size}, {.dtype = dtype});
      Tensor shard = full.narrow(0, rank * n, n);
      shard.copy_(mine);
      comm->all_gather(shard, full)->wait();
      require_result(full, expected, size);
    }
  }

  // Several collectives in flight at once, waited for out of order; a Work waited for twice.
  Tensor a = filled(DType::f32, 7, [&](int64_t i) { return value(DType::f32, i, rank); });
  Tensor b = filled(DType::f64, 1001, [&](int64_t i) { return value(DType::f64, i, rank); });
  WorkHandle work_a = comm->all_reduce(a, ReduceOp::sum);
  WorkHandle work_b = comm->all_reduce(b, ReduceOp::avg);
  work_b->wait();
  work_a->wait();
  work_a->wait();
  require_result(
      a,
      filled(DType::f32, 7,
             [&](int64_t i) { return reduce(ReduceOp::sum, size, [&](int r) { return value(DType::f32, i, r); }); }),
      size);
  require_result(
      b,
      filled(DType::f64, 1001,
             [&](int64_t i) { return reduce(ReduceOp::avg, size, [&](int r) { return value(DType::f64, i, r); }); }),
      size);
  // A Work dropped without wait() completes in its destructor.
  Tensor c = filled(DType::i64, 7, [](int64_t) { return 1.0; });
  comm->all_reduce(c, ReduceOp::sum);
  CHECK(c.to_vector<int64_t>() == std::vector<int64_t>(7, size));
  comm->barrier();

  // Arguments are checked on every rank alike, before anything reaches MPI.
  Tensor matrix = filled(DType::f32, 6, [](int64_t i) { return double(i); }).view({2, 3});
  Tensor transposed = matrix.t();
  CHECK_THROWS_AS(comm->all_reduce(transposed, ReduceOp::sum), ValueError);
  Tensor flags = empty({3}, {.dtype = DType::boolean});
  CHECK_THROWS_AS(comm->all_reduce(flags, ReduceOp::sum), DTypeError);
  Tensor ints = filled(DType::i32, 3, [](int64_t) { return 1.0; });
  CHECK_THROWS_AS(comm->all_reduce(ints, ReduceOp::avg), DTypeError);
  Tensor wrong_size = empty({3 * size + 1});
  Tensor out = empty({3});
  CHECK_THROWS_AS(comm->reduce_scatter(wrong_size, out, ReduceOp::sum), ShapeError);
  CHECK_THROWS_AS(comm->all_gather(out, wrong_size), ShapeError);
  Tensor f64_out = empty({3 * size}, {.dtype = DType::f64});
  CHECK_THROWS_AS(comm->all_gather(out, f64_out), DTypeError);
  CHECK_THROWS_AS(comm->broadcast(out, size), ValueError);
  CHECK_THROWS_AS(make_mpi_communicator(0.0), ValueError);
  comm->barrier();
}

TEST_CASE("mpi worker: rank 1 skips a collective, rank 0's wait() throws after the timeout", "[.mpi_timeout_worker]") {
  std::unique_ptr<Communicator> comm = make_mpi_communicator(kShortTimeoutS);
  REQUIRE(comm->size() == 2);
  comm->barrier();  // both ranks are up
  if (comm->rank() == 1) {
    // Never joins. mpirun ends this rank (Catch reports the SIGTERM) once rank 0 exits without
    // finalizing MPI; the exit below only bounds the test if it does not.
    std::cerr << "rank 1: skipping the all_reduce; mpirun ends this rank once rank 0 gave up\n";
    std::this_thread::sleep_for(std::chrono::seconds(20));
    std::_Exit(4);
  }
  Tensor t = filled(DType::f32, 1001, [](int64_t i) { return double(i); });
  const auto start = std::chrono::steady_clock::now();
  WorkHandle work = comm->all_reduce(t, ReduceOp::sum);
  std::string message;
  try {
    work->wait();
  } catch (const DistError& e) {
    message = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "rank 0, after " << seconds << " s: " << message << "\n";
  REQUIRE_THAT(message, Contains("did not complete within 1 s"));
  REQUIRE(seconds >= kShortTimeoutS);
  REQUIRE(seconds < kShortTimeoutS + 2.0);
  // The ranks are out of step now: every later collective is refused on this rank.
  REQUIRE_THROWS_WITH(comm->barrier(), Contains("unusable after an earlier failure"));
  REQUIRE_THROWS_WITH(work->wait(), Contains("unusable after an earlier failure"));
  // Exits without MPI_Finalize (it would wait for rank 1); mpirun then ends rank 1.
  std::exit(kTimeoutWorkerExit);
}
