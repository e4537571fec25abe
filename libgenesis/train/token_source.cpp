// Windows of token shards for a language model (data.name = "tokens"; train/data_source.h):
// every position of a window is trained, and the evaluation measures val.bin's windows.
#include <memory>
#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/data/shards.h"
#include "libgenesis/data/tokenizer.h"
#include "libgenesis/models/causal_lm.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/data_source.h"

namespace genesis::train {

namespace fs = std::filesystem;

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

namespace {

class TokenSource final : public DataSource {
 public:
  TokenSource(const RecipeSpec& spec, Device device, RunLog& log, const EvalShare& share)
      : data_(prepare(spec, log)),
        device_(device),
        share_(share),
        shards_(spec.data.shards),
        seq_len_(spec.data.seq_len),
        batch_(spec.training.batch_size),
        eval_batch_(recipe::eval_batch_size(spec)),
        loader_(std::vector<fs::path>{data_.train},
                data::TokenWindowOptions{.batch_size = spec.training.batch_size,
                                         .seq_len = spec.data.seq_len,
                                         .shuffle = spec.data.shuffle,
                                         .seed = static_cast<uint64_t>(spec.run.seed),
                                         .rank = share.rank,
                                         .world_size = share.world}) {
    if (!data_.val.empty()) {
      val_ = std::make_unique<data::TokenShard>(data_.val);
      token_bytes_ = token_byte_lengths(data::Tokenizer::load(data_.tokenizer));
    }
  }

  data::Batch next() override {
    data::TokenBatch t = loader_.next();
    const int64_t positions = t.inputs.numel();
    return data::Batch{.inputs = t.inputs,
                       .targets = t.targets,
                       .epoch = t.at.epoch,
                       .index = t.at.step,
                       .loss_terms = positions,
                       .tokens = positions};
  }
  int64_t loss_terms_ahead(int64_t count) const override { return count * batch_ * seq_len_; }
  data::LoaderCursor cursor() const override { return {loader_.cursor().epoch, loader_.cursor().step}; }
  void seek(data::LoaderCursor at) override { loader_.seek({at.epoch, at.batch}); }
  int64_t batches_per_epoch() const override { return loader_.steps_per_epoch(); }

  bool has_evaluation() const override { return val_ != nullptr; }
  std::map<std::string, double> evaluate(nn::Module& model) override {
    auto* lm = dynamic_cast<models::CausalLM*>(&model);
    GENESIS_CHECK(lm != nullptr, ValueError, "token evaluation needs a language model");
    return evaluate_lm(*lm, *val_, seq_len_, eval_batch_, token_bytes_, device_, share_);
  }
  std::string missing_evaluation() const override {
    return shards_ + " has no val.bin to evaluate on (set data.val_fraction > 0 and prepare the shards again)";
  }

  void check_model(const nn::Module& model) const override {
    const auto* lm = dynamic_cast<const models::CausalLM*>(&model);
    if (!lm) return;
    for (const fs::path& path : {data_.train, data_.val}) check_shard_vocab(path, lm->vocab_size());
    check_shard_vocabs_match(data_.train, data_.val);
  }

  int64_t sequence_length() const override { return seq_len_; }
  fs::path tokenizer() const override { return data_.tokenizer; }
  std::string row_noun() const override { return "windows of " + std::to_string(seq_len_) + " tokens"; }

 private:
  // recipe::prepare_token_data reporting to `log`: its stages as notes, a progress bar over the
  // documents while it tokenizes.
  static recipe::TokenData prepare(const RecipeSpec& spec, RunLog& log) {
    recipe::TokenData data = recipe::prepare_token_data(
        spec, [&log](const std::string& line) { log.note(line); },
        [&log](int64_t done, int64_t total) { log.progress("tokenizing", done, total); });
    log.clear_progress();
    return data;
  }

  recipe::TokenData data_;
  Device device_;
  EvalShare share_;
  std::string shards_;
  int64_t seq_len_, batch_, eval_batch_;
  data::TokenWindowLoader loader_;
  std::unique_ptr<data::TokenShard> val_;
  std::vector<uint32_t> token_bytes_;
};

}  // namespace

std::unique_ptr<DataSource> open_token_source(const RecipeSpec& spec, Device device, RunLog& log,
                                              const EvalShare& share, const std::string&) {
  return std::make_unique<TokenSource>(spec, device, log, share);
}

}  // namespace genesis::train
