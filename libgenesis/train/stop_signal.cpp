#include "libgenesis/train/stop_signal.h"

#include <pthread.h>

#include <cerrno>
#include <csignal>
#include <ctime>

#include "libgenesis/core/interrupt.h"

namespace genesis::train {

namespace {
struct sigaction g_previous_int, g_previous_term;

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

void on_signal(int sig) {
  if (interrupt_requested()) {
    // Second signal: give up the clean stop and end the process as the signal would.
    std::signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
    std::raise(sig);
    return;
  }
  request_interrupt();
}

// Only reached by a thread that still has the signals unblocked (one started by the host
// program before the StopSignal): the stop request still counts.
extern "C" void on_stop_signal(int sig) { on_signal(sig); }

// Takes a pending stop signal, if any, waiting at most `ns` nanoseconds. True when one came.
bool take_signal(long ns) {
  const sigset_t set = stop_signals();
  const timespec timeout{.tv_sec = 0, .tv_nsec = ns};
  const int sig = sigtimedwait(&set, nullptr, &timeout);
  if (sig < 0) return false;  // EAGAIN (none within the timeout) or EINTR
  on_signal(sig);
  return true;
}
}  // namespace

StopSignal::StopSignal() {
  clear_interrupt();
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_previous_int);
  sigaction(SIGTERM, &sa, &g_previous_term);
  // Blocked here before the waiting thread starts (and in any thread after it: they inherit the
  // mask), and in the OpenMP threads that already exist.
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, &previous_mask_);
#pragma omp parallel
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  try {
    // The waiter takes the process's pending stop signals; a tenth of a second between looks
    // at `stopping_` bounds how long the destructor waits for it.
    waiter_ = std::thread([this] {
      while (!stopping_.load(std::memory_order_acquire)) take_signal(100'000'000);
    });
  } catch (...) {
    restore();
    throw;
  }
}

StopSignal::~StopSignal() {
  stopping_.store(true, std::memory_order_release);
  waiter_.join();
  // A signal that came as the waiter stopped still counts as a stop request.
  while (take_signal(0)) {
  }
  restore();
}

void StopSignal::restore() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

bool StopSignal::requested() const { return interrupt_requested(); }
void StopSignal::simulate() { request_interrupt(); }

}  // namespace genesis::train
