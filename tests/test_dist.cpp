// Distributed building blocks on the CPU: the launcher environments (torchrun, OpenMPI, Slurm)
// and their errors, the tcp communicator between threads of this process (every collective,
// dtypes, odd sizes, rank-order determinism, a mismatched collective, a dead and a silent rank),
// the data loader's rank slices, and DataParallel's bucketed gradients against one process.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/data/loader.h"
#include "libgenesis/dist/data_parallel.h"
#include "libgenesis/dist/env.h"
#include "libgenesis/dist/nccl_communicator.h"
#include "libgenesis/dist/tcp_communicator.h"
#include "libgenesis/models/hf.h"
#include "libgenesis/nn/lora.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/index.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/reduce.h"
#if GENESIS_WITH_NCCL
#include <cuda_runtime_api.h>

#include "libgenesis/cuda/runtime.h"
#endif

using namespace genesis;
using namespace genesis::dist;

// The expression throws ErrorType with a message containing text (evaluated twice).
#define CHECK_THROWS_TYPE_WITH(expr, ErrorType, matcher) \
  do {                                                   \
    CHECK_THROWS_AS(expr, ErrorType);                    \
    CHECK_THROWS_WITH(expr, matcher);                    \
  } while (0)

namespace {

ProcessEnv read_env(const std::map<std::string, std::string>& vars, bool need_rendezvous = true) {
  return read_process_env(
      [&vars](const char* name) {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      need_rendezvous);
}

// A TCP port that was free a moment ago.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Runs body(communicator) on `world` threads, each one rank of a tcp group (nccl: rank r of an
// nccl group on cuda:r, set up over the tcp one); returns each rank's exception (null when it
// returned normally).
std::vector<std::exception_ptr> run_ranks(int world, double timeout_s, const std::function<void(Communicator&)>& body,
                                          bool nccl = false) {
  const int port = free_port();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        ProcessEnv env;
        env.rank = r;
        env.world_size = world;
        env.master_addr = "127.0.0.1";
        env.master_port = port;
        std::unique_ptr<Communicator> comm = make_tcp_communicator(env, timeout_s);
#if GENESIS_WITH_NCCL
        if (nccl) {
          const Device device(DeviceType::cuda, r);
          GENESIS_CUDA_CHECK(cudaSetDevice(r));
          std::unique_ptr<Communicator> gpu = make_nccl_communicator(*comm, device, timeout_s);
          body(*gpu);
          return;
        }
#else
        REQUIRE_FALSE(nccl);
#endif
        body(*comm);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

std::string message_of(const std::exception_ptr& e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  }
  return "";
}

void require_all_ok(const std::vector<std::exception_ptr>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << message_of(errors[r]));
    REQUIRE(errors[r] == nullptr);
  }
}

// Rank r's values: distinct per rank and element, not round numbers.
Tensor rank_values(int rank, int64_t n, DType dtype) {
  Tensor t = empty({n}, {.dtype = DType::f64});
  for (int64_t i = 0; i < n; ++i) t.data<double>()[i] = 0.37 * static_cast<double>(i % 97) - 1.3 * rank + 0.011 * rank * i;
  if (dtype == DType::i32 || dtype == DType::i64) {
    for (int64_t i = 0; i < n; ++i) t.data<double>()[i] = std::round(t.data<double>()[i] * 10);
  }
  return t.to(dtype);
}

}  // namespace

TEST_CASE("dist env: torchrun, OpenMPI and Slurm variables, none is one process", "[cpu][dist]") {
  ProcessEnv none = read_env({});
  CHECK(none.world_size == 1);
  CHECK(none.launcher == "none");
  CHECK_FALSE(none.distributed());

  ProcessEnv torchrun = read_env({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                                  {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}});
  CHECK(torchrun.rank == 3);
  CHECK(torchrun.world_size == 4);
  CHECK(torchrun.local_rank == 1);
  CHECK(torchrun.local_world_size == 2);
  CHECK(torchrun.master_addr == "node0");
  CHECK(torchrun.master_port == 29500);
  CHECK(torchrun.launcher == "torchrun");
  CHECK(torchrun.describe() == "rank 3 of 4 (local 1 of 2, torchrun)");

  ProcessEnv ompi = read_env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
                             /*need_rendezvous=*/false);
  CHECK(ompi.rank == 1);
  CHECK(ompi.world_size == 2);
  CHECK(ompi.launcher == "openmpi");

  ProcessEnv slurm = read_env({{"SLURM_PROCID", "5"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_LOCALID", "1"},
                               {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "1234"}});
  CHECK(slurm.rank == 5);
  CHECK(slurm.world_size == 8);
  CHECK(slurm.local_rank == 1);
  CHECK(slurm.launcher == "slurm");
  // A batch script inside an allocation (no srun step) is one process.
  CHECK_FALSE(read_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}}).distributed());

  // torchrun's variables win over an outer launcher's.
  CHECK(read_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"},
                  {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}})
            .world_size == 2);
}

TEST_CASE("dist env: bad values are one-line usage errors naming the variable", "[cpu][dist]") {
  using Catch::Matchers::Contains;
  const std::map<std::string, std::string> rdv{{"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}};
  auto with = [&rdv](std::map<std::string, std::string> vars) {
    vars.insert(rdv.begin(), rdv.end());
    return vars;
  };
  CHECK_THROWS_TYPE_WITH(read_env(with({{"RANK", "0"}, {"WORLD_SIZE", "0"}})), UsageError, Contains("WORLD_SIZE=0"));
  CHECK_THROWS_TYPE_WITH(read_env(with({{"RANK", "2"}, {"WORLD_SIZE", "2"}})), UsageError,
                       Contains("RANK=2 is not below WORLD_SIZE=2"));
  CHECK_THROWS_TYPE_WITH(read_env(with({{"RANK", "-1"}, {"WORLD_SIZE", "2"}})), UsageError, Contains("RANK=-1"));
  CHECK_THROWS_TYPE_WITH(read_env(with({{"RANK", "x"}, {"WORLD_SIZE", "2"}})), UsageError,
                       Contains("RANK=x in the environment is not an integer"));
  CHECK_THROWS_TYPE_WITH(read_env(with({{"WORLD_SIZE", "2"}})), UsageError, Contains("RANK is not set"));
  CHECK_THROWS_TYPE_WITH(read_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}}), UsageError, Contains("MASTER_ADDR is not set"));
  CHECK_THROWS_TYPE_WITH(read_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}), UsageError,
                       Contains("MASTER_PORT is not set"));
  CHECK_THROWS_TYPE_WITH(read_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
                       UsageError, Contains("MASTER_PORT=70000 is not a TCP port"));
  CHECK_THROWS_TYPE_WITH(read_env(with({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}})),
                       UsageError, Contains("LOCAL_RANK=2 is not below the local process count 2"));
}

