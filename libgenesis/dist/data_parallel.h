#pragma once
// Data-parallel gradients (DDP) and optimizer-state sharding (ZeRO-1). Every rank holds the whole
// model and runs its own slice of the batch.
//
// The gradients live in buckets of about bucket_mb, in reverse parameter order (the order the
// backward produces them): each parameter's .grad is a view of its bucket's flat buffer, so the
// collective needs no copy. A post-accumulate hook counts each bucket's gradients during an armed
// backward and starts its collective as soon as the last one has arrived, while the rest of the
// backward runs. bucket_mb = 0 puts everything in one bucket started after the backward (no
// overlap; for measuring what the overlap gains). With reduce_dtype (bf16) the buckets travel
// narrowed: the collective casts them on its own stream and writes the result back into them.
//
// DDP (zero = 0): each bucket is all-reduced (mean); every rank applies the same update to the
// whole model with the whole optimizer state.
//
// ZeRO-1 (zero = 1): each bucket is split into world_size equal chunks (padded) and
// reduce-scattered: rank r receives the mean of chunk r only. The parameters are re-homed into
// per-bucket flat buffers of the same layout, and the optimizer is built over this rank's pieces
// of them (shard_groups: each parameter cut to its overlap with chunk r), so its state is
// 1/world_size of the model's. After the optimizer step, gather_parameters() all-gathers the
// updated chunks. Checkpoints hold the whole state (full_optimizer_state gathers it; loading cuts
// it again), so a ZeRO-1 checkpoint reads like a DDP or single-process one and resumes on any
// number of ranks.
//
// A step with DataParallel (train/step.cpp):
//   arm(); last micro-batch backward; finish();          gradients averaged (or reduce-scattered)
//   unscale / clip over update_params(), agree_found_inf  the same decisions on every rank
//   optimizer.step(); gather_parameters(); zero_grad()
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libgenesis/dist/communicator.h"
#include "libgenesis/optim/optimizer.h"

namespace genesis::dist {

struct DataParallelOptions {
  double bucket_mb = 25.0;
  int zero = 0;  // 0: DDP, 1: optimizer state sharded over the ranks
  // The dtype the gradients travel in (bf16: half the bytes of f32, rounded once per rank and
  // summed in bf16); unset: the parameters' own.
  std::optional<DType> reduce_dtype = std::nullopt;
};

class DataParallel {
 public:
  // params: the model's parameters, all of one dtype and device (the communicator's).
  DataParallel(std::vector<Tensor> params, Communicator& comm, DataParallelOptions options = {});
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  bool sharded() const { return options_.zero > 0; }
  int world_size() const { return comm_.size(); }

  // Makes every rank's parameters rank 0's (at the start of a run).
  void broadcast_parameters();
  // The coming backward completes the step's gradients: its buckets start as they fill. Inner
  // micro-batches of gradient accumulation are not armed, so they accumulate locally.
  void arm();
  // Starts the buckets the backward left (parameters without a gradient this step count as
  // zero) and waits for all: every .grad is now the mean over the ranks (ZeRO-1: this rank's
  // chunks of it, the gradients of update_params()).
  void finish();
  // The mean over the ranks of a 0-d tensor (the step's loss), in place of waiting on the host.
  Tensor average(const Tensor& value);

  // The tensors whose .grad the step unscales and clips after finish(): the model's parameters
  // (DDP), or this rank's chunk of every bucket (ZeRO-1; their gradients are the reduce-scattered
  // means, padding included as zeros).
  const std::vector<Tensor>& update_params() const;
  // clip_grad_norm over the whole model's averaged gradients: the same norm and scaling on every
  // rank (ZeRO-1: each rank's sum of squares, summed over the ranks).
  Tensor clip_grad_norm(double max_norm);
  // ZeRO-1: found_inf (an fp16 scaler's flag) becomes the maximum over the ranks, so all skip alike.
  void agree_found_inf(const Tensor& found_inf);
  // ZeRO-1: every rank receives the others' updated chunks (after the optimizer step).
  void gather_parameters();
  // Marks every parameter's gradient zero for the next step (the optimizer's zero_grad covers only
  // the pieces it updates under ZeRO-1).
  void zero_grad();

  // ZeRO-1: `groups` (the optimizer's groups over the whole model, as recipe::optimizer_groups
  // gives them) cut to this rank's pieces: each parameter becomes the part of its flat buffer that
  // falls in this rank's chunk, named as the parameter, with the group's settings; parameters
  // with no part here are left out (a group may end up empty).
  std::vector<ParamGroup> shard_groups(const std::vector<ParamGroup>& groups);
  // ZeRO-1, on every rank together: the optimizer's state over the whole model, named per
  // parameter as Optimizer::state() names it (on rank 0; other ranks get an empty list), copied
  // to the host bucket by bucket.
  std::vector<NamedTensor> full_optimizer_state(const Optimizer& optimizer);
  // ZeRO-1: loads a whole-model state (a checkpoint's, from any world size) into the optimizer of
  // this rank's pieces.
  void load_full_optimizer_state(Optimizer& optimizer, const std::vector<NamedTensor>& state, int64_t step_count);

  int64_t bucket_count() const;
  // Seconds the step waited for the collectives after the backward, since construction: for CPU
  // tensors the host blocked in finish(); for CUDA tensors the compute stream stalled on them
  // (events around finish()'s waits; the host never blocks there).
  double wait_seconds() const;

 private:
  struct State;  // the buckets, shared with the parameters' hooks (which outlive this object)
  class StreamStall;  // CUDA: times the compute stream's waits
  struct Piece {  // ZeRO-1: one parameter's part of this rank's chunk
    std::string name;
    size_t bucket;
    int64_t param_offset;  // the parameter's place in its bucket
    int64_t param_numel;
    int64_t start;  // the piece's place in its bucket (inside this rank's chunk)
    int64_t length;
  };

  std::vector<Tensor> params_;
  Communicator& comm_;
  DataParallelOptions options_;
  std::shared_ptr<State> state_;
  std::vector<Tensor> shards_;  // ZeRO-1: update_params()
  std::vector<Piece> pieces_;
  double wait_seconds_ = 0.0;
  std::unique_ptr<StreamStall> stall_;

 public:
  ~DataParallel();
};

}  // namespace genesis::dist
