#pragma once
// Data-parallel gradients (DDP) and sharding of the training state over the ranks (ZeRO-1, 2
// and 3). Every rank runs its own slice of the batch.
//
// The gradients travel in buckets of about bucket_mb, in reverse parameter order (the order the
// backward produces them). A post-accumulate hook counts each bucket's gradients during an armed
// backward and starts its collective as soon as the last one has arrived, while the rest of the
// backward runs. bucket_mb = 0 puts everything in one bucket started after the backward (no
// overlap; for measuring what the overlap gains). With reduce_dtype (bf16) the buckets travel
// narrowed: the collective casts them on its own stream and writes the result back into them.
//
// DDP (zero = 0): each parameter's .grad is a view of its bucket's flat buffer (no copy for the
// collective); each bucket is all-reduced (mean); every rank applies the same update to the whole
// model with the whole optimizer state.
//
// ZeRO-1 (zero = 1): each bucket is split into world_size equal chunks (padded) and
// reduce-scattered: rank r receives the mean of chunk r only. The parameters are re-homed into
// per-bucket flat buffers of the same layout, and the optimizer is built over this rank's pieces
// of them (shard_groups: each parameter cut to its overlap with chunk r), so its state is
// 1/world_size of the model's. After the optimizer step, gather_parameters() all-gathers the
// updated chunks. Checkpoints hold the whole state (full_optimizer_state gathers it; loading cuts
// it again), so a ZeRO checkpoint reads like a DDP or single-process one and resumes on any
// number of ranks.
//
// ZeRO-2 (zero = 2): as ZeRO-1, but the whole gradients are not kept: in the armed backward each
// parameter's gradient is copied into its bucket (whose memory is taken at its first gradient)
// and dropped, and a bucket's memory goes back once its reduce-scatter has finished (at most two
// buckets are in flight). Micro-batches before the armed one accumulate whole gradients locally.
//
// ZeRO-3 (zero = 3, a language model's units; models::UnitHooks): the buckets are the units
// (the decoder blocks, and the rest), and the parameters themselves are sharded: each rank keeps
// its chunk of every unit (the optimizer updates it in place), and a unit's whole parameters
// exist only around its computation: all-gathered before a block's forward (the next block's
// gather started meanwhile), freed after it, gathered again when the backward reaches the block
// (the previous block's started) and freed once the block's backward has passed its input and
// all its gradients. Unit 0 (embeddings, final norm, head) is gathered at the start of the
// forward and freed after the backward. A unit's frozen parameters (a LoRA base) are sharded
// too, as raw bytes in one buffer per unit, and come and go with its trained ones. The parameter tensors keep their storage objects, so
// what the forward saved for the backward stays valid: only the memory comes and goes
// (Storage::release / restore). Checkpoints gather one unit at a time to rank 0's host.
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
#include "libgenesis/models/causal_lm.h"
#include "libgenesis/optim/optimizer.h"

namespace genesis::dist {

struct DataParallelOptions {
  double bucket_mb = 25.0;
  int zero = 0;  // 0: DDP; 1: optimizer state sharded; 2: and gradients; 3: and parameters
  // zero = 3: the units (models::CausalLM::shard_units), every parameter in exactly one; the
  // buckets are the units, whatever bucket_mb says.
  std::vector<std::vector<Tensor>> units = {};
  // zero = 3: the tensors that hold each unit's frozen parameters (models::CausalLM::frozen_units:
  // a LoRA base's weights, QLoRA's NF4 codes and scales), as many lists as units, or none. They
  // are sharded, gathered and freed with their unit, in their own bytes; they take no gradient
  // and no broadcast (every rank built them alike, from init_from or the seed).
  std::vector<std::vector<Tensor>> frozen_units = {};
  // The dtype the gradients travel in (bf16: half the bytes of f32, rounded once per rank and
  // summed in bf16); unset: the parameters' own.
  std::optional<DType> reduce_dtype = std::nullopt;
  // zero = 3: the dtype the parameters' all-gathers for the forward and backward travel in (bf16:
  // half the bytes; the step computes with the rounded values while each rank's shard, which the
  // optimizer updates, keeps the parameters' dtype). Checkpoints always gather the shards exactly.
  // Unset: the parameters' own.
  std::optional<DType> param_dtype = std::nullopt;
};

class DataParallel {
 public:
  // params: the model's parameters, all of one dtype and device (the communicator's).
  DataParallel(std::vector<Tensor> params, Communicator& comm, DataParallelOptions options = {});
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  bool sharded() const { return options_.zero > 0; }
  int world_size() const { return comm_.size(); }