TEST_CASE("tcp: all_reduce sum/avg/max in every dtype and odd sizes, the same bits on every rank", "[cpu][dist]") {
  const int world = 3;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    for (int64_t n : {1, 7, 1001}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
        if (op == ReduceOp::avg && !is_floating(dtype)) continue;
        // The reference: the ranks' values in f64, reduced in rank order, rounded once.
        Tensor expected = rank_values(0, n, dtype).to(DType::f64);
        for (int r = 1; r < world; ++r) {
          Tensor v = rank_values(r, n, dtype).to(DType::f64);
          expected = op == ReduceOp::max ? maximum(expected, v) : add(expected, v);
        }
        if (op == ReduceOp::avg) expected = div(expected, static_cast<double>(world));
        expected = expected.to(dtype).to(DType::f64);
        std::vector<Tensor> results(world);
        require_all_ok(run_ranks(world, 20.0, [&](Communicator& c) {
          Tensor t = rank_values(c.rank(), n, dtype);
          c.all_reduce(t, op)->wait();
          results[static_cast<size_t>(c.rank())] = t;
        }));
        INFO(dtype_name(dtype) << " n=" << n << " op=" << static_cast<int>(op));
        for (int r = 0; r < world; ++r) {
          Tensor got = results[static_cast<size_t>(r)].to(DType::f64);
          // f32 sums in f64 and rounds once, as the reference: exact; 16-bit sums in f32 first.
          const double tol = is_half(dtype) ? 1e-2 : 0.0;
          for (int64_t i = 0; i < n; ++i) {
            const double e = expected.data<double>()[i], g = got.data<double>()[i];
            REQUIRE(std::abs(g - e) <= tol * (1 + std::abs(e)));
          }
          // Every rank holds rank 0's result, bit for bit.
          REQUIRE(std::memcmp(results[static_cast<size_t>(r)].data_ptr(), results[0].data_ptr(),
                              static_cast<size_t>(n) * results[0].element_size()) == 0);
        }
      }
    }
  }
}

TEST_CASE("tcp: broadcast from any root, all_gather, reduce_scatter, barrier, queued collectives", "[cpu][dist]") {
  const int world = 3;
  const int64_t n = 5;
  std::vector<std::vector<float>> gathered(world), scattered(world), broadcast(world);
  require_all_ok(run_ranks(world, 20.0, [&](Communicator& c) {
    const int r = c.rank();
    REQUIRE(c.size() == world);
    REQUIRE(c.backend() == "tcp");
    // Issued together, waited in reverse: they run in order.
    Tensor b = full({n}, 10.0 * r + 1, {.dtype = DType::f32});
    Tensor in = rank_values(r, n, DType::f32);
    Tensor all = full({n * world}, -1.0, {.dtype = DType::f32});
    Tensor big = rank_values(r, n * world, DType::f32);
    Tensor mine = full({n}, -1.0, {.dtype = DType::f32});
    WorkHandle w1 = c.broadcast(b, 1);
    WorkHandle w2 = c.all_gather(in, all);
    WorkHandle w3 = c.reduce_scatter(big, mine, ReduceOp::sum);
    w3->wait();
    w2->wait();
    w1->wait();
    c.barrier();
    auto vec = [](const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); };
    broadcast[static_cast<size_t>(r)] = vec(b);
    gathered[static_cast<size_t>(r)] = vec(all);
    scattered[static_cast<size_t>(r)] = vec(mine);
  }));
  for (int r = 0; r < world; ++r) {
    CHECK(broadcast[static_cast<size_t>(r)] == std::vector<float>(n, 11.0f));
    for (int q = 0; q < world; ++q) {
      Tensor v = rank_values(q, n, DType::f32);
      for (int64_t i = 0; i < n; ++i) CHECK(gathered[static_cast<size_t>(r)][static_cast<size_t>(q * n + i)] == v.data<float>()[i]);
    }
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int q = 0; q < world; ++q) sum += rank_values(q, n * world, DType::f32).data<float>()[r * n + i];
      CHECK(scattered[static_cast<size_t>(r)][static_cast<size_t>(i)] == Approx(sum).epsilon(1e-6));
    }
  }
}

TEST_CASE("tcp: mismatched collectives, a dead rank and a silent one fail with DistError naming them", "[cpu][dist]") {
  using Catch::Matchers::Contains;
  SECTION("different collectives") {
    auto errors = run_ranks(2, 10.0, [](Communicator& c) {
      Tensor t = ones({4});
      if (c.rank() == 0) c.all_reduce(t, ReduceOp::sum)->wait();
      else c.broadcast(t, 0)->wait();
    });
    REQUIRE(errors[0] != nullptr);
    CHECK_THAT(message_of(errors[0]), Contains("rank 1 issued broadcast") && Contains("same order"));
    // Rank 1 hears why from rank 0.
    REQUIRE(errors[1] != nullptr);
    CHECK_THAT(message_of(errors[1]), Contains("same order"));
  }
  SECTION("a rank that exits") {
    const auto t0 = std::chrono::steady_clock::now();
    auto errors = run_ranks(3, 30.0, [](Communicator& c) {
      if (c.rank() == 2) return;  // leaves without its part: its connection closes
      Tensor t = ones({4});
      c.all_reduce(t, ReduceOp::sum)->wait();
    });
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // not the 30 s timeout
    REQUIRE(errors[0] != nullptr);
    CHECK_THAT(message_of(errors[0]), Contains("rank 2 closed its connection"));
    REQUIRE(errors[1] != nullptr);
    // Rank 1 hears the reason from rank 0 when it reads rank 0's abort frame first. When rank 0
    // has already closed its socket with rank 1's unread contribution in it, the kernel resets
    // the connection and rank 1's next send fails before it reads that frame: it then names rank
    // 0's broken connection (seen once, in a clean-root CI run under ctest -j2). Either way it
    // stops at once with a DistError.
    CHECK_THAT(message_of(errors[1]),
               Contains("rank 2 closed its connection") || Contains("the connection to rank 0 broke"));
  }
  SECTION("a rank that hangs") {
    const auto t0 = std::chrono::steady_clock::now();
    auto errors = run_ranks(2, 0.5, [](Communicator& c) {
      Tensor t = ones({4});
      if (c.rank() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        return;
      }
      c.all_reduce(t, ReduceOp::sum)->wait();
    });
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    REQUIRE(errors[0] != nullptr);
    CHECK_THAT(message_of(errors[0]), Contains("rank 1 sent nothing within 0.5 s"));
  }
  SECTION("CUDA tensors and avg of integers are refused") {
    auto errors = run_ranks(2, 10.0, [](Communicator& c) {
      Tensor t = ones({2}, {.dtype = DType::i64});
      CHECK_THROWS_AS(c.all_reduce(t, ReduceOp::avg), DTypeError);
      Tensor odd = ones({5});
      Tensor out = ones({2});
      CHECK_THROWS_AS(c.reduce_scatter(odd, out, ReduceOp::sum), ValueError);
    });
    require_all_ok(errors);
  }
}

