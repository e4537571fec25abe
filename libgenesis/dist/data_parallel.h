#pragma once
// Data-parallel gradients (DDP): every rank holds the whole model and runs its own slice of the
// batch; after the backward of a step's last micro-batch the gradients are averaged over the
// ranks, so every rank applies the same update.
//
// The gradients live in buckets of about bucket_mb, in reverse parameter order (the order the
// backward produces them): each parameter's .grad is a view of its bucket's flat buffer, so the
// all-reduce needs no copy. A post-accumulate hook counts each bucket's gradients during an armed
// backward and starts its all-reduce as soon as the last one has arrived, while the rest of the
// backward runs. bucket_mb = 0 puts everything in one bucket started after the backward (no
// overlap; for measuring what the overlap gains).
#include <memory>
#include <vector>

#include "libgenesis/dist/communicator.h"

namespace genesis::dist {

class DataParallel {
 public:
  // params: the model's parameters, all of one dtype and device (the communicator's).
  DataParallel(std::vector<Tensor> params, Communicator& comm, double bucket_mb);
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Makes every rank's parameters rank 0's (at the start of a run).
  void broadcast_parameters();
  // The coming backward completes the step's gradients: its buckets start as they fill. Inner
  // micro-batches of gradient accumulation are not armed, so they accumulate locally.
  void arm();
  // Starts the buckets the backward left (parameters without a gradient this step count as
  // zero) and waits for all: every .grad is now the mean over the ranks.
  void finish();
  // The mean over the ranks of a 0-d tensor (the step's loss), in place of waiting on the host.
  Tensor average(const Tensor& value);

  int64_t bucket_count() const;
  // Host seconds spent in finish() waiting for all-reduces, since construction.
  double wait_seconds() const { return wait_seconds_; }

 private:
  struct State;  // the buckets, shared with the parameters' hooks (which outlive this object)

  std::vector<Tensor> params_;
  Communicator& comm_;
  std::shared_ptr<State> state_;
  double wait_seconds_ = 0.0;
};

}  // namespace genesis::dist
