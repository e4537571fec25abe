#pragma once
// What a training run will hold per rank, estimated from its recipe before anything is allocated
// (`genesis recipe show --memory`, and the check a CUDA run makes before it builds its model).
// Parameters, gradients and optimizer state are counted from the model's layout (a language
// model's from its config.json, model.init_from's included: no weights are read), in the dtypes
// the run stores them in; activations are an estimate: what the forward keeps for the backward,
// block by block, and the loss head's working memory, derived from the batch, the sequence
// length, the widths and the autocast dtype (train/activation_estimate.h).
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "libgenesis/core/device.h"
#include "libgenesis/recipe/recipe.h"

namespace genesis::train {

struct MemoryEstimateOptions {
  int64_t world_size = 1;  // ranks of data parallelism (dist.zero shards over them)
  Device device = kCPU;    // attention and the loss head keep different things on the CPU and on CUDA
};

// What one step adds while it runs, in one activation checkpointing mode: `saved`, what the
// forward keeps for the backward; `head`, the loss head's working memory at the end of the forward;
// `backward`, the most the backward of one block adds (its rebuilt graph when it is checkpointed,
// and the gradients in flight). The two happen one after the other: the peak is saved + the larger.
struct ActivationBytes {
  int64_t saved = 0, head = 0, backward = 0;
  int64_t total() const { return saved + (head > backward ? head : backward); }
};

// Bytes per rank.
struct MemoryEstimate {
  std::string model;   // model.name
  std::string device;  // "cpu" or "cuda"
  int64_t world_size = 1;
  int64_t zero = 0;  // dist.zero
  // Parameters: counts, and bytes as stored (trained: f32; frozen: model.dtype's, NF4 under QLoRA).
  int64_t trainable_parameters = 0, frozen_parameters = 0, quantized_parameters = 0;
  int64_t trainable_bytes = 0, frozen_bytes = 0;
  std::string frozen_dtype;             // "f32", "bf16", "f16" (the NF4 ones aside)
  // ZeRO-3 over more than one rank: the trained parameters gathered whole while the step runs
  // (unit 0, the embeddings, final norm and head, for the whole step; about three decoder blocks
  // at a time: the one computing, the next prefetched, the last not yet freed), beyond the shard.
  int64_t gathered_bytes = 0;
  int64_t gradient_bytes = 0;           // f32, of the trained parameters
  int64_t optimizer_bytes = 0;          // f32 slots of the trained parameters
  int64_t optimizer_slots = 0;          // per trained parameter: 2 for Adam(W), 3 with amsgrad, ...
  bool optimizer_offloaded = false;     // dist.offload_optimizer: optimizer_bytes are host memory
  std::string amp_dtype;                // amp.dtype
  int64_t batch_size = 0, seq_len = 0;  // per rank and micro-batch; seq_len 0 for a classifier
  // Activations of each training.activation_checkpointing mode; a classifier's are the same in each.
  ActivationBytes none, full, selective;
  std::string checkpointing;  // the recipe's mode; "" for a classifier (it does not apply)
  // Gradients are made during the backward while the activations are freed (a GPU run without data
  // parallelism or accumulation drops them between steps): the peak then holds the larger of the
  // two rather than both.
  bool gradients_overlap = false;

  int64_t parameter_bytes() const { return trainable_bytes + frozen_bytes + gathered_bytes; }
  const ActivationBytes& activations() const;  // of the recipe's mode
  // The step's peak on the device: parameters + optimizer state (unless offloaded) + gradients and
  // activations (see gradients_overlap).
  int64_t total_bytes() const;
};

// The estimate for `spec` on options.device with options.world_size ranks. Throws RecipeError for
// a recipe whose model cannot be built (an init_from without config.json, a LoRA target that
// matches nothing).
MemoryEstimate estimate_memory(const RecipeSpec& spec, const MemoryEstimateOptions& options);

// `genesis recipe show --memory`: a table, and the same numbers as JSON.
std::string memory_table(const MemoryEstimate& estimate);
nlohmann::json memory_json(const MemoryEstimate& estimate);

// Before a CUDA run allocates its model: throws Error (exit 1) with the numbers and what would
// help when the estimate exceeds the device's free memory by more than 10% (an estimate near the
// limit never stops a run that might fit), or when the offloaded optimizer state of the host's
// ranks exceeds the host's available memory by as much (the kernel would kill the run instead).
// Nothing on the CPU, nor with GENESIS_SKIP_MEMORY_CHECK=1.
void check_memory_fits(const RecipeSpec& spec, Device device, int64_t world_size);

}  // namespace genesis::train
