#pragma once
// A training checkpoint is a directory (checkpoints/step_00001200/) written atomically:
//   model.safetensors      parameters and buffers, Hugging Face-style names; a run on a frozen
//                          base (LoRA) holds its trained parameters only, and trainer.json
//                          names the base: its directory and fingerprint
//   optimizer.safetensors  per-parameter optimizer state ("<param>.exp_avg", "<param>.step")
//   trainer.json           step, data cursor, RNG state, optimizer step count, world size, and
//                          for fp16 runs the loss scaler (scale, growth tracker, skipped steps)
//   recipe.toml            the resolved recipe of the run
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <optional>

#include "libgenesis/amp/grad_scaler.h"
#include "libgenesis/core/generator.h"
#include "libgenesis/data/loader.h"
#include "libgenesis/nn/module.h"
#include "libgenesis/optim/optimizer.h"

namespace genesis::train {

// The frozen model a run's trained parameters (LoRA adapters) apply to.
struct BaseModelRef {
  std::string dir;          // model.init_from as the recipe gave it
  std::string fingerprint;  // models::model_dir_fingerprint of it
  bool operator==(const BaseModelRef&) const = default;
};

struct TrainerState {
  int64_t step = 0;               // optimizer steps completed
  data::LoaderCursor cursor;      // the next training batch
  GeneratorState rng;             // default generator (dropout)
  int64_t optimizer_steps = 0;
  int world_size = 1;
  int64_t cpu_threads = 0;  // the CPU threads the run chose (reductions split by them); 0 = unknown
  std::string optimizer_name;
  std::string scheduler_name;
  std::optional<amp::GradScalerState> grad_scaler;  // fp16 runs
  // The logging window open at the checkpoint: its steps and their summed loss, so that a
  // resumed run logs the same window means as an uninterrupted one.
  int64_t log_window_steps = 0;
  double log_window_loss = 0.0;
  // Set for a run that trains adapters on a frozen base: its checkpoints hold the trained
  // parameters only.
  std::optional<BaseModelRef> base;
};

// Writes checkpoints_dir/step_<step>/ atomically, points `latest` at it and keeps the newest
// keep_last checkpoints. Returns the checkpoint's directory. Language models also get their
// Hugging Face config.json and the files of `tokenizer` (a tokenizer.json, or a directory with
// tokenizer.json or GPT-2's encoder.json + vocab.bpe), so the checkpoint is self-contained for
// `genesis generate` and `genesis convert --to hf`. `data_encoding`, the data's
// DataSource::encoding(), is kept as data.json when given.
std::filesystem::path save_checkpoint(const std::filesystem::path& checkpoints_dir, const nn::Module& model,
                                      const Optimizer& optimizer, const TrainerState& state,
                                      const std::string& recipe_toml, size_t keep_last,
                                      const std::filesystem::path& tokenizer = {},
                                      const std::string& data_encoding = {});
// What a checkpoint of `model` holds in model.safetensors: its state_dict, or for a run on a
// frozen base (state.base) its trained parameters alone.
std::vector<NamedTensor> checkpoint_tensors(const nn::Module& model, const TrainerState& state);
// The same with the model's tensors (checkpoint_tensors' list, values possibly on the host) and
// the optimizer's state given as lists (ZeRO gathers them from every rank): `optimizer_name` and
// state() as Optimizer::name() and Optimizer::state() would give them. `model` gives the config.
std::filesystem::path save_checkpoint(const std::filesystem::path& checkpoints_dir, const nn::Module& model,
                                      const std::vector<NamedTensor>& model_tensors, std::string_view optimizer_name,
                                      const std::vector<NamedTensor>& optimizer_state, const TrainerState& state,
                                      const std::string& recipe_toml, size_t keep_last,
                                      const std::filesystem::path& tokenizer = {},
                                      const std::string& data_encoding = {});

// The data.json of the checkpoint at `path` (as load_checkpoint takes it): what its data was
// encoded with; empty when it has none.
std::string checkpoint_data_encoding(const std::filesystem::path& path);

// The state in trainer.json's text, every field checked for type and range; FormatError naming
// `file` and the field otherwise.
TrainerState read_trainer_json(std::string_view text, const std::string& file);

// Restores model (strict: names and shapes must match; the trained parameters alone when the
// checkpoint names a base, which the caller has loaded and compares with state.base) and, when
// given, the optimizer.
// `path` may be a checkpoint directory, a `latest` pointer or a checkpoints directory.
// `load_optimizer`, when given, takes the checkpoint's whole optimizer state in place of
// Optimizer::load_state (ZeRO-1 cuts it to its rank's pieces).
using OptimizerStateLoader =
    std::function<void(Optimizer& optimizer, const std::vector<NamedTensor>& state, int64_t step_count)>;
TrainerState load_checkpoint(const std::filesystem::path& path, nn::Module& model, Optimizer* optimizer,
                             const OptimizerStateLoader& load_optimizer = {});

// The base that the adapters of the checkpoint at `path` (as load_checkpoint takes it) were trained
// on: trainer.json's "base"; nullopt for a checkpoint of a whole model.
std::optional<BaseModelRef> checkpoint_base(const std::filesystem::path& path);

// Adapters apply to the weights they were trained on: UsageError naming `checkpoint` unless
// base.dir still exists and has base.fingerprint.
void require_base_unchanged(const BaseModelRef& base, const std::filesystem::path& checkpoint);

}  // namespace genesis::train