TEST_CASE("tcp: lost_peers names a rank whose process is gone, and nothing while all are there", "[cpu][dist]") {
  std::string before, after;
  require_all_ok(run_ranks(2, 20.0, [&](Communicator& c) {
    if (c.rank() == 0) before = c.lost_peers();
    c.barrier();
    if (c.rank() == 1) return;  // rank 1's communicator closes its connection as the thread ends
    for (int i = 0; i < 200 && after.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      after = c.lost_peers();
    }
  }));
  CHECK(before.empty());
  CHECK(after == "rank 1 closed its connection (it exited or crashed)");
}

TEST_CASE("tcp: rank 0 unreachable is a usage error within the timeout", "[cpu][dist]") {
  ProcessEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.master_addr = "127.0.0.1";
  env.master_port = free_port();  // nobody listens
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_TYPE_WITH(make_tcp_communicator(env, 0.5), UsageError,
                       Catch::Matchers::Contains("could not reach rank 0 at MASTER_ADDR:MASTER_PORT"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  env.master_addr = "no-such-host.invalid";
  CHECK_THROWS_TYPE_WITH(make_tcp_communicator(env, 0.5), UsageError, Catch::Matchers::Contains("does not resolve"));
}

TEST_CASE("loader: ranks take disjoint slices of each global batch, together the one-process batch", "[cpu][dist]") {
  const int64_t n = 103, per_rank = 8;
  const int world = 3;
  data::Dataset ds{arange(0, static_cast<double>(n)).reshape({n, 1}), arange(0, static_cast<double>(n)).to(DType::i64)};
  data::DataLoader whole(ds, {.batch_size = per_rank * world, .shuffle = true, .seed = 7, .prefetch = 0});
  std::vector<std::unique_ptr<data::DataLoader>> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(std::make_unique<data::DataLoader>(
        ds, data::LoaderOptions{.batch_size = per_rank, .shuffle = true, .seed = 7, .prefetch = 1, .rank = r,
                                .world_size = world}));
  // 103 = 4 full global batches of 24 + 7 left: split 2/2/3 over the ranks.
  REQUIRE(ranks[0]->batches_per_epoch() == 5);
  REQUIRE(whole.batches_per_epoch() == 5);
  for (int64_t step = 0; step < 10; ++step) {  // two epochs
    data::Batch expected = whole.next();
    std::vector<int64_t> joined;
    for (int r = 0; r < world; ++r) {
      data::Batch b = ranks[static_cast<size_t>(r)]->next();
      CHECK(b.targets.numel() == (step % 5 == 4 ? std::vector<int64_t>{2, 2, 3}[static_cast<size_t>(r)] : per_rank));
      joined.insert(joined.end(), b.targets.data<int64_t>(), b.targets.data<int64_t>() + b.targets.numel());
    }
    CHECK(joined == std::vector<int64_t>(expected.targets.data<int64_t>(),
                                         expected.targets.data<int64_t>() + expected.targets.numel()));
  }
  // A remainder smaller than the ranks is dropped: 100 = 4 x 24 + 4 over 5 ranks of 5... here 2 left for 3 ranks.
  data::Dataset small{zeros({50, 1}), zeros({50}, {.dtype = DType::i64})};
  CHECK(data::DataLoader(small, {.batch_size = 8, .prefetch = 0, .rank = 0, .world_size = 3}).batches_per_epoch() == 2);
  CHECK_THROWS_AS(data::DataLoader(small, {.batch_size = 8, .prefetch = 0, .rank = 3, .world_size = 3}), ValueError);
}

TEST_CASE("DataParallel: bucketed, overlapped gradient means equal one process's over the whole batch", "[cpu][dist]") {
  // A two-layer model; rank r's batch is rows [r*4, r*4+4) of one batch of 8. The mean of the
  // ranks' mean-loss gradients is the one-process gradient of the mean over all 8 rows.
  const int world = 2;
  Tensor x = rank_values(0, 8 * 6, DType::f32).reshape({8, 6});
  Tensor w1_init = rank_values(1, 6 * 5, DType::f32).reshape({6, 5});
  Tensor w2_init = rank_values(2, 5 * 3, DType::f32).reshape({5, 3});
  auto loss_of = [](const Tensor& input, const Tensor& w1, const Tensor& w2, const Tensor& b) {
    return mean(mul(add(matmul(tanh(matmul(input, w1)), w2), b), add(matmul(tanh(matmul(input, w1)), w2), b)));
  };
  Tensor g1_ref, g2_ref, gb_ref;
  {
    Tensor w1 = w1_init.clone().requires_grad_(), w2 = w2_init.clone().requires_grad_();
    Tensor b = zeros({3}).requires_grad_();
    loss_of(x, w1, w2, b).backward();
    g1_ref = w1.grad().clone(), g2_ref = w2.grad().clone(), gb_ref = b.grad().clone();
  }
  for (double bucket_mb : {0.0, 1e-5}) {  // one bucket after the backward; a bucket per parameter
    std::vector<std::vector<Tensor>> grads(world);
    int64_t buckets = 0;
    require_all_ok(run_ranks(world, 20.0, [&](Communicator& c) {
      // Rank 1 starts from other weights: broadcast_parameters makes them rank 0's.
      Tensor w1 = (c.rank() == 0 ? w1_init.clone() : zeros({6, 5})).requires_grad_();
      Tensor w2 = (c.rank() == 0 ? w2_init.clone() : ones({5, 3})).requires_grad_();
      Tensor b = zeros({3}).requires_grad_();
      DataParallel ddp({w1, w2, b}, c, {.bucket_mb = bucket_mb});
      ddp.broadcast_parameters();
      Tensor mine = x.narrow(0, c.rank() * 4, 4);
      // Two steps: the second after a lazy zero_grad, so the views must be reused in place.
      for (int step = 0; step < 2; ++step) {
        for (Tensor p : {w1, w2, b}) p.zero_grad_(false);
        ddp.arm();
        loss_of(mine, w1, w2, b).backward();
        ddp.finish();
      }
      Tensor avg = ddp.average(scalar_tensor(static_cast<double>(c.rank())));
      CHECK(avg.item() == Approx(0.5));
      if (c.rank() == 0) buckets = ddp.bucket_count();
      grads[static_cast<size_t>(c.rank())] = {w1.grad().clone(), w2.grad().clone(), b.grad().clone()};
    }));
    CHECK(buckets == (bucket_mb == 0 ? 1 : 3));
    const std::vector<Tensor> refs{g1_ref, g2_ref, gb_ref};
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < refs.size(); ++i) {
        const Tensor got = grads[static_cast<size_t>(r)][i].contiguous();
        const Tensor ref = refs[i].contiguous();
        for (int64_t k = 0; k < ref.numel(); ++k)
          REQUIRE(got.data<float>()[k] == Approx(ref.data<float>()[k]).epsilon(1e-5).margin(1e-7));
      }
    }
  }
}

