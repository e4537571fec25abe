#include "libgenesis/train/batches.h"

#include <memory>
#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/data/shards.h"
#include "libgenesis/data/tokenizer.h"
#include "libgenesis/models/causal_lm.h"
#include "libgenesis/train/trainer.h"

namespace genesis::train {

namespace fs = std::filesystem;

RunBatches sample_batches(const RecipeSpec& spec, Device device, const EvalShare& share) {
  auto run_data = std::make_shared<recipe::RunData>(recipe::build_data(spec));
  // A larger batch would be cut to the dataset every step while the banner and samples/s
  // count the requested size.
  GENESIS_CHECK(spec.training.batch_size <= run_data->train.size(), UsageError, "training.batch_size (",
                spec.training.batch_size, ") exceeds the ", run_data->train.size(),
                " samples of the training set; lower it");
  auto loader = std::make_shared<data::DataLoader>(
      run_data->train, data::LoaderOptions{.batch_size = spec.training.batch_size,
                                           .shuffle = spec.data.shuffle,
                                           .drop_last = false,
                                           .seed = static_cast<uint64_t>(spec.run.seed),
                                           .prefetch = static_cast<int>(spec.data.prefetch),
                                           .rank = share.rank,
                                           .world_size = share.world});
  RunBatches b;
  b.next = [loader] { return loader->next(); };
  b.cursor = [loader] { return loader->cursor(); };
  b.seek = [loader](data::LoaderCursor c) { loader->seek(c); };
  b.per_epoch = loader->batches_per_epoch();
  if (run_data->eval.size() > 0) {
    b.evaluate = [run_data, batch = spec.eval.batch_size, device, share](nn::Module& model) {
      return evaluate(model, run_data->eval, batch, device, share);
    };
  }
  return b;
}

void check_shard_vocab(const fs::path& path, int64_t vocab_size) {
  if (path.empty()) return;
  const data::TokenShard shard(path);
  const uint32_t largest = shard.checked_max_token();
  GENESIS_CHECK(shard.size() == 0 || static_cast<int64_t>(largest) < vocab_size, RecipeError, "data.shards: ",
                path.string(), " holds token id ", largest, " but the model's vocabulary has ", vocab_size,
                " entries (ids 0..", vocab_size - 1, "); the shards were made with another tokenizer: set "
                "model.vocab_size or prepare the shards again with the recipe's data.tokenizer");
  // Every id may fit and the tokenizer still be another one, larger than the model's.
  GENESIS_CHECK(shard.vocab_size() <= static_cast<uint64_t>(vocab_size), RecipeError, "data.shards: ", path.string(),
                " was made with a vocabulary of ", shard.vocab_size(), " tokens but the model's has ", vocab_size,
                "; set model.vocab_size or prepare the shards again with the recipe's data.tokenizer");
}

void check_shard_vocabs_match(const fs::path& train, const fs::path& val) {
  if (train.empty() || val.empty()) return;
  const uint64_t train_vocab = data::TokenShard(train).vocab_size(), val_vocab = data::TokenShard(val).vocab_size();
  // Ids of two tokenizers mean different text: the validation loss would measure nothing.
  GENESIS_CHECK(train_vocab == 0 || val_vocab == 0 || train_vocab == val_vocab, RecipeError, "data: the training shard ",
                train.string(), " has a vocabulary of ", train_vocab, " tokens but the validation shard ", val.string(),
                " one of ", val_vocab, "; prepare both with the same tokenizer");
}

Evaluation token_evaluation(const RecipeSpec& spec, const recipe::TokenData& data, Device device,
                            const EvalShare& share) {
  if (data.val.empty()) return {};
  auto shard = std::make_shared<data::TokenShard>(data.val);
  auto token_bytes = std::make_shared<std::vector<uint32_t>>(token_byte_lengths(data::Tokenizer::load(data.tokenizer)));
  return [shard, token_bytes, seq_len = spec.data.seq_len, batch = spec.eval.batch_size, device,
          share](nn::Module& model) {
    auto* lm = dynamic_cast<models::CausalLM*>(&model);
    GENESIS_CHECK(lm != nullptr, ValueError, "token evaluation needs a language model");
    return evaluate_lm(*lm, *shard, seq_len, batch, *token_bytes, device, share);
  };
}

recipe::TokenData prepare_token_data(const RecipeSpec& spec, RunLog& log) {
  recipe::TokenData data = recipe::prepare_token_data(
      spec, [&log](const std::string& line) { log.note(line); },
      [&log](int64_t done, int64_t total) { log.progress("tokenizing", done, total); });
  log.clear_progress();
  return data;
}

RunBatches token_batches(const RecipeSpec& spec, Device device, RunLog& log, const EvalShare& share) {
  recipe::TokenData data = prepare_token_data(spec, log);
  auto loader = std::make_shared<data::TokenWindowLoader>(
      std::vector<fs::path>{data.train},
      data::TokenWindowOptions{.batch_size = spec.training.batch_size,
                               .seq_len = spec.data.seq_len,
                               .shuffle = spec.data.shuffle,
                               .seed = static_cast<uint64_t>(spec.run.seed),
                               .rank = share.rank,
                               .world_size = share.world});
  RunBatches b;
  b.next = [loader] {
    data::TokenBatch t = loader->next();
    return data::Batch{.inputs = t.inputs, .targets = t.targets, .epoch = t.at.epoch, .index = t.at.step};
  };
  b.cursor = [loader] { return data::LoaderCursor{loader->cursor().epoch, loader->cursor().step}; };
  b.seek = [loader](data::LoaderCursor c) { loader->seek({c.epoch, c.batch}); };
  b.per_epoch = loader->steps_per_epoch();
  b.tokens_per_batch = spec.training.batch_size * spec.data.seq_len;
  b.check_vocab = [train = data.train, val = data.val](int64_t vocab_size) {
    for (const fs::path& path : {train, val}) check_shard_vocab(path, vocab_size);
    check_shard_vocabs_match(train, val);
  };
  b.evaluate = token_evaluation(spec, data, device, share);
  return b;
}

}  // namespace genesis::train
