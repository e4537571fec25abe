#include "libgenesis/core/interrupt.h"

#include <csignal>

namespace genesis {

namespace {
volatile std::sig_atomic_t g_interrupt = 0;
}  // namespace

bool interrupt_requested() { return g_interrupt != 0; }
void request_interrupt() { g_interrupt = 1; }
void clear_interrupt() { g_interrupt = 0; }

void check_interrupt(const char* what) {
  if (interrupt_requested()) throw Interrupted(std::string("stopped by signal while ") + what);
}

}  // namespace genesis
