// Labelled texts as a sequence classifier's samples (data.name = "text_classification";
// train/data_source.h): data/labelled_text.h reads JSONL or CSV records and tokenizes each text
// (cached), the classes are the training labels sorted (or a checkpoint's, so that evaluation
// labels as training did), and the rows of token ids, right-padded, go through the DataLoader as
// the other classifiers' samples do (train/sample_source.h).
#include <algorithm>
#include <set>
#include <tuple>

#include "libgenesis/core/error.h"
#include "libgenesis/data/csv_table.h"
#include "libgenesis/data/labelled_text.h"
#include "libgenesis/io/user_paths.h"
#include "libgenesis/models/sequence_classifier.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/train/sample_source.h"
#include "libgenesis/train/sft_data.h"

namespace genesis::train {

namespace fs = std::filesystem;

namespace {

constexpr int32_t kPad = models::SequenceClassifier::kPad;

// Brings data.fetch's targets when a file the recipe names is missing (the example recipe's data).
void fetch_missing(const RecipeSpec& spec, RunLog& log) {
  const RecipeSpec::Data& d = spec.data;
  auto missing = [&] {
    bool any = !fs::exists(d.path);
    for (const std::string* p : {&d.val_path, &d.test_path}) any |= !p->empty() && !fs::exists(*p);
    return any;
  };
  recipe::fetch_missing_data(spec, missing, [&log](const std::string& line) { log.note(line); });
}

// The texts of one file, tokenized (through the cache), as rows of ids and class indices.
class TextSamples {
 public:
  TextSamples(const RecipeSpec& spec, RunLog& log)
      : spec_(spec),
        log_(log),
        tokenizer_dir_(tokenizer_path(spec)),
        tokenizer_(data::Tokenizer::load(tokenizer_dir_)),
        fields_{.text = spec.data.text, .label = spec.data.label.empty() ? "label" : spec.data.label} {}

  data::LabelledTexts read(const std::string& path) const { return data::read_labelled_texts(path, fields_); }

  // `rows` of `texts` labelled over `classes`; a label outside them is a UsageError naming file:line.
  data::Dataset samples(const data::LabelledTexts& texts, const std::vector<int64_t>& rows,
                        const std::vector<std::string>& classes, const char* whose) {
    bool reused = false;
    const Tensor ids = data::tokenize_texts(
        tokenizer_, texts,
        {.seq_len = spec_.data.seq_len,
         .cache_dir = io::cache_root(spec_.data.cache_dir),
         .tokenizer_key = tokenizer_key(tokenizer_dir_),
         .text_field = fields_.text,
         .progress = [this](int64_t done, int64_t total) { log_.progress("tokenizing texts", done, total); }},
        kPad, &reused);
    log_.clear_progress();
    const int32_t* v = ids.data<int32_t>();
    int64_t cut = 0;
    for (int64_t i = 0; i < ids.numel(); ++i) largest_id_ = std::max<int64_t>(largest_id_, v[i]);
    for (int64_t r = 0; r < ids.size(0); ++r) cut += v[(r + 1) * ids.size(1) - 1] != kPad ? 1 : 0;
    log_.note(texts.path.string() + ": " + (reused ? "tokens read back from the cache" : "tokenized") + "; " +
              count_of(cut, "text") + " of " + std::to_string(texts.size()) +
              " cut to data.seq_len = " + std::to_string(spec_.data.seq_len) + " tokens");
    std::vector<int64_t> targets(static_cast<size_t>(texts.size()));
    for (int64_t i = 0; i < texts.size(); ++i) {
      const std::string& label = texts.labels[static_cast<size_t>(i)];
      const auto at = std::find(classes.begin(), classes.end(), label);
      GENESIS_CHECK(at != classes.end(), UsageError, texts.where(i), ": the label '", label, "' is not one of the ",
                    whose, " classes (", class_list(classes), ")");
      targets[static_cast<size_t>(i)] = at - classes.begin();
    }
    return data::take({.inputs = ids, .targets = from_vector(targets, {texts.size()})}, rows);
  }

  const fs::path& tokenizer_dir() const { return tokenizer_dir_; }
  int64_t largest_id() const { return largest_id_; }

