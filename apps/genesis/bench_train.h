#pragma once
// `genesis bench train RECIPE`: the training step of a language-model recipe (its model,
// batch, [amp] and optimizer) on synthetic tokens, timed with CUDA events (the steady clock on
// the CPU) at the phase boundaries of the trainer's own step (libgenesis/train/step.h):
// tokens/s of the median step, MFU, peak memory, and the forward / backward / optimizer split.
// With packing, each row holds several documents (the supervised fine-tuning step: doc_start,
// targets -100 at each document's last token). scripts/bench/torch_train_lm.py writes the same
// schema for PyTorch (eager and compiled; packed rows through FlexAttention).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "libgenesis/recipe/recipe.h"

namespace genesis::cli::bench {

// Packed rows: documents of lengths drawn uniformly in [min_length, max_length] fill each row
// of seq_len positions, the last one cut to fit.
struct PackedDocuments {
  int64_t min_length = 0;
  int64_t max_length = 0;
};

struct TrainBenchOptions {
  int64_t steps = 20;                     // timed steps
  int64_t warmup = 5;                     // untimed steps first (GEMM autotuning, allocator warm-up)
  bool quiet = false;                     // no progress on stderr
  std::optional<PackedDocuments> packed;  // nullopt: each row is one sequence
  // > 0: LoRA of this rank (alpha 2r, every linear layer of the blocks) on a base frozen in
  // amp.dtype, as `torch_train_lm.py --lora` sets PEFT up; the recipe needs no init_from (the
  // base is the recipe's random initialization: the step's time does not depend on its values).
  int64_t lora_rank = 0;
  // With lora_rank: "nf4" stores the frozen base's linear layers in NF4 (QLoRA).
  std::string base_quant = "none";
};

// `--packed MIN:MAX` (1 <= MIN <= MAX); anything else is a UsageError naming the option.
PackedDocuments parse_packed_documents(const std::string& text);

// The result as JSON (schema genesis.bench.train/1, one case: the recipe's step); a summary
// goes to stdout.
nlohmann::json run_train_bench(const RecipeSpec& spec, const TrainBenchOptions& options);

}  // namespace genesis::cli::bench
