#pragma once
// Where a run's batches come from: dataset samples through the DataLoader (classifiers), or
// token windows of the shards (language models), with the evaluation of the model on the
// recipe's eval set. Used by the trainer and by `genesis eval`.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "libgenesis/core/device.h"
#include "libgenesis/data/loader.h"
#include "libgenesis/nn/module.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/recipe/recipe.h"
#include "libgenesis/train/lm_metrics.h"
#include "libgenesis/train/run_log.h"

namespace genesis::train {

using Evaluation = std::function<std::map<std::string, double>(nn::Module&)>;

// What the loop needs of the run's data: training batches, where they stand, and the
// evaluation of the model.
struct RunBatches {
  std::function<data::Batch()> next;
  std::function<data::LoaderCursor()> cursor;
  std::function<void(data::LoaderCursor)> seek;
  int64_t per_epoch = 0;
  int64_t tokens_per_batch = 0;  // language models: batch_size * seq_len; 0 otherwise
  Evaluation evaluate;           // empty: no evaluation set
  // Language models: refuses (RecipeError) shards holding a token id the model cannot embed.
  std::function<void(int64_t vocab_size)> check_vocab;
};

// A classifier's batches (the recipe's dataset; `share` splits them over the ranks).
RunBatches sample_batches(const RecipeSpec& spec, Device device, const EvalShare& share = {});

// recipe::prepare_token_data reporting to `log`: its stages as notes, a progress bar over the
// documents while it tokenizes.
recipe::TokenData prepare_token_data(const RecipeSpec& spec, RunLog& log);

// A language model's batches, preparing the shards first when missing (its stages and a
// progress bar over the documents to `log`).
RunBatches token_batches(const RecipeSpec& spec, Device device, RunLog& log, const EvalShare& share = {});

// The eval-set measures of a language model on the recipe's val.bin; empty without one.
Evaluation token_evaluation(const RecipeSpec& spec, const recipe::TokenData& data, Device device,
                            const EvalShare& share = {});

// One pass over a shard: an id past the model's vocabulary would otherwise stop the run when
// its batch comes up, possibly hours in. RecipeError naming the shard and the id.
void check_shard_vocab(const std::filesystem::path& path, int64_t vocab_size);
// Throws RecipeError when both shards' headers give a vocabulary size and they differ.
void check_shard_vocabs_match(const std::filesystem::path& train, const std::filesystem::path& val);

}  // namespace genesis::train