TEST_CASE("DataParallel under activation checkpointing: each hook fires once, the reduced gradients unchanged",
          "[cpu][dist][checkpoint]") {
  // A tiny GPT-2 per rank and mode, built before the ranks start (the default generator is the
  // process's); rank r trains on row r of the batch.
  const int world = 2;
  const char* config = R"({"model_type": "gpt2", "vocab_size": 40, "n_positions": 16, "n_embd": 8, "n_layer": 2,
                           "n_head": 2})";
  Tensor ids = empty({2, 7}, {.dtype = DType::i64});
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 7 + 3) % 40;
  std::vector<std::vector<std::vector<float>>> grads(2);  // [mode][parameter], rank 0's
  for (int checkpointed = 0; checkpointed < 2; ++checkpointed) {
    std::vector<std::shared_ptr<models::CausalLM>> models;
    for (int r = 0; r < world; ++r) {
      manual_seed(5);
      models.push_back(models::causal_lm_from_config(config));
      models.back()->set_activation_checkpointing(checkpointed ? models::ActivationCheckpointing::full
                                                               : models::ActivationCheckpointing::none);
    }
    require_all_ok(run_ranks(world, 20.0, [&](Communicator& c) {
      models::CausalLM& model = *models[static_cast<size_t>(c.rank())];
      std::vector<Tensor> params = model.parameters();
      auto fired = std::make_shared<std::vector<int>>(params.size(), 0);
      for (size_t i = 0; i < params.size(); ++i)
        params[i].register_post_accumulate_grad_hook([fired, i](const Tensor&) { ++(*fired)[i]; });
      DataParallel ddp(params, c, {.bucket_mb = 1e-4});
      const Tensor mine = ids.narrow(0, c.rank(), 1);
      ddp.arm();
      model.loss(mine, mine).backward();
      ddp.finish();
      for (size_t i = 0; i < params.size(); ++i) CHECK((*fired)[i] == 1);
      if (c.rank() == 0)
        for (const Tensor& p : params) grads[static_cast<size_t>(checkpointed)].push_back(p.grad().to_vector<float>());
    }));
  }
  REQUIRE(grads[0].size() == grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) CHECK(grads[1][i] == grads[0][i]);
}

TEST_CASE("DataParallel: gradients reduced in bf16 are the bf16 mean of the ranks' bf16-rounded gradients", "[cpu][dist]") {
  const int world = 2;
  Tensor x = rank_values(0, 8 * 6, DType::f32).reshape({8, 6});
  Tensor w_init = rank_values(1, 6 * 5, DType::f32).reshape({6, 5});
  auto loss_of = [](const Tensor& input, const Tensor& w) { return mean(mul(tanh(matmul(input, w)), matmul(input, w))); };
  // Each rank's own gradient, then the mean of their bf16 roundings, rounded to bf16 (two ranks:
  // the f32 sum of two bf16 values and its half are exact, so one rounding is the whole error).
  Tensor expected = zeros({6, 5});
  for (int r = 0; r < world; ++r) {
    Tensor w = w_init.clone().requires_grad_();
    loss_of(x.narrow(0, r * 4, 4), w).backward();
    expected = add(expected, w.grad().to(DType::bf16).to(DType::f32));
  }
  expected = div(expected, 2.0).to(DType::bf16).to(DType::f32);
  std::vector<Tensor> got(world);
  require_all_ok(run_ranks(world, 20.0, [&](Communicator& c) {
    Tensor w = w_init.clone().requires_grad_();
    DataParallel ddp({w}, c, {.reduce_dtype = DType::bf16});
    ddp.arm();
    loss_of(x.narrow(0, c.rank() * 4, 4), w).backward();
    ddp.finish();
    got[static_cast<size_t>(c.rank())] = w.grad().clone();
  }));
  for (int r = 0; r < world; ++r) {
    REQUIRE(got[static_cast<size_t>(r)].dtype() == DType::f32);
    const Tensor g = got[static_cast<size_t>(r)].contiguous();
    for (int64_t k = 0; k < expected.numel(); ++k) REQUIRE(g.data<float>()[k] == expected.data<float>()[k]);
  }
  // Rounded, not the f32 mean: some element must differ from it.
  Tensor w = w_init.clone().requires_grad_();
  loss_of(x, w).backward();
  CHECK(max(abs(sub(w.grad(), expected))).item() > 0.0);
  CHECK(max(abs(sub(w.grad(), expected))).item() <= 1e-2 * max(abs(expected)).item());
  // Wider than the parameters, or not floating: refused.
  require_all_ok(run_ranks(1, 20.0, [&](Communicator& c) {
    Tensor v = w_init.clone().requires_grad_();
    CHECK_THROWS_AS(DataParallel({v}, c, {.reduce_dtype = DType::f64}), ValueError);
    CHECK_THROWS_AS(DataParallel({v}, c, {.reduce_dtype = DType::i32}), ValueError);
  }));
}

