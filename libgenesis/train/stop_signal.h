#pragma once
// Clean stop on Ctrl-C / SIGTERM: the first signal asks the training loop to finish the
// current step (or to drop it between micro-batches), write a checkpoint and exit (code 130),
// and data preparation and evaluation to stop (core/interrupt.h); a second one terminates at
// once.

namespace genesis::train {

class StopSignal {
 public:
  StopSignal();   // installs the handlers
  ~StopSignal();  // restores the previous ones
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;
  bool requested() const;
  // For tests: behave as if a signal had arrived.
  static void simulate();
};

}  // namespace genesis::train
