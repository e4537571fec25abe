#pragma once
// `genesis bench train RECIPE`: the training step of a language-model recipe (its model,
// batch, [amp] and optimizer) on synthetic tokens, timed with CUDA events (the steady clock on
// the CPU) at the phase boundaries of the trainer's own step (libgenesis/train/step.h):
// tokens/s of the median step, MFU, peak memory, and the forward / backward / optimizer split.
// scripts/bench/torch_train_lm.py writes the same schema for PyTorch (eager and compiled).
#include <nlohmann/json.hpp>

#include "libgenesis/recipe/recipe.h"

namespace genesis::cli::bench {

struct TrainBenchOptions {
  int64_t steps = 20;   // timed steps
  int64_t warmup = 5;   // untimed steps first (GEMM autotuning, allocator warm-up)
  bool quiet = false;   // no progress on stderr
};

// The result as JSON (schema genesis.bench.train/1, one case: the recipe's step); a summary
// goes to stdout.
nlohmann::json run_train_bench(const RecipeSpec& spec, const TrainBenchOptions& options);

}  // namespace genesis::cli::bench
