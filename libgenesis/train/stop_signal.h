#pragma once
// Clean stop on Ctrl-C / SIGTERM: the first signal asks the training loop to finish the
// current step (or to drop it between micro-batches), write a checkpoint and exit (code 130),
// and data preparation and evaluation to stop (core/interrupt.h); a second one terminates at
// once.
//
// The signals are taken by one waiting thread of StopSignal's own (sigtimedwait) and blocked in
// every other thread (the constructing thread, the OpenMP pool, and the threads started while it lives,
// which inherit the mask): a handler never runs on a compute thread. It must not: oneDNN's
// JIT sgemm kernels (kernels/cpu/linalg.h) point rsp into a heap workspace while they run
// (oneDNN <= 3.11, uxlfoundation/oneDNN#4845), so a signal frame pushed on such a thread
// overwrites the heap ("corrupted size vs. prev_size" aborts after a SIGTERM).
// Stop signals are for the process (kill, a terminal's Ctrl-C, timeout, Slurm): one sent to a
// single other thread (pthread_kill) stays pending until the StopSignal ends, then counts.
#include <signal.h>

#include <atomic>
#include <thread>

namespace genesis::train {

class StopSignal {
 public:
  StopSignal();   // blocks SIGINT/SIGTERM here and in the OpenMP pool, starts the waiting thread
  ~StopSignal();  // stops it (a signal still pending counts as a request), restores the previous
                  // handlers and this thread's signal mask
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;
  bool requested() const;
  // For tests: behave as if a signal had arrived.
  static void simulate();

 private:
  void restore();
  sigset_t previous_mask_;
  std::atomic<bool> stopping_{false};  // set by the destructor to end the waiting thread
  std::thread waiter_;
};

}  // namespace genesis::train
