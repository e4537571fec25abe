// `genesis eval`: a checkpoint (or a Hugging Face directory) evaluated on a recipe's data.
#include <cmath>
#include <cstdio>
#include <functional>

#include <nlohmann/json.hpp>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/core/interrupt.h"
#include "libgenesis/core/threads.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/peft.h"
#include "libgenesis/models/causal_lm.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/index.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/loss.h"
#include "libgenesis/ops/reduce.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/checkpoint.h"
#include "libgenesis/train/data_source.h"
#include "libgenesis/train/run_dir.h"
#include "libgenesis/train/run_log.h"
#include "libgenesis/train/trainer.h"

namespace genesis::train {

namespace fs = std::filesystem;

namespace {

// The mean F1 over the classes that occur among the targets or the predictions.
double macro_f1(const std::vector<std::vector<int64_t>>& confusion) {
  const size_t n = confusion.size();
  double total = 0.0;
  int64_t counted = 0;
  for (size_t c = 0; c < n; ++c) {
    int64_t predicted = 0, actual = 0;
    for (size_t k = 0; k < n; ++k) {
      predicted += confusion[k][c];
      actual += confusion[c][k];
    }
    if (predicted + actual == 0) continue;
    total += 2.0 * static_cast<double>(confusion[c][c]) / static_cast<double>(predicted + actual);
    ++counted;
  }
  return counted > 0 ? total / static_cast<double>(counted) : 0.0;
}

// Runs `step` on each of this rank's batches of `dataset` in eval mode without grad (the model's
// mode restored after), reporting progress to the share.
void for_each_batch(nn::Module& model, const data::Dataset& dataset, int64_t batch_size, const EvalShare& share,
                    const std::function<void(const data::Batch&)>& step) {
  GENESIS_CHECK(dataset.size() > 0, ValueError, "evaluate: the evaluation set is empty");
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  data::DataLoader loader(dataset, {.batch_size = batch_size, .shuffle = false, .prefetch = 0});
  for (int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
    if (!share.mine(b)) continue;
    check_interrupt("evaluating");
    if (share.world > 1) loader.seek({0, b});  // no prefetch: only positions the loader
    step(loader.next());
    share.report(b + 1, loader.batches_per_epoch());
  }
  model.train(was_training);
}

}  // namespace

ClassifierEvaluation evaluate(nn::Module& model, const data::Dataset& dataset, int64_t batch_size, Device device,
                              int64_t classes, const EvalShare& share) {
  GENESIS_CHECK(classes > 0, ValueError, "evaluate: a classifier has at least one output");
  Tensor loss_sum = scalar_tensor(0.0, {.dtype = DType::f64, .device = device});
  // Each example's target and prediction, kept on the device and read once at the end.
  std::vector<Tensor> targets, predictions;
  for_each_batch(model, dataset, batch_size, share, [&](const data::Batch& batch) {
    Tensor x = batch.inputs.to(device), y = batch.targets.to(device);
    Tensor logits = model(x);
    GENESIS_CHECK(logits.dim() == 2 && logits.size(1) == classes, ShapeError, "evaluate: the model gives ",
                  logits.shape(), " for ", classes, " classes");
    loss_sum = add(loss_sum, cross_entropy(logits, y, {.reduction = Reduction::sum}).to(DType::f64));
    targets.push_back(y);
    predictions.push_back(argmax(logits, -1));
  });
  // The sums the ranks add: the loss, then the confusion counts row by row.
  const auto width = static_cast<size_t>(classes);
  std::vector<double> sums(1 + width * width, 0.0);
  sums[0] = loss_sum.item();
  if (!targets.empty()) {
    const Tensor t = cat(targets, 0).to(kCPU).to(DType::i64), p = cat(predictions, 0).to(kCPU).to(DType::i64);
    for (int64_t i = 0; i < t.numel(); ++i) {
      const int64_t truth = t.data<int64_t>()[i], guess = p.data<int64_t>()[i];
      GENESIS_CHECK(truth >= 0 && truth < classes, ValueError, "evaluate: target ", truth, " is not one of the ",
                    classes, " classes");
      sums[1 + static_cast<size_t>(truth) * width + static_cast<size_t>(guess)] += 1.0;
    }
  }
  share.reduce(sums);
  ClassifierEvaluation out;
  out.confusion.assign(width, std::vector<int64_t>(width, 0));
  int64_t correct = 0;
  for (size_t t = 0; t < width; ++t)
    for (size_t p = 0; p < width; ++p) {
      out.confusion[t][p] = static_cast<int64_t>(sums[1 + t * width + p]);
      if (t == p) correct += out.confusion[t][p];
    }
  const auto n = static_cast<double>(dataset.size());
  out.metrics = {{"loss", sums[0] / n},
                 {"accuracy", static_cast<double>(correct) / n},
                 {"macro_f1", macro_f1(out.confusion)}};
  return out;
}

std::map<std::string, double> evaluate_regression(nn::Module& model, const data::Dataset& dataset, int64_t batch_size,
                                                  Device device, const RegressionScale& scale,
                                                  const EvalShare& share) {
  // Sums in f64 on the device, of the standardized values: the loss, |error|, error^2, y, y^2.
  Tensor sums = zeros({5}, {.dtype = DType::f64, .device = device});
  for_each_batch(model, dataset, batch_size, share, [&](const data::Batch& batch) {
    const Tensor y = batch.targets.to(device).to(DType::f64);
    const Tensor outputs = model(batch.inputs.to(device));
    const Tensor loss = training_loss(outputs, batch.targets.to(device), Reduction::sum, scale.loss);
    const Tensor error = sub(outputs.to(DType::f64), y);
    sums = add(sums, stack({loss.to(DType::f64), sum(abs(error)), sum(mul(error, error)), sum(y), sum(mul(y, y))}, 0));
  });
  const Tensor host = sums.to(kCPU);
  std::vector<double> totals(host.data<double>(), host.data<double>() + 5);
  share.reduce(totals);
  const auto n = static_cast<double>(dataset.size());
  const double squares_about_mean = totals[4] - totals[3] * totals[3] / n;
  return {{"loss", totals[0] / n},
          {"mae", totals[1] / n * scale.std},
          {"rmse", std::sqrt(totals[2] / n) * scale.std},
          // A constant label leaves nothing to explain: scikit-learn's 1 for a perfect fit, else 0.
          {"r2", squares_about_mean > 0.0 ? 1.0 - totals[2] / squares_about_mean : totals[2] == 0.0 ? 1.0 : 0.0}};
}

// What `genesis eval` runs with: the checkpoint's own recipe defines the model and the data's
// preprocessing; the given recipe says where the data lives, on what device and how to
// evaluate. Keys of the given recipe that the checkpoint's overrules are named on stderr.
RecipeSpec evaluation_recipe(const RecipeSpec& given, const fs::path& checkpoint) {
  const std::optional<RecipeSpec> trained = checkpoint_recipe(checkpoint);
  if (!trained) return given;
  RecipeSpec s = *trained;
  s.run.device = given.run.device;
  s.run.threads = given.run.threads;
  s.run.allow_tf32 = given.run.allow_tf32;
  s.eval = given.eval;
  s.amp = given.amp;
  s.data.path = given.data.path;
  s.data.shards = given.data.shards;
  s.data.tokenizer = given.data.tokenizer;
  s.data.source = given.data.source;
  s.data.fetch = given.data.fetch;
  s.data.prefetch = given.data.prefetch;
  for (const RecipeChange& c : recipe_changes(s, given)) {
    if (!c.key.starts_with("model.") && !c.key.starts_with("data.")) continue;
    std::fprintf(stderr, "warning: eval ignores %s = %s: the checkpoint was trained with %s\n", c.key.c_str(),
                 c.after.c_str(), c.before.c_str());
  }
  return s;
}

namespace {

// A Hugging Face model directory (config.json + weights, written by transformers or `genesis
// convert --to hf`), as opposed to a genesis checkpoint (trainer.json / recipe.toml beside it).
bool is_hf_directory(const fs::path& path) {
  const auto file = [&](const char* name) { return fs::is_regular_file(path / name); };
  return fs::is_directory(path) && file("config.json") && !file("trainer.json") && !file("recipe.toml") &&
         (file("model.safetensors") || file("model.safetensors.index.json"));
}

// `genesis eval` of a Hugging Face directory: the directory is the model (its config.json the
// architecture, read as model.init_from), the recipe the data and how to evaluate it.
RecipeSpec hf_evaluation_recipe(const RecipeSpec& given, const fs::path& dir) {
  GENESIS_CHECK(language_model_data(given.data.name), UsageError, "eval: ", dir.string(),
                " is a Hugging Face language model; give a recipe with language-model data (data.name = \"tokens\": "
                "data.shards, data.seq_len) to evaluate it on (this one has data.name = \"", given.data.name, "\")");
  // The directory's config.json decides the model: its family, with that family's defaults
  // (init_from fills the sizes).
  const nlohmann::json config =
      nlohmann::json::parse(io::read_file(dir / "config.json", io::kMaxConfigFileBytes), nullptr, false);
  const bool typed = config.is_object() && config.contains("model_type") && config["model_type"].is_string();
  RecipeSpec s = given;
  s.model.name = typed ? config["model_type"].get<std::string>() : "";
  GENESIS_CHECK(s.model.is_language_model(), UsageError, "eval: ", (dir / "config.json").string(), " has model_type ",
                typed ? config["model_type"].dump() : std::string("(none)"), "; genesis reads gpt2, llama, qwen2 and qwen3");
  s.model.config = RecipeSpec::Model::default_config(s.model.name);
  s.model.init_from = dir.string();
  // The directory is the model as it is: the recipe (a LoRA run's own, say) lends its data and
  // evaluation settings, never its adapters or their NF4 base (--adapter brings one).
  s.lora = RecipeSpec::Lora();
  s.lora.base_quant = "none";
  s.model.adapter.clear();
  return s;
}

}  // namespace

std::map<std::string, double> run_evaluation(const RecipeSpec& spec, const fs::path& checkpoint,
                                             const std::string& split, bool quiet, const fs::path& adapter) {
  const bool hf = is_hf_directory(checkpoint);
  const std::optional<BaseModelRef> base = hf ? std::nullopt : checkpoint_base(checkpoint);
  if (base) require_base_unchanged(*base, checkpoint);  // before its weights load as the model's
  GENESIS_CHECK(adapter.empty() || !base, UsageError, "eval: --checkpoint ", checkpoint.string(),
                " is a LoRA run, which brings its own adapters; leave out --adapter ", adapter.string(),
                ", or evaluate that adapter on a base model: --checkpoint ", base ? base->dir : std::string(),
                " --adapter ", adapter.string());
  RecipeSpec s = hf ? hf_evaluation_recipe(spec, checkpoint) : evaluation_recipe(spec, checkpoint);
  if (!split.empty()) s.eval.split = split;
  GENESIS_CHECK(s.eval.split != "val" || s.data.val_fraction > 0.0 || !s.data.val_path.empty(), UsageError,
                "--split val needs data.val_fraction > 0 (sft: or data.val_path) in the recipe");
  set_allow_tf32(s.run.allow_tf32);
  Device device = recipe::resolve_device(s.run.device);
  configure_threads(s.run.threads, {.measure_load = device.is_cpu()});
  RunLog log("", quiet);
  EvalShare share;
  share.progress = [&log](int64_t done, int64_t total) { log.progress("evaluating", done, total); };
  const bool language_model = language_model_data(s.data.name);
  GENESIS_CHECK(!language_model || s.eval.split == "val", UsageError,
                "a language model is evaluated on its validation data: use --split val");
  std::unique_ptr<DataSource> data =
      open_data_source(s, device, log, share, hf ? std::string() : checkpoint_data_encoding(checkpoint));
  GENESIS_CHECK(data->has_evaluation(), UsageError, "eval: ", data->missing_evaluation());
  std::shared_ptr<nn::Module> model = recipe::build_model(s, device);  // with init_from: its weights too
  if (!hf) load_checkpoint(checkpoint, *model, nullptr);
  if (!adapter.empty()) {
    try {
      io::apply_peft_adapter(*model, io::read_peft_adapter(adapter));
    } catch (const ValueError& e) {
      GENESIS_THROW(UsageError, "eval: --adapter ", adapter.string(), ": ", e.what());
    }
  }
  data->check_model(*model);
  AutocastGuard autocast(recipe::amp_dtype(s));
  return data->evaluate(*model);
}

}  // namespace genesis::train
