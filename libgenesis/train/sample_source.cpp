// The samples of a classifier's dataset through the DataLoader (train/sample_source.h).
#include "libgenesis/train/sample_source.h"

#include <algorithm>
#include <utility>
#include <variant>

#include "libgenesis/core/error.h"
#include "libgenesis/train/trainer.h"

namespace genesis::train {

namespace {

class SampleSource final : public DataSource {
 public:
  SampleSource(recipe::RunData data, const RecipeSpec& spec, Device device, const EvalShare& share,
               SampleSourceNotes notes, data::BatchTransform train_transform)
      : data_(std::move(data)),
        device_(device),
        share_(share),
        eval_batch_(recipe::eval_batch_size(spec)),
        outputs_(classifier_outputs(spec)),
        notes_(std::move(notes)) {
    // A larger batch would be cut to the dataset every step while the banner and samples/s
    // count the requested size.
    GENESIS_CHECK(spec.training.batch_size <= data_.train.size(), UsageError, "training.batch_size (",
                  spec.training.batch_size, ") exceeds the ", data_.train.size(),
                  " samples of the training set; lower it");
    loader_ = std::make_unique<data::DataLoader>(
        data_.train, data::LoaderOptions{.batch_size = spec.training.batch_size,
                                         .shuffle = spec.data.shuffle,
                                         .drop_last = false,
                                         .seed = static_cast<uint64_t>(spec.run.seed),
                                         .prefetch = static_cast<int>(spec.data.prefetch),
                                         .prefetch_threads = device.is_cpu() ? 1 : 0,
                                         .rank = share.rank,
                                         .world_size = share.world,
                                         .transform = std::move(train_transform)});
  }

  data::Batch next() override { return loader_->next(); }
  int64_t loss_terms_ahead(int64_t count) const override {
    int64_t rows = 0;
    data::LoaderCursor at = loader_->cursor();
    for (int64_t i = 0; i < count; ++i, at = loader_->advance(at)) rows += loader_->batch_rows(at);
    return rows;
  }
  data::LoaderCursor cursor() const override { return loader_->cursor(); }
  void seek(data::LoaderCursor at) override { loader_->seek(at); }
  int64_t batches_per_epoch() const override { return loader_->batches_per_epoch(); }

  bool has_evaluation() const override { return data_.eval.size() > 0; }
  std::map<std::string, double> evaluate(nn::Module& model) override {
    if (notes_.regression)
      return train::evaluate_regression(model, data_.eval, eval_batch_, device_, *notes_.regression, share_);
    ClassifierEvaluation result = train::evaluate(model, data_.eval, eval_batch_, device_, outputs_, share_);
    confusion_ = ConfusionMatrix{.classes = class_names(), .counts = std::move(result.confusion)};
    return result.metrics;
  }
  std::optional<ConfusionMatrix> confusion() const override { return confusion_; }
  std::string missing_evaluation() const override {
    return notes_.missing_evaluation.empty() ? DataSource::missing_evaluation() : notes_.missing_evaluation;
  }
  std::string encoding() const override { return notes_.encoding; }
  std::filesystem::path tokenizer() const override { return notes_.tokenizer; }
  void check_model(const nn::Module& model) const override {
    if (notes_.check_model) notes_.check_model(model);
  }
  std::string row_noun() const override { return "examples"; }

 private:
  // The names of the model's outputs: the data's classes, then indices for outputs beyond them.
  std::vector<std::string> class_names() const {
    std::vector<std::string> names = notes_.classes;
    names.resize(static_cast<size_t>(std::max<int64_t>(outputs_, static_cast<int64_t>(names.size()))));
    for (size_t i = notes_.classes.size(); i < names.size(); ++i) names[i] = std::to_string(i);
    return names;
  }
  recipe::RunData data_;
  Device device_;
  EvalShare share_;
  int64_t eval_batch_;
  int64_t outputs_;  // a classifier's classes (the model's outputs)
  SampleSourceNotes notes_;
  std::unique_ptr<data::DataLoader> loader_;
  std::optional<ConfusionMatrix> confusion_;
};

}  // namespace

std::string count_of(int64_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string class_list(const std::vector<std::string>& classes) {
  std::string out;
  for (size_t i = 0; i < classes.size() && i < 20; ++i) out += (i ? ", " : "") + classes[i];
  return classes.size() > 20 ? out + ", ..." : out;
}

int64_t classifier_outputs(const RecipeSpec& spec) {
  if (spec.classifies_text()) return spec.model.num_classes;
  return std::visit(
      [](const auto& config) -> int64_t {
        if constexpr (requires { config.num_classes; }) return config.num_classes;
        else return 0;
      },
      spec.model.config);
}

Shape classifier_input_shape(const RecipeSpec& spec) {
  return std::visit(
      [](const auto& config) -> Shape {
        if constexpr (requires { config.input_shape; }) return config.input_shape;
        else return {};
      },
      spec.model.config);
}

std::unique_ptr<DataSource> open_samples(recipe::RunData data, const RecipeSpec& spec, Device device,
                                         const EvalShare& share, SampleSourceNotes notes,
                                         data::BatchTransform train_transform) {
  return std::make_unique<SampleSource>(std::move(data), spec, device, share, std::move(notes),
                                        std::move(train_transform));
}

std::unique_ptr<DataSource> open_sample_source(const RecipeSpec& spec, Device device, RunLog&, const EvalShare& share,
                                               const std::string&) {
  // Fashion-MNIST's classes, as its documentation names labels 0-9.
  SampleSourceNotes notes;
  notes.classes = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
                   "Ankle boot"};
  return open_samples(recipe::build_data(spec), spec, device, share, std::move(notes));
}

}  // namespace genesis::train
