#include "libgenesis/train/stop_signal.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>

#include "libgenesis/core/error.h"
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

// The waiting thread: reads the (blocked, so pending) signals from a signalfd until woken.
void wait_for_signals(int signal_fd, int wake_fd) {
  pollfd fds[2] = {{signal_fd, POLLIN, 0}, {wake_fd, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) break;
    signalfd_siginfo info;
    if (read(signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info))
      on_signal(static_cast<int>(info.ssi_signo));
  }
  close(signal_fd);
}
}  // namespace

StopSignal::StopSignal() {
  const sigset_t set = stop_signals();
  const int signal_fd = signalfd(-1, &set, SFD_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC);
  if (signal_fd < 0 || wake_fd_ < 0) {
    const int error = errno;
    if (signal_fd >= 0) close(signal_fd);
    if (wake_fd_ >= 0) close(wake_fd_);
    GENESIS_THROW(Error, "stop signals: signalfd/eventfd failed: ", std::strerror(error));
  }
  clear_interrupt();
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_previous_int);
  sigaction(SIGTERM, &sa, &g_previous_term);
  // Blocked here before the waiting thread starts (and any thread after it: they inherit the
  // mask), and in the OpenMP threads that already exist.
  pthread_sigmask(SIG_BLOCK, &set, &previous_mask_);
#pragma omp parallel
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  waiter_ = std::thread(wait_for_signals, signal_fd, wake_fd_);
}

StopSignal::~StopSignal() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  waiter_.join();
  close(wake_fd_);
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
}

bool StopSignal::requested() const { return interrupt_requested(); }
void StopSignal::simulate() { request_interrupt(); }

}  // namespace genesis::train