namespace {

// One data-parallel run of a small model with AdamW over `world` tcp ranks (DDP or ZeRO-1), from
// the given weights and optimizer state (empty: fresh), each rank taking its rows of one batch of
// 12. Returns rank 0's weights, the whole optimizer state (gathered under ZeRO-1) and each step's
// gradient norm.
struct ZeroRun {
  std::vector<Tensor> weights;
  std::vector<NamedTensor> state;
  std::vector<double> norms;
};

ZeroRun run_adamw(int world, int zero, int steps, const std::vector<Tensor>& init,
                  const std::vector<NamedTensor>& state, int64_t step_count, bool nccl = false,
                  std::optional<DType> reduce_dtype = std::nullopt) {
  // Odd sizes (w1 7x5, b1 5, w2 5x3, b2 3, v 11), buckets of about 100 bytes: chunks cut through
  // parameters and end in padding; v gets no gradient (only weight decay moves it).
  const Tensor x = rank_values(0, 12 * 7, DType::f32).reshape({12, 7});
  ZeroRun out;
  std::mutex mutex;
  require_all_ok(run_ranks(world, 30.0, [&](Communicator& c) {
    const Device device = nccl ? Device(DeviceType::cuda, c.rank()) : kCPU;
    std::vector<Tensor> p;
    for (const Tensor& t : init) p.push_back(t.to(device).clone().requires_grad_());
    const std::vector<std::string> names{"w1", "b1", "w2", "b2", "v"};
    ParamGroup decay{.params = {{"w1", p[0]}, {"w2", p[2]}, {"v", p[4]}}, .lr = 0.05, .base_lr = 0.05, .weight_decay = 0.1};
    ParamGroup no_decay{.params = {{"b1", p[1]}, {"b2", p[3]}}, .lr = 0.05, .base_lr = 0.05, .weight_decay = 0.0};
    DataParallel dp(p, c, {.bucket_mb = 100.0 / (1024 * 1024), .zero = zero, .reduce_dtype = reduce_dtype});
    dp.broadcast_parameters();
    std::vector<ParamGroup> groups{decay, no_decay};
    if (zero) groups = dp.shard_groups(groups);
    std::unique_ptr<Optimizer> opt = make_adam(groups, {.decoupled_weight_decay = true});
    if (!state.empty()) {
      if (zero) dp.load_full_optimizer_state(*opt, state, step_count);
      else opt->load_state(state, step_count);
    }
    const int64_t rows = 12 / world;
    const Tensor mine = x.narrow(0, c.rank() * rows, rows).to(device);
    std::vector<double> norms;
    for (int step = 0; step < steps; ++step) {
      dp.arm();
      Tensor y = add(matmul(tanh(add(matmul(mine, p[0]), p[1])), p[2]), p[3]);
      mean(mul(y, y)).backward();
      dp.finish();
      norms.push_back(dp.clip_grad_norm(0.5).item());
      opt->step();
      dp.gather_parameters();
      dp.zero_grad();
    }
    std::vector<NamedTensor> gathered = zero ? dp.full_optimizer_state(*opt) : opt->state();
    std::lock_guard lock(mutex);
    if (c.rank() != 0) return;
    for (const Tensor& t : p) out.weights.push_back(t.detach().to(kCPU).clone());
    for (NamedTensor& t : gathered) out.state.push_back({t.name, t.tensor.to(kCPU)});
    out.norms = norms;
  }, nccl));
  return out;
}

void require_close(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  const Tensor g = got.to(DType::f64).contiguous(), w = want.to(DType::f64).contiguous();
  for (int64_t k = 0; k < w.numel(); ++k)
    REQUIRE(g.data<double>()[k] == Approx(w.data<double>()[k]).epsilon(1e-5).margin(1e-7));
}

void require_same_state(const std::vector<NamedTensor>& got, const std::vector<NamedTensor>& want) {
  std::map<std::string, Tensor> by_name;
  for (const NamedTensor& t : got) by_name[t.name] = t.tensor;
  REQUIRE(got.size() == want.size());
  for (const NamedTensor& t : want) {
    INFO(t.name);
    REQUIRE(by_name.count(t.name) == 1);
    require_close(by_name[t.name], t.tensor, t.name);
  }
}

}  // namespace

TEST_CASE("ZeRO-1 and ZeRO-2: sharded AdamW steps equal DDP's, the gathered state is DDP's and resumes on another "
          "world size",
          "[cpu][dist]") {
  std::vector<Tensor> init;
  int seed = 3;
  for (const Shape& shape : std::vector<Shape>{{7, 5}, {5}, {5, 3}, {3}, {11}})
    init.push_back(mul(rank_values(seed++, numel_of(shape), DType::f32), 0.3).reshape(shape));

  const int level = GENERATE(1, 2);
  INFO("zero " << level);
  for (int world : {2, 3}) {
    INFO("world " << world);
    const ZeroRun ddp = run_adamw(world, 0, 3, init, {}, 0);
    const ZeroRun zero = run_adamw(world, level, 3, init, {}, 0);
    for (size_t i = 0; i < init.size(); ++i) require_close(zero.weights[i], ddp.weights[i], "weight " + std::to_string(i));
    for (size_t s = 0; s < ddp.norms.size(); ++s) CHECK(zero.norms[s] == Approx(ddp.norms[s]).epsilon(1e-6));
    // The whole state under the names a single process uses: exp_avg, exp_avg_sq and step per parameter.
    CHECK(ddp.state.size() == 5 * 3);
    require_same_state(zero.state, ddp.state);
  }

  // Gradients on the wire in bf16: ZeRO-1's reduce-scatter rounds as DDP's all-reduce does.
  {
    const ZeroRun ddp = run_adamw(2, 0, 3, init, {}, 0, false, DType::bf16);
    const ZeroRun zero = run_adamw(2, level, 3, init, {}, 0, false, DType::bf16);
    for (size_t i = 0; i < init.size(); ++i) require_close(zero.weights[i], ddp.weights[i], "bf16 wire, weight " + std::to_string(i));
    require_same_state(zero.state, ddp.state);
  }

  // A 2-rank ZeRO-1 checkpoint resumed on 3 ranks continues as DDP does from the same state.
  const ZeroRun first = run_adamw(2, level, 2, init, {}, 0);
  const ZeroRun ddp = run_adamw(3, 0, 2, first.weights, first.state, 2);
  const ZeroRun zero = run_adamw(3, level, 2, first.weights, first.state, 2);
  for (size_t i = 0; i < init.size(); ++i) require_close(zero.weights[i], ddp.weights[i], "resumed weight " + std::to_string(i));
  require_same_state(zero.state, ddp.state);
  // The weights moved (the test would pass on a no-op otherwise).
  CHECK(max(abs(sub(zero.weights[0], first.weights[0]))).item() > 1e-3);
}

