#pragma once
// The training loop of `genesis train`: batches -> forward -> loss -> backward ->
// gradients averaged over ranks (data parallel) -> clip -> optimizer step -> schedule, with
// logging, periodic evaluation, checkpoints, clean stop on signals, and summary.json at the end.
// Under a distributed launcher (libgenesis/dist/env.h) every rank runs it: rank 0 writes the run
// directory, the others train their slice of each batch and stay quiet.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "libgenesis/data/dataset.h"
#include "libgenesis/nn/module.h"
#include "libgenesis/recipe/recipe.h"
#include "libgenesis/train/lm_metrics.h"
#include "libgenesis/train/step.h"

namespace genesis::train {

struct TrainOptions {
  std::filesystem::path run_dir;  // empty: <run.out_dir>/<run.name>
  bool resume = false;            // continue from run_dir/checkpoints/latest
  bool overwrite = false;         // clear an existing run directory first
  bool quiet = false;             // no step lines on stderr
};

// Runs the recipe: a classifier on samples, or a language model (data.name = "tokens") on
// windows of its token shards, preparing them first when missing (recipe::prepare_token_data). Returns the process exit code: 0 when the run completed, 130 when it
// was stopped by SIGINT/SIGTERM (after writing a checkpoint). Throws UsageError for a
// run directory that cannot be used as asked and genesis errors for everything else.
int run_training(const RecipeSpec& spec, const TrainOptions& options);

// A classifier's figures on an evaluation set: "loss" (mean cross-entropy), "accuracy" and
// "macro_f1" (the mean F1 over the classes that occur among the targets or the predictions, as
// scikit-learn's f1_score(average="macro")), and the confusion matrix: confusion[t][p] counts
// the examples of class t predicted as p, over the model's `classes` outputs.
struct ClassifierEvaluation {
  std::map<std::string, double> metrics;
  std::vector<std::vector<int64_t>> confusion;
};
// `model` on `dataset` in eval mode, no grad. With a share over ranks, each evaluates its
// batches and every rank returns the totals.
ClassifierEvaluation evaluate(nn::Module& model, const data::Dataset& dataset, int64_t batch_size, Device device,
                              int64_t classes, const EvalShare& share = {});

// A regression's label scale: the model predicts (label - mean) / std, trained with `loss`.
struct RegressionScale {
  double mean = 0.0;
  double std = 1.0;
  SampleLoss loss = SampleLoss::mse;
};
// A regression model's metrics on `dataset` (targets [N, 1], standardized): "loss", the training
// loss on the standardized label; "mae" and "rmse" in the label's own units; "r2", one less the
// residual sum of squares over the total about the set's own mean (scikit-learn's r2_score).
std::map<std::string, double> evaluate_regression(nn::Module& model, const data::Dataset& dataset, int64_t batch_size,
                                                  Device device, const RegressionScale& scale,
                                                  const EvalShare& share = {});

// Loads the checkpoint, evaluates on the recipe's eval split (or `split` when given:
// "test" or "val") and returns the metrics: loss and accuracy for a classifier (a regression:
// loss, mae, rmse and r2); loss,
// perplexity, bits_per_byte, tokens and bytes on val.bin for a language model (whose shards
// are prepared first when missing).
// Progress (a bar on a terminal, a line every 10 s otherwise) and notes go to stderr unless quiet.
// A LoRA run's checkpoint is refused (UsageError) when its base has changed since training.
// `adapter`, when given, is a PEFT adapter directory applied to the loaded model (UsageError for
// an adapter that does not fit it, or for a LoRA run's checkpoint, which has its adapters).
std::map<std::string, double> run_evaluation(const RecipeSpec& spec, const std::filesystem::path& checkpoint,
                                             const std::string& split, bool quiet = false,
                                             const std::filesystem::path& adapter = {});

// What `--nproc-per-node N` checks before it starts the ranks, so that a bad combination is one
// error line rather than one per rank: no other process holds run_dir, the device resolves,
// dist.backend can carry it, and a CUDA run has a GPU for every rank. Throws UsageError.
void check_local_launch(const RecipeSpec& spec, int nproc, const std::filesystem::path& run_dir);

// The run directory a recipe writes to unless --out says otherwise.
std::filesystem::path default_run_dir(const RecipeSpec& spec);

}  // namespace genesis::train
