#pragma once
// Samples held in memory (a classifier's training and evaluation sets) as a DataSource, through
// the DataLoader: Fashion-MNIST's source, and what the sources that make such sets from their own
// files (csv_source.cpp) return.
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libgenesis/recipe/build.h"
#include "libgenesis/train/data_source.h"
#include "libgenesis/train/trainer.h"

namespace genesis::train {

struct SampleSourceNotes {
  std::string missing_evaluation;  // DataSource::missing_evaluation(); empty: the generic sentence
  std::string encoding;            // DataSource::encoding()
  // A regression's targets: evaluated by evaluate_regression; unset: a classifier's (evaluate).
  std::optional<RegressionScale> regression = std::nullopt;
  // A classifier's class names, in class order (the confusion matrix's); empty: their indices.
  std::vector<std::string> classes = {};
  // Samples of token ids: DataSource::tokenizer() and check_model().
  std::filesystem::path tokenizer = {};
  std::function<void(const nn::Module&)> check_model = {};
};

// For the notes of the sources that make samples from their files: "3 rows", "1 row"; the first
// 20 class names, comma-separated.
std::string count_of(int64_t n, const char* noun);
std::string class_list(const std::vector<std::string>& classes);

// A classifier's (mlp, cnn, a language model's head on text) model.num_classes, and an mlp's or cnn's
// model.input_shape; 0 and empty for other models.
int64_t classifier_outputs(const RecipeSpec& spec);
Shape classifier_input_shape(const RecipeSpec& spec);

// `train_transform` changes each training batch (an image folder's augmentation); evaluation
// reads the evaluation set as it is.
std::unique_ptr<DataSource> open_samples(recipe::RunData data, const RecipeSpec& spec, Device device,
                                         const EvalShare& share, SampleSourceNotes notes = {},
                                         data::BatchTransform train_transform = {});

}  // namespace genesis::train