namespace {

// A tiny Llama (3 blocks, odd sizes) trained data-parallel over `world` ranks for `steps` AdamW
// steps of `accum` micro-batches each, once per configuration (one communicator for all, as one
// run has); rank r takes its rows of each micro-batch of 6 sequences.
struct LmRun {
  std::vector<double> losses;        // each step's loss, the ranks' mean
  std::vector<NamedTensor> weights;  // the whole weights at the end (rank 0, on the host)
  std::vector<float> logits;         // rank 0's no-grad forward after the steps
  bool released = true;              // after each step, no trained parameter whole on any rank
};
struct LmConfig {
  int zero = 0;
  models::ActivationCheckpointing checkpointing = models::ActivationCheckpointing::none;
  std::optional<DType> param_dtype = std::nullopt;  // zero = 3: the gathers' wire
  // The trained parameters: the whole model, LoRA adapters on a frozen base, or those on an NF4 base.
  enum class Base { trained, lora, qlora } base = Base::trained;
};

std::vector<LmRun> run_lm(int world, const std::vector<LmConfig>& configs, int accum, int steps, bool nccl = false) {
  const char* config = R"({"model_type": "llama", "vocab_size": 61, "hidden_size": 24, "intermediate_size": 26,
                           "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
                           "head_dim": 6, "max_position_embeddings": 32})";
  // Every rank's model from one set of weights, built here (the default generator is the process's).
  manual_seed(11);
  const std::vector<NamedTensor> init = models::causal_lm_from_config(config)->state_dict();
  std::vector<std::vector<std::shared_ptr<models::CausalLM>>> models(configs.size());
  for (size_t k = 0; k < configs.size(); ++k)
    for (int r = 0; r < world; ++r) {
      models[k].push_back(models::causal_lm_from_config(config));
      models[k].back()->load_state_dict(init);
      models[k].back()->set_activation_checkpointing(configs[k].checkpointing);
      if (configs[k].base == LmConfig::Base::trained) continue;
      Generator adapters(23);  // the same adapters on every rank, as a run's seed gives them
      nn::add_lora(*models[k].back(), {.r = 2, .alpha = 4.0, .targets = {"q_proj", "v_proj", "down_proj"}}, &adapters);
      if (configs[k].base == LmConfig::Base::qlora)
        for (const auto& [name, target] : nn::lora_targets(*models[k].back())) target->quantize_nf4(kCPU, DType::f32);
    }
  Tensor ids = empty({static_cast<int64_t>(steps * accum * 6), 9}, {.dtype = DType::i64});
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 13 + i / 9 * 5 + 1) % 61;
  std::vector<LmRun> out(configs.size());
  std::mutex mutex;
  require_all_ok(run_ranks(world, 60.0, [&](Communicator& c) {
    const Device device = nccl ? Device(DeviceType::cuda, c.rank()) : kCPU;
    for (size_t k = 0; k < configs.size(); ++k) {
      const int zero = configs[k].zero;
      // Owned by this thread from here: its device memory goes before the rank's communicator.
      const std::shared_ptr<models::CausalLM> owned = std::move(models[k][static_cast<size_t>(c.rank())]);
      models::CausalLM& model = *owned;
      model.to(device);
      DataParallelOptions options{.bucket_mb = 1e-3, .zero = zero, .param_dtype = configs[k].param_dtype};
      if (zero == 3) {
        options.units = model.shard_units(nn::Params::trainable);
        options.frozen_units = model.frozen_units();
      }
      DataParallel dp(model.parameters(nn::Params::trainable), c, options);
      if (zero == 3) model.set_unit_hooks(dp.unit_hooks());
      dp.broadcast_parameters();
      std::vector<ParamGroup> groups{
          {.params = model.named_parameters(nn::Params::trainable), .lr = 0.01, .base_lr = 0.01, .weight_decay = 0.1}};
      if (zero > 0) groups = dp.shard_groups(groups);
      std::unique_ptr<Optimizer> opt = make_adam(groups, {.decoupled_weight_decay = true});
      const int64_t rows = 6 / world;
      std::vector<double> losses;
      bool released = true;
      for (int step = 0; step < steps; ++step) {
        Tensor total = zeros({}, {.device = device});
        for (int micro = 0; micro < accum; ++micro) {
          const Tensor batch = ids.narrow(0, (step * accum + micro) * 6 + c.rank() * rows, rows).to(device);
          const Tensor targets = cat({batch.narrow(1, 1, 8), batch.narrow(1, 0, 1)}, 1);
          if (micro == accum - 1) dp.arm();
          Tensor loss = div(model.loss(batch, targets), static_cast<double>(accum));
          loss.backward();
          total = add(total, loss.detach());
        }
        dp.finish();
        losses.push_back(dp.average(total).item());
        dp.clip_grad_norm(1.0);
        opt->step();
        dp.gather_parameters();
        dp.zero_grad();
        for (const Tensor& p : model.parameters(nn::Params::trainable))
          released = released && !p.storage()->resident();
        for (const Tensor& t : model.frozen_storage()) released = released && !t.storage()->resident();
      }
      Tensor logits;
      {
        NoGradGuard no_grad;
        logits = model(ids.narrow(0, 0, 2).to(device)).to(kCPU);
      }
      std::vector<NamedTensor> whole = dp.whole_on_rank0(model.state_dict());
      std::lock_guard lock(mutex);
      out[k].released = out[k].released && released;
      if (c.rank() != 0) continue;
      out[k].losses = losses;
      // Detached: a copy recorded by autograd would keep the device parameter alive past the rank.
      for (const NamedTensor& t : whole) out[k].weights.push_back({t.name, t.tensor.detach().to(kCPU).clone()});
      out[k].logits = logits.to_vector<float>();
    }
  }, nccl));
  return out;
}

void require_same_lm_run(const LmRun& got, const LmRun& want) {
  REQUIRE(got.losses.size() == want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) CHECK(got.losses[s] == Approx(want.losses[s]).epsilon(1e-5));
  require_same_state(got.weights, want.weights);
  REQUIRE(got.logits.size() == want.logits.size());
  for (size_t k = 0; k < want.logits.size(); ++k) REQUIRE(got.logits[k] == Approx(want.logits[k]).epsilon(1e-4).margin(1e-5));
}

}  // namespace