  // Makes every rank's parameters rank 0's (at the start of a run, after a resume has loaded the
  // model). Under ZeRO-3 each rank then keeps its chunks and frees the whole parameters.
  void broadcast_parameters();
  // ZeRO-3: the hooks for the model's forward (models::CausalLM::set_unit_hooks).
  std::shared_ptr<models::UnitHooks> unit_hooks();
  // For a checkpoint, on every rank together: `tensors` (the model's state_dict or its trained
  // parameters) on rank 0, each sharded parameter's whole value copied to the host one unit at a
  // time (ZeRO-3; never the whole model in device memory at once); other ranks get an empty list.
  // Without ZeRO-3 the tensors themselves on rank 0.
  std::vector<NamedTensor> whole_on_rank0(const std::vector<NamedTensor>& tensors);
  // The coming backward completes the step's gradients: its buckets start as they fill. Inner
  // micro-batches of gradient accumulation are not armed, so they accumulate locally.
  void arm();
  // Starts the buckets the backward left (parameters without a gradient this step count as
  // zero) and waits for all: every .grad is now the mean over the ranks (ZeRO: this rank's
  // chunks of it, the gradients of update_params()).
  void finish();
  // The mean over the ranks of a 0-d tensor (the step's loss), in place of waiting on the host.
  Tensor average(const Tensor& value);

  // The tensors whose .grad the step unscales and clips after finish(): the model's parameters
  // (DDP), or this rank's chunk of every bucket (ZeRO; their gradients are the reduce-scattered
  // means, padding included as zeros).
  const std::vector<Tensor>& update_params() const;
  // clip_grad_norm over the whole model's averaged gradients: the same norm and scaling on every
  // rank (ZeRO: each rank's sum of squares, summed over the ranks).
  Tensor clip_grad_norm(double max_norm);
  // ZeRO: found_inf (an fp16 scaler's flag) becomes the maximum over the ranks, so all skip alike.
  void agree_found_inf(const Tensor& found_inf);
  // ZeRO-1/2: every rank receives the others' updated chunks (after the optimizer step); ZeRO-3:
  // the units still whole are freed (the next forward gathers the updated ones).
  void gather_parameters();
  // Marks every parameter's gradient zero for the next step (the optimizer's zero_grad covers only
  // the pieces it updates under ZeRO).
  void zero_grad();

  // ZeRO: `groups` (the optimizer's groups over the whole model, as recipe::optimizer_groups
  // gives them) cut to this rank's pieces: each parameter becomes the part of its flat buffer that
  // falls in this rank's chunk, named as the parameter, with the group's settings; parameters
  // with no part here are left out (a group may end up empty).
  std::vector<ParamGroup> shard_groups(const std::vector<ParamGroup>& groups);
  // ZeRO, on every rank together: the optimizer's state over the whole model, named per
  // parameter as Optimizer::state() names it (on rank 0; other ranks get an empty list), copied
  // to the host bucket by bucket.
  std::vector<NamedTensor> full_optimizer_state(const Optimizer& optimizer);
  // ZeRO: loads a whole-model state (a checkpoint's, from any world size) into the optimizer of
  // this rank's pieces.
  void load_full_optimizer_state(Optimizer& optimizer, const std::vector<NamedTensor>& state, int64_t step_count);

  int64_t bucket_count() const;
  // Seconds the step waited for the collectives after the backward, since construction: for CPU
  // tensors the host blocked in finish(); for CUDA tensors the compute stream stalled on them
  // (events around finish()'s waits; the host never blocks there).
  double wait_seconds() const;

 private:
  struct State;  // the buckets, shared with the parameters' hooks (which outlive this object)
  class Units;   // ZeRO-3: the model's UnitHooks
  class StreamStall;  // CUDA: times the compute stream's waits
  struct Piece {  // ZeRO: one parameter's part of this rank's chunk
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
  std::vector<Tensor> shards_;  // ZeRO: update_params()
  std::vector<Piece> pieces_;
  double wait_seconds_ = 0.0;
  std::unique_ptr<StreamStall> stall_;

 public:
  ~DataParallel();
};

}  // namespace genesis::dist
