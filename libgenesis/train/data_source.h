#pragma once
// Where a run's data comes from: one DataSource per [data] name, behind one interface that
// the training loop, `genesis eval` and the run's reports use without asking which it is.
//   samples  (data.name = "fashion_mnist")  a sample dataset through the DataLoader
//   csv      (data.name = "csv")            a table's rows, encoded, through the same loader
//   images   (data.name = "image_folder")   a folder of PNG/JPEG files per class, decoded, through the same loader
//   text     (data.name = "text_classification")  labelled texts, tokenized, for a language model with a classifier head
//   tokens   (data.name = "tokens")         windows of token shards, every position trained
//   sft      (data.name = "sft")            JSONL records through a chat template, masked and packed
// A source gives this rank's micro-batches with what they count (the targets that take part in
// the loss, the positions that hold tokens), a cursor that checkpoints save, its evaluation and
// its checks of the model it feeds. It prepares its data when it is opened.
//
// Adding a source: one file with a class deriving DataSource and its factory, one line in
// data_source.cpp's table, and its recipe keys (recipe/schema.cpp).
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libgenesis/core/device.h"
#include "libgenesis/data/loader.h"
#include "libgenesis/nn/module.h"
#include "libgenesis/recipe/recipe.h"
#include "libgenesis/train/lm_metrics.h"
#include "libgenesis/train/run_log.h"

namespace genesis::train {

// A classifier's last evaluation, by class: counts[t][p] examples of class t predicted as p.
struct ConfusionMatrix {
  std::vector<std::string> classes;  // each class's name
  std::vector<std::vector<int64_t>> counts;
};

class DataSource {
 public:
  virtual ~DataSource() = default;

  // This rank's next micro-batch (targets equal to -100 take no loss). Batch::loss_terms says
  // how many targets count when the source knows; otherwise all of them do.
  virtual data::Batch next() = 0;
  // The targets the next `count` micro-batches will count (what next() would give), without
  // making them: a step divides its loss by their total before its first backward.
  virtual int64_t loss_terms_ahead(int64_t count) const = 0;
  // Where the next micro-batch comes from, and the way back there (resume, an abandoned step).
  virtual data::LoaderCursor cursor() const = 0;
  virtual void seek(data::LoaderCursor at) = 0;
  virtual int64_t batches_per_epoch() const = 0;

  // Whether there is an evaluation set; evaluate() runs the model on all of it (in eval mode,
  // without grad; every rank of the share gets the same figures).
  virtual bool has_evaluation() const = 0;
  virtual std::map<std::string, double> evaluate(nn::Module& model) = 0;
  // Why there is no evaluation set and what to do about it (when has_evaluation() is false).
  virtual std::string missing_evaluation() const { return "the recipe's data has no evaluation set"; }
  // A classifier's confusion matrix from the last evaluate(); nullopt for other data.
  virtual std::optional<ConfusionMatrix> confusion() const { return std::nullopt; }

  // Refuses (RecipeError) a model this data cannot feed, before the first step: token ids past
  // its vocabulary, a sequence longer than its context.
  virtual void check_model(const nn::Module& model) const { (void)model; }

  // Language-model data: the length of a batch row (FLOPs per token, the start line); 0 for
  // samples, which count examples per second and no tokens.
  virtual int64_t sequence_length() const { return 0; }
  // A batch row in words, for the start line: "examples", "windows of 256 tokens".
  virtual std::string row_noun() const = 0;
  // The tokenizer the data was tokenized with (a tokenizer.json or a directory of tokenizer
  // files, which checkpoints keep a copy of); empty for samples.
  virtual std::filesystem::path tokenizer() const { return {}; }
  // What the data was encoded with, as JSON text (a table's statistics and class names): the
  // checkpoints keep it (data.json), and open_data_source takes it back so that evaluation
  // encodes as training did. Empty for data that needs none.
  virtual std::string encoding() const { return {}; }
};

// Opens the source of spec.data.name, preparing its data first when missing (its stages as
// notes and a progress bar to `log`); `share` splits its batches and evaluation over the ranks;
// `encoding`, a checkpoint's DataSource::encoding(), is used instead of one made from the data.
// Throws RecipeError for a name no source has.
std::unique_ptr<DataSource> open_data_source(const RecipeSpec& spec, Device device, RunLog& log,
                                             const EvalShare& share = {}, const std::string& encoding = {});

// Whether data.name feeds a language model (token rows) rather than a classifier (samples).
bool language_model_data(const std::string& data_name);

// Token shards, checked against a model before training: an id past the model's vocabulary
// would otherwise stop the run when its batch comes up, possibly hours in (RecipeError naming
// the shard and the id); both shards must come from one tokenizer.
void check_shard_vocab(const std::filesystem::path& path, int64_t vocab_size);
void check_shard_vocabs_match(const std::filesystem::path& train, const std::filesystem::path& val);

}  // namespace genesis::train
