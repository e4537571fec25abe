#include "libgenesis/train/stop_signal.h"

#include <csignal>

#include "libgenesis/core/interrupt.h"

namespace genesis::train {

namespace {
struct sigaction g_previous_int, g_previous_term;

extern "C" void on_stop_signal(int sig) {
  if (interrupt_requested()) {
    // Second signal: give up the clean stop.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  request_interrupt();
}
}  // namespace

StopSignal::StopSignal() {
  clear_interrupt();
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_previous_int);
  sigaction(SIGTERM, &sa, &g_previous_term);
}

StopSignal::~StopSignal() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

bool StopSignal::requested() const { return interrupt_requested(); }
void StopSignal::simulate() { request_interrupt(); }

}  // namespace genesis::train
