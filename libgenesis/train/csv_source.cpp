// A table of comma-separated values as a classifier's samples (data.name = "csv";
// train/data_source.h): data/csv_table.h reads and encodes it, with the statistics of the
// training rows (or a checkpoint's, so that evaluation encodes as training did), and the samples
// go through the DataLoader as Fashion-MNIST's do (train/sample_source.h).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/data/csv_table.h"
#include "libgenesis/train/sample_source.h"

namespace genesis::train {

namespace {

// The encoded inputs must be what the model takes: checked before the model is built, where a
// mismatch would otherwise be a matrix product's shape error at the first step.
void check_classifier(const RecipeSpec& spec, const data::CsvEncoding& encoding) {
  const auto* mlp = std::get_if<models::MlpConfig>(&spec.model.config);
  GENESIS_CHECK(mlp != nullptr, RecipeError, "data.name = \"csv\" gives each row as a vector of inputs, which model ",
                spec.model.name, " does not take; use model.name = \"mlp\"");
  int64_t inputs = 1;
  for (const int64_t d : mlp->input_shape) inputs *= d;
  const auto classes = static_cast<int64_t>(encoding.classes.size());
  GENESIS_CHECK(inputs == encoding.width(), RecipeError, "model.input_shape holds ", inputs,
                " values, but the rows of ", spec.data.path, " encode to ", encoding.width(),
                " inputs; set model.input_shape = [", encoding.width(), "]");
  GENESIS_CHECK(!encoding.target || mlp->num_classes == 1, RecipeError, "model.num_classes = ", mlp->num_classes,
                ", but a regression (data.task = \"regression\") predicts one number, column '", spec.data.label,
                "': set model.num_classes = 1");
  GENESIS_CHECK(encoding.target || mlp->num_classes >= classes, RecipeError, "model.num_classes = ", mlp->num_classes,
                " is fewer than the ", classes, " classes of column '", spec.data.label, "' in ", spec.data.path,
                "; set model.num_classes = ", classes);
}

// What the rows' label gives: the classes, or the number a regression predicts.
std::string predicted(const data::CsvEncoding& encoding, const std::string& label) {
  if (const std::optional<data::CsvTarget>& t = encoding.target) {
    char scale[96];
    std::snprintf(scale, sizeof scale, " (mean %.6g, standard deviation %.6g)", t->mean, t->std);
    return "regression of '" + t->name + "'" + (encoding.standardize ? std::string(scale) : std::string());
  }
  return std::to_string(encoding.classes.size()) + (encoding.classes.size() == 1 ? " class" : " classes") + " of '" +
         label + "': " + class_list(encoding.classes);
}

}  // namespace

std::unique_ptr<DataSource> open_csv_source(const RecipeSpec& spec, Device device, RunLog& log, const EvalShare& share,
                                            const std::string& trained_encoding) {
  const RecipeSpec::Data& d = spec.data;
  data::CsvOptions options{.label = d.label,
                           .features = d.features,
                           .categorical = d.categorical,
                           .impute = d.impute == "mean",
                           .standardize = d.normalize,
                           .regression = d.task == "regression"};
  const data::CsvTable table = data::read_csv_table(d.path, options);
  // The other files are read as the training file's columns, in its order.
  options.features = table.features;
  std::vector<int64_t> train_rows = data::all_csv_rows(table), val_rows;
  if (d.val_path.empty() && d.val_fraction > 0.0)
    std::tie(train_rows, val_rows) =
        data::validation_rows(table.rows(), d.val_fraction, static_cast<uint64_t>(spec.run.seed));
  const data::CsvEncoding encoding = trained_encoding.empty()
                                         ? data::fit_csv_encoding(table, train_rows, options)
                                         : data::parse_csv_encoding(trained_encoding, "the checkpoint's data.json");
  GENESIS_CHECK(encoding.target.has_value() == options.regression, RecipeError,
                "the checkpoint's data.json encodes ", encoding.target ? "a regression" : "a classification",
                " but this recipe has data.task = \"", d.task, "\"; evaluate with the checkpoint's own recipe");
  check_classifier(spec, encoding);

  recipe::RunData samples;
  samples.train = data::encode_csv(table, train_rows, encoding);
  std::string held_out = "no evaluation set";
  SampleSourceNotes notes{
      .missing_evaluation = "", .encoding = data::csv_encoding_json(encoding), .classes = encoding.classes};
  if (const std::optional<data::CsvTarget>& t = encoding.target)
    notes.regression = RegressionScale{.mean = t->mean,
                                       .std = t->std,
                                       .loss = d.regression_loss == "l1" ? SampleLoss::l1 : SampleLoss::mse};
  if (spec.eval.split == "val" && !d.val_path.empty()) {
    const data::CsvTable val = data::read_csv_table(d.val_path, options);
    samples.eval = data::encode_csv(val, data::all_csv_rows(val), encoding);
    held_out = count_of(val.rows(), "validation row") + " from " + d.val_path;
  } else if (spec.eval.split == "val") {
    samples.eval = data::encode_csv(table, val_rows, encoding);
    held_out = count_of(static_cast<int64_t>(val_rows.size()), "validation row") + " (data.val_fraction)";
  } else if (!d.test_path.empty()) {
    const data::CsvTable test = data::read_csv_table(d.test_path, options);
    samples.eval = data::encode_csv(test, data::all_csv_rows(test), encoding);
    held_out = count_of(test.rows(), "test row") + " from " + d.test_path;
  } else {
    notes.missing_evaluation =
        "data.name = \"csv\" evaluates eval.split = \"test\" on data.test_path, which is not set; set it, or "
        "eval.split = \"val\" with data.val_path or data.val_fraction";
  }
  int64_t categorical = 0;
  for (const data::CsvFeature& f : encoding.features) categorical += f.categorical ? 1 : 0;
  const auto columns = static_cast<int64_t>(encoding.features.size());
  const std::string statistics = trained_encoding.empty() ? "" : " (encoded with the checkpoint's statistics)";
  log.note(d.path + statistics + ": " + count_of(static_cast<int64_t>(train_rows.size()), "training row") + ", " +
           held_out + "; " + count_of(encoding.width(), "input") + " from " + std::to_string(columns - categorical) +
           " numeric and " + std::to_string(categorical) + " categorical (one-hot) columns; " +
           predicted(encoding, d.label));
  return open_samples(std::move(samples), spec, device, share, std::move(notes));
}

}  // namespace genesis::train
