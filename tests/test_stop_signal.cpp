// The clean-stop signals of genesis train (libgenesis/train/stop_signal.h): SIGINT/SIGTERM are
// taken by StopSignal's own thread and blocked in every thread that computes, since oneDNN's
// JIT sgemm runs with rsp in a heap buffer, where a signal frame would land.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "libgenesis/core/interrupt.h"
#include "libgenesis/train/stop_signal.h"

using namespace genesis;

namespace {
bool blocked_here(int sig) {
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  return sigismember(&mask, sig) == 1;
}
}  // namespace

TEST_CASE("train: stop signal: SIGTERM reaches StopSignal's thread, blocked in compute threads", "[cpu][train]") {
  const bool term_before = blocked_here(SIGTERM), int_before = blocked_here(SIGINT);
  {
    train::StopSignal stop;
    CHECK(blocked_here(SIGTERM));
    CHECK(blocked_here(SIGINT));
    int threads = 0, blocked = 0;
#pragma omp parallel num_threads(2) reduction(+ : threads, blocked)
    {
      threads += 1;
      blocked += blocked_here(SIGTERM) && blocked_here(SIGINT) ? 1 : 0;
    }
    CHECK(blocked == threads);
    bool started_blocked = false;  // a thread started now (the data loader's prefetch worker)
    std::thread([&] { started_blocked = blocked_here(SIGTERM) && blocked_here(SIGINT); }).join();
    CHECK(started_blocked);

    REQUIRE_FALSE(stop.requested());
    kill(getpid(), SIGTERM);
    for (int i = 0; i < 5000 && !stop.requested(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(stop.requested());
  }
  clear_interrupt();
  CHECK(blocked_here(SIGTERM) == term_before);  // the mask is restored
  CHECK(blocked_here(SIGINT) == int_before);
}
