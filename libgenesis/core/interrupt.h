#pragma once
// A process-wide stop request: SIGINT/SIGTERM while `genesis train` runs (train/stop_signal.h)
// set it. The training loop stops at the next step boundary; long loops outside the step
// (tokenizing shards, fetching data, evaluating) check it and throw Interrupted, which the
// trainer answers with a checkpoint where it has one and the CLI with exit code 130.
#include "libgenesis/core/error.h"

namespace genesis {

class Interrupted : public Error { public: using Error::Error; };

bool interrupt_requested();
void request_interrupt();  // async-signal-safe
void clear_interrupt();
// Throws Interrupted("stopped by signal while <what>") when a stop was asked for.
void check_interrupt(const char* what);

}  // namespace genesis