 private:
  const RecipeSpec& spec_;
  RunLog& log_;
  fs::path tokenizer_dir_;
  data::Tokenizer tokenizer_;
  data::TextFields fields_;
  int64_t largest_id_ = 0;
};

std::vector<int64_t> every_row(int64_t n) {
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = i;
  return rows;
}

// The sorted distinct labels of `rows`.
std::vector<std::string> training_classes(const data::LabelledTexts& texts, const std::vector<int64_t>& rows) {
  std::set<std::string> distinct;
  for (const int64_t r : rows) distinct.insert(texts.labels[static_cast<size_t>(r)]);
  std::vector<std::string> classes(distinct.begin(), distinct.end());
  data::sort_classes(classes);
  return classes;
}

// The model must take the data's ids and rows.
void check_text_model(const nn::Module& model, int64_t largest_id, int64_t seq_len, const fs::path& tokenizer) {
  const auto* classifier = dynamic_cast<const models::SequenceClassifier*>(&model);
  GENESIS_CHECK(classifier != nullptr, RecipeError,
                "data.name = \"text_classification\" trains a language model with a classifier head");
  const models::CausalLM& lm = classifier->backbone();
  GENESIS_CHECK(largest_id < lm.vocab_size(), RecipeError, "the tokenizer ", tokenizer.string(), " gives token id ",
                largest_id, ", past the model's vocabulary of ", lm.vocab_size(),
                " (a tokenizer of another model? data.tokenizer, model.init_from)");
  GENESIS_CHECK(seq_len <= lm.max_positions(), RecipeError, "data.seq_len (", seq_len,
                ") exceeds the model's context of ", lm.max_positions(), " positions");
}

}  // namespace

std::unique_ptr<DataSource> open_text_classification_source(const RecipeSpec& spec, Device device, RunLog& log,
                                                            const EvalShare& share,
                                                            const std::string& trained_encoding) {
  const RecipeSpec::Data& d = spec.data;
  fetch_missing(spec, log);
  TextSamples texts(spec, log);
  const data::LabelledTexts train = texts.read(d.path);
  std::vector<int64_t> train_rows = every_row(train.size()), val_rows;
  if (d.val_path.empty() && d.val_fraction > 0.0)
    std::tie(train_rows, val_rows) =
        data::validation_rows(train.size(), d.val_fraction, static_cast<uint64_t>(spec.run.seed));
  const bool trained = !trained_encoding.empty();
  const std::vector<std::string> classes =
      trained ? data::parse_text_encoding(trained_encoding, "the checkpoint's data.json")
              : training_classes(train, train_rows);
  const char* whose = trained ? "checkpoint's" : "training rows'";
  GENESIS_CHECK(spec.model.num_classes >= static_cast<int64_t>(classes.size()), RecipeError,
                "model.num_classes = ", spec.model.num_classes, " is fewer than the ", classes.size(), " classes of ",
                d.path, " (", class_list(classes), "); set model.num_classes = ", classes.size());

  recipe::RunData samples;
  samples.train = texts.samples(train, train_rows, classes, whose);
  std::string held_out = "no evaluation set";
  SampleSourceNotes notes{.missing_evaluation = "",
                          .encoding = data::text_encoding_json(classes),
                          .classes = classes,
                          .tokenizer = texts.tokenizer_dir(),
                          .check_model = {}};
  if (spec.eval.split == "val" && !d.val_path.empty()) {
    const data::LabelledTexts val = texts.read(d.val_path);
    samples.eval = texts.samples(val, every_row(val.size()), classes, whose);
    held_out = count_of(val.size(), "validation text") + " from " + d.val_path;
  } else if (spec.eval.split == "val") {
    samples.eval = texts.samples(train, val_rows, classes, whose);
    held_out = count_of(static_cast<int64_t>(val_rows.size()), "validation text") + " (data.val_fraction)";
  } else if (!d.test_path.empty()) {
    const data::LabelledTexts test = texts.read(d.test_path);
    samples.eval = texts.samples(test, every_row(test.size()), classes, whose);
    held_out = count_of(test.size(), "test text") + " from " + d.test_path;
  } else {
    notes.missing_evaluation =
        "data.name = \"text_classification\" evaluates eval.split = \"test\" on data.test_path, which is not set; set "
        "it, or eval.split = \"val\" with data.val_path or data.val_fraction";
  }
  notes.check_model = [largest = texts.largest_id(), seq_len = d.seq_len, tokenizer = texts.tokenizer_dir()](
                          const nn::Module& model) { check_text_model(model, largest, seq_len, tokenizer); };
  log.note(d.path + ": " + count_of(static_cast<int64_t>(train_rows.size()), "training text") + ", " + held_out + "; " +
           std::to_string(classes.size()) + (classes.size() == 1 ? " class" : " classes") +
           (trained ? " (the checkpoint's)" : "") + ": " + class_list(classes));
  return open_samples(std::move(samples), spec, device, share, std::move(notes));
}

}  // namespace genesis::train