TEST_CASE("ZeRO-3: a language model sharded by blocks trains as DDP does, with checkpointing and accumulation, "
          "between steps no rank holds a whole parameter",
          "[cpu][dist]") {
  using models::ActivationCheckpointing;
  const int world = GENERATE(2, 3);
  const ActivationCheckpointing checkpointing =
      GENERATE(ActivationCheckpointing::none, ActivationCheckpointing::full, ActivationCheckpointing::selective);
  const int accum = GENERATE(1, 2);
  INFO("world " << world << ", checkpointing " << static_cast<int>(checkpointing) << ", accumulation " << accum);
  const std::vector<LmRun> runs =
      run_lm(world, {{0, ActivationCheckpointing::none}, {1, checkpointing}, {2, checkpointing}, {3, checkpointing}},
             accum, 3);
  const LmRun& ddp = runs[0];
  // The run learned something (the comparisons would pass on a no-op otherwise).
  CHECK(ddp.losses.back() < ddp.losses.front());
  CHECK_FALSE(ddp.released);
  for (int level = 1; level <= 3; ++level) {
    INFO("zero " << level);
    require_same_lm_run(runs[static_cast<size_t>(level)], ddp);
  }
  CHECK(runs[3].released);
}

TEST_CASE("ZeRO-3 with a frozen base: LoRA and QLoRA adapters train as DDP does, the base sharded and freed "
          "between steps",
          "[cpu][dist]") {
  using models::ActivationCheckpointing;
  using Base = LmConfig::Base;
  const int world = GENERATE(2, 3);
  const Base base = GENERATE(Base::lora, Base::qlora);
  const ActivationCheckpointing checkpointing = GENERATE(ActivationCheckpointing::none, ActivationCheckpointing::full);
  const int accum = GENERATE(1, 2);
  INFO("world " << world << ", base " << static_cast<int>(base) << ", checkpointing " << static_cast<int>(checkpointing)
                << ", accumulation " << accum);
  const std::vector<LmRun> runs =
      run_lm(world, {{.zero = 0, .base = base}, {.zero = 3, .checkpointing = checkpointing, .base = base}}, accum, 3);
  CHECK(runs[0].losses.back() < runs[0].losses.front());
  CHECK_FALSE(runs[0].released);
  // The whole weights compared hold the frozen base (gathered from its shards) beside the adapters.
  const auto named = [&](const std::string& part) {
    return std::count_if(runs[1].weights.begin(), runs[1].weights.end(),
                         [&](const NamedTensor& w) { return w.name.find(part) != std::string::npos; });
  };
  CHECK(named("lora_A") == 3 * 3);
  CHECK(named("layernorm") == 2 * 3);
  if (base == Base::lora) CHECK(named("k_proj") == 3);
  require_same_lm_run(runs[1], runs[0]);
  CHECK(runs[1].released);
}

namespace {

// A ZeRO-3 run with bf16 parameter gathers (narrow) against the same run with f32 gathers (exact).
void require_bf16_gathers(const LmRun& narrow, const LmRun& exact) {
  CHECK(narrow.released);
  REQUIRE(narrow.losses.size() == exact.losses.size());
  bool all_equal = true;
  for (size_t s = 0; s < exact.losses.size(); ++s) {
    INFO("step " << s);
    CHECK(narrow.losses[s] == Approx(exact.losses[s]).epsilon(1e-2));  // bf16 weights: ~3 digits
    all_equal = all_equal && narrow.losses[s] == exact.losses[s];
  }
  CHECK_FALSE(all_equal);  // the gathers did round
  // whole_on_rank0 gathered the f32 shards: values bf16 cannot hold are there.
  int64_t unrounded = 0;
  for (const NamedTensor& w : narrow.weights) {
    const Tensor values = w.tensor.to(DType::f32);
    unrounded += static_cast<int64_t>(sum(ne(values, values.to(DType::bf16).to(DType::f32)).to(DType::f32)).item());
  }
  CHECK(unrounded > 0);
  // Apart by the rounding alone: AdamW moves a weight by about lr (0.01) a step whatever its
  // gradient's size, so a gradient whose sign the rounding flips parts the runs by up to 2 lr a step.
  REQUIRE(narrow.weights.size() == exact.weights.size());
  for (size_t i = 0; i < exact.weights.size(); ++i) {
    INFO("weight " << exact.weights[i].name);
    CHECK(max(abs(sub(narrow.weights[i].tensor, exact.weights[i].tensor))).item() <= 3 * 2 * 0.0101);
  }
}

}  // namespace

TEST_CASE("ZeRO-3 with bf16 parameter gathers: the step computes with rounded weights, the shards and the "
          "checkpoint keep f32",
          "[cpu][dist]") {
  using models::ActivationCheckpointing;
  const int accum = GENERATE(1, 2);
  INFO("accumulation " << accum);
  const std::vector<LmRun> runs =
      run_lm(2, {{3, ActivationCheckpointing::none}, {3, ActivationCheckpointing::selective, DType::bf16}}, accum, 3);
  require_bf16_gathers(runs[1], runs[0]);
}

#if GENESIS_WITH_NCCL
namespace {

// The GPUs an nccl group of this machine can take: one rank per GPU, two at most here.
int nccl_world() {
  if (!cuda::is_available()) return 0;
  return std::min(cuda::device_count(), 2);
}

}  // namespace

