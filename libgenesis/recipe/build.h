#pragma once
// Builders: turn a validated RecipeSpec into the objects a run needs. Nothing below this
// layer reads recipes; the trainer receives what these functions return.
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

#include "libgenesis/amp/grad_scaler.h"
#include "libgenesis/data/dataset.h"
#include "libgenesis/nn/lora.h"
#include "libgenesis/nn/module.h"
#include "libgenesis/optim/lr_schedule.h"
#include "libgenesis/optim/optimizer.h"
#include "libgenesis/recipe/recipe.h"

namespace genesis::recipe {

// "cpu", "cuda", "cuda:N"; "auto" picks CUDA when a GPU is present.
Device resolve_device(const std::string& requested);

// The model on `device`, with the modules amp.keep_f32 names kept out of autocast and the
// parameters training.freeze names frozen (a pattern that matches nothing is a RecipeError).
std::shared_ptr<nn::Module> build_model(const RecipeSpec& spec, Device device);

// A language-model recipe's config.json (JSON text): model.init_from's, else the recipe's [model]
// numbers with the unset ones (0) left to the model type's defaults. Reads no weights.
std::string language_model_config_json(const RecipeSpec& spec);

// The dtype model.dtype keeps the frozen parameters in ("auto": a LoRA base in amp.dtype when
// autocast runs in bf16/fp16, the precision its products take anyway; f32 otherwise).
DType frozen_dtype(const RecipeSpec& spec);
// [lora] as the adapters' options.
nn::LoraOptions lora_options(const RecipeSpec& spec);

// Refuses (RecipeError) a model.init_from that is no model directory, or whose config.json is
// of another family than model.name: the directory would silently decide the architecture.
void check_init_from(const RecipeSpec& spec);

// Refuses (RecipeError) a classifier that cannot take the samples of data.name: a
// model.input_shape other than theirs (mlp, which flattens them, takes any shape of as many
// values) or a model.num_classes below the data's classes. It reads no data: a run calls it
// before its run directory is made, where the mismatch would otherwise be an op's shape error
// at the first step.
void check_classifier_data(const RecipeSpec& spec);

// The autocast dtype of amp.dtype: bf16 or f16; nullopt for f32.
std::optional<DType> amp_dtype(const RecipeSpec& spec);
// Refuses (RecipeError) an amp.dtype the device cannot run: fp16 on the CPU, which has no fp16
// kernels (bf16 runs there). Call it once the device is resolved, before anything starts.
void check_amp_device(const RecipeSpec& spec, Device device);
// The loss scaler of amp.dtype = "fp16" (dynamic, or the fixed amp.loss_scale); null otherwise.
std::unique_ptr<amp::GradScaler> build_grad_scaler(const RecipeSpec& spec, Device device);

// Two parameter groups: names containing any optimizer.no_decay pattern get weight
// decay 0, the rest optimizer.weight_decay. Empty groups are dropped.
std::vector<ParamGroup> optimizer_groups(const RecipeSpec& spec, const nn::Module& model);
// The recipe's optimizer over `groups` (ZeRO-1 passes them cut to its rank's pieces).
std::unique_ptr<Optimizer> build_optimizer(const RecipeSpec& spec, std::vector<ParamGroup> groups);
std::unique_ptr<Optimizer> build_optimizer(const RecipeSpec& spec, const nn::Module& model);

LrSchedule build_schedule(const RecipeSpec& spec, int64_t total_steps);

struct RunData {
  data::Dataset train;
  data::Dataset eval;  // the split named by eval.split ("test", or "val" carved out of train)
};
// Loads, splits and normalizes (statistics of the training split, applied to both).
RunData build_data(const RecipeSpec& spec);

// The token shards of a language-model recipe (data.name = "tokens").
struct TokenData {
  std::filesystem::path train;      // data.shards/train.bin
  std::filesystem::path val;        // data.shards/val.bin; empty when the directory has none
  std::filesystem::path tokenizer;  // data.tokenizer
};
// Finds the recipe's shards, preparing them when train.bin is missing: data/fetch.sh (run from
// the working directory) brings data.fetch when a source or the tokenizer is missing, then
// data.source is tokenized into data.shards, with a source.json saying what from. Shards whose
// source.json no longer matches data.source, data.tokenizer or data.val_fraction are prepared
// again (a note says what changed); shards without one are used as they are. The shards are
// replaced by renames, so a run reading the old ones meanwhile is unaffected; a second
// preparation of the directory at the same time is refused (UsageError).
// `progress` gets one line per stage (a change, fetching, tokenizing N documents, the shards
// written); `documents`, when given, the documents tokenized so far out of all after each one
// (for a progress bar).
// Throws UsageError naming the commands to run by hand when the data cannot be prepared here
// (no npm, no network, no sources).
TokenData prepare_token_data(const RecipeSpec& spec, const std::function<void(const std::string&)>& progress,
                             const std::function<void(int64_t done, int64_t total)>& documents = {});

// eval.batch_size, or when unset 1000 samples for a classifier and training.batch_size rows for a
// language model.
int64_t eval_batch_size(const RecipeSpec& spec);

// Runs data/fetch.sh with the recipe's data.fetch targets (from the working directory) because
// missing() says some input is absent; UsageError naming `by_hand`, the commands that would
// prepare the data, when it cannot run or leaves missing() true.
void fetch_data(const RecipeSpec& spec, const std::function<bool()>& missing, const std::string& by_hand,
                const std::function<void(const std::string&)>& progress);
// fetch_data when data.fetch names targets and missing() is true, with `bash data/fetch.sh
// TARGETS` as the commands by hand (the data sources whose files need no further preparation).
void fetch_missing_data(const RecipeSpec& spec, const std::function<bool()>& missing,
                        const std::function<void(const std::string&)>& progress);

// data.tokenizer's default (the GPT-2 vocabulary in the data root), expanded as recipe values are.
std::string default_tokenizer();

// Optimizer steps of the run: training.steps, or epochs * ceil(batches / grad_accum_steps).
int64_t total_steps(const RecipeSpec& spec, int64_t batches_per_epoch);

}  // namespace genesis::recipe
