#include "libgenesis/train/stop_signal.h"

#include <csignal>

namespace genesis::train {

namespace {
volatile std::sig_atomic_t g_stop = 0;
struct sigaction g_previous_int, g_previous_term;

extern "C" void on_stop_signal(int sig) {
  if (g_stop) {
    // Second signal: give up the clean stop.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_stop = 1;
}
}  // namespace

StopSignal::StopSignal() {
  g_stop = 0;
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

bool StopSignal::requested() const { return g_stop != 0; }
void StopSignal::simulate() { g_stop = 1; }

}  // namespace genesis::train