TEST_CASE("nccl: all_reduce, reduce_scatter, in-place all_gather and broadcast on every GPU match the host", "[cuda][dist]") {
  const int world = nccl_world();
  if (world == 0) {
    WARN("skipped: no CUDA device on this machine");
    return;
  }
  if (world == 1) WARN("one GPU: the nccl group has one rank (two GPUs test the exchange itself)");
  const int64_t n = 1001 * world;  // odd, divisible into the ranks' chunks
  for (DType dtype : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dtype));
    std::vector<std::vector<Tensor>> got(static_cast<size_t>(world));
    require_all_ok(run_ranks(
        world, 60.0,
        [&](Communicator& c) {
          const Device device(DeviceType::cuda, c.rank());
          std::vector<Tensor>& mine = got[static_cast<size_t>(c.rank())];
          Tensor sum = rank_values(c.rank(), n, dtype).to(device);
          Tensor avg = sum.clone(), top = sum.clone();
          c.all_reduce(sum, ReduceOp::sum)->wait();
          c.all_reduce(avg, ReduceOp::avg)->wait();
          c.all_reduce(top, ReduceOp::max)->wait();
          Tensor scattered = full({n / world}, 7.0, {.dtype = dtype, .device = device});
          c.reduce_scatter(rank_values(c.rank(), n, dtype).to(device), scattered, ReduceOp::sum)->wait();
          // In place: this rank's chunk is already where the gathered result wants it.
          Tensor gathered = full({n}, 7.0, {.dtype = dtype, .device = device});
          Tensor chunk = gathered.narrow(0, c.rank() * (n / world), n / world);
          chunk.copy_(rank_values(c.rank(), n / world, dtype).to(device));
          c.all_gather(chunk, gathered)->wait();
          Tensor from_last = rank_values(c.rank(), n, dtype).to(device);
          c.broadcast(from_last, world - 1)->wait();
          for (const Tensor& t : {sum, avg, top, scattered, gathered, from_last}) mine.push_back(t.to(kCPU).to(DType::f64));
        },
        /*nccl=*/true));
    // The host's answers, from the same rounded inputs.
    Tensor sum = zeros({n}, {.dtype = DType::f64}), top = full({n}, -1e30, {.dtype = DType::f64});
    for (int r = 0; r < world; ++r) {
      Tensor v = rank_values(r, n, dtype).to(DType::f64);
      sum = add(sum, v);
      top = maximum(top, v);
    }
    const double tol = dtype == DType::bf16 ? 1e-2 : 1e-6;
    auto require_near = [&](const Tensor& a, const Tensor& b, const char* what) {
      INFO(what);
      const double err = max(abs(sub(a, b))).item(), scale = max(abs(b)).item();
      REQUIRE(err <= tol * scale);
    };
    for (int r = 0; r < world; ++r) {
      const std::vector<Tensor>& g = got[static_cast<size_t>(r)];
      INFO("rank " << r);
      require_near(g[0], sum, "all_reduce sum");
      require_near(g[1], div(sum, static_cast<double>(world)), "all_reduce avg");
      require_near(g[2], top, "all_reduce max");
      require_near(g[3], sum.narrow(0, r * (n / world), n / world), "reduce_scatter");
      std::vector<Tensor> parts;
      for (int q = 0; q < world; ++q) parts.push_back(rank_values(q, n / world, dtype).to(DType::f64));
      require_near(g[4], cat(parts, 0), "all_gather in place");
      require_near(g[5], rank_values(world - 1, n, dtype).to(DType::f64), "broadcast");
    }
  }
}

TEST_CASE("nccl: ZeRO-2 and ZeRO-3 of a tiny Llama on the GPUs train as DDP does, checkpointed and accumulated, "
          "bf16 parameter gathers, a sharded NF4 base",
          "[cuda][dist]") {
  const int world = nccl_world();
  if (world == 0) {
    WARN("skipped: no CUDA device on this machine");
    return;
  }
  using models::ActivationCheckpointing;
  const ActivationCheckpointing checkpointing = GENERATE(ActivationCheckpointing::none, ActivationCheckpointing::full);
  const int accum = GENERATE(1, 2);
  INFO("world " << world << ", checkpointing " << static_cast<int>(checkpointing) << ", accumulation " << accum);
  const std::vector<LmRun> runs =
      run_lm(world, {{0, ActivationCheckpointing::none}, {2, checkpointing}, {3, checkpointing},
                     {3, checkpointing, DType::bf16}, {.zero = 0, .base = LmConfig::Base::qlora},
                     {.zero = 3, .checkpointing = checkpointing, .base = LmConfig::Base::qlora}},
             accum, 3, /*nccl=*/true);
  CHECK(runs[0].losses.back() < runs[0].losses.front());
  require_same_lm_run(runs[1], runs[0]);
  require_same_lm_run(runs[2], runs[0]);
  CHECK(runs[2].released);
  INFO("bf16 parameter gathers");
  require_bf16_gathers(runs[3], runs[2]);
  INFO("QLoRA: the NF4 base sharded");
  require_same_lm_run(runs[5], runs[4]);
  CHECK(runs[5].released);
}

TEST_CASE("nccl: ZeRO-1 and ZeRO-2 AdamW steps on the GPUs equal DDP's, and the gathered state is DDP's", "[cuda][dist]") {
  const int world = nccl_world();
  if (world == 0) {
    WARN("skipped: no CUDA device on this machine");
    return;
  }
  std::vector<Tensor> init;
  int seed = 3;
  for (const Shape& shape : std::vector<Shape>{{7, 5}, {5}, {5, 3}, {3}, {11}})
    init.push_back(mul(rank_values(seed++, numel_of(shape), DType::f32), 0.3).reshape(shape));
  const int level = GENERATE(1, 2);
  INFO("zero " << level);
  const ZeroRun ddp = run_adamw(world, 0, 3, init, {}, 0, /*nccl=*/true);
  const ZeroRun zero = run_adamw(world, level, 3, init, {}, 0, /*nccl=*/true);
  const ZeroRun cpu = run_adamw(world, 0, 3, init, {}, 0);
  for (size_t i = 0; i < init.size(); ++i) {
    require_close(zero.weights[i], ddp.weights[i], "weight " + std::to_string(i));
    require_close(ddp.weights[i], cpu.weights[i], "GPU against CPU, weight " + std::to_string(i));
  }
  require_same_state(zero.state, ddp.state);
  // Gradients on the wire in bf16 (cast on the nccl stream): ZeRO-1 equals DDP, and both stay
  // within a bf16 rounding's effect on three AdamW steps of the f32-gradient run.
  const ZeroRun ddp16 = run_adamw(world, 0, 3, init, {}, 0, /*nccl=*/true, DType::bf16);
  const ZeroRun zero16 = run_adamw(world, level, 3, init, {}, 0, /*nccl=*/true, DType::bf16);
  for (size_t i = 0; i < init.size(); ++i) {
    require_close(zero16.weights[i], ddp16.weights[i], "bf16 wire, weight " + std::to_string(i));
    const double err = max(abs(sub(ddp16.weights[i], ddp.weights[i]))).item();
    INFO("bf16 wire against f32, weight " << i << ": " << err);
    CHECK(err <= 2e-3);
  }
}
#endif
