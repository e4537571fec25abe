#include "libgenesis/dist/failure.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace genesis::dist {

namespace {
std::atomic<bool> g_exit_on_failure{false};
std::atomic<bool> g_reported{false};
}  // namespace

void set_exit_on_failure(bool on) { g_exit_on_failure = on; }

bool announce_failure(const std::string& message) {
  if (g_reported.exchange(true)) return false;
  std::fprintf(stderr, "genesis: error: %s\n", message.c_str());
  std::fflush(stderr);
  return true;
}

void report_failure(const std::string& message) {
  if (!g_exit_on_failure || !announce_failure(message)) return;
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::duration<double>(kFailureGraceS));
    std::_Exit(1);
  }).detach();
}

bool failure_reported() { return g_reported; }

}  // namespace genesis::dist
