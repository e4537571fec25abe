#include "libgenesis/train/checkpoint.h"

#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "libgenesis/core/error.h"
#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/json_text.h"
#include "libgenesis/io/safetensors.h"
#include "libgenesis/models/causal_lm.h"
#include "libgenesis/models/hf.h"

namespace genesis::train {

namespace {

io::NamedTensors to_pairs(const std::vector<NamedTensor>& tensors) {
  io::NamedTensors out;
  for (const NamedTensor& t : tensors) out.emplace_back(t.name, t.tensor);
  return out;
}

std::vector<NamedTensor> read_all(const io::SafetensorsFile& file) {
  std::vector<NamedTensor> out;
  for (const std::string& name : file.names()) out.push_back({name, file.tensor(name)});
  return out;
}

// The tokenizer files of `tokenizer` (see save_checkpoint) copied into dir.
void copy_tokenizer_files(const std::filesystem::path& tokenizer, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(tokenizer)) {
    io::write_file_atomic(dir / "tokenizer.json", io::read_file(tokenizer));
    return;
  }
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "encoder.json",
                           "vocab.bpe", "vocab.json", "merges.txt"}) {
    if (fs::is_regular_file(tokenizer / name)) io::write_file_atomic(dir / name, io::read_file(tokenizer / name));
  }
}

}  // namespace

std::filesystem::path save_checkpoint(const std::filesystem::path& checkpoints_dir, const nn::Module& model,
                                      const Optimizer& optimizer, const TrainerState& state,
                                      const std::string& recipe_toml, size_t keep_last,
                                      const std::filesystem::path& tokenizer, const std::string& data_encoding) {
  return save_checkpoint(checkpoints_dir, model, checkpoint_tensors(model, state), optimizer.name(), optimizer.state(),
                         state, recipe_toml, keep_last, tokenizer, data_encoding);
}

std::vector<NamedTensor> checkpoint_tensors(const nn::Module& model, const TrainerState& state) {
  return state.base ? model.named_parameters(nn::Params::trainable) : model.state_dict();
}

std::filesystem::path save_checkpoint(const std::filesystem::path& checkpoints_dir, const nn::Module& model,
                                      const std::vector<NamedTensor>& model_tensors, std::string_view optimizer_name,
                                      const std::vector<NamedTensor>& optimizer_state, const TrainerState& state,
                                      const std::string& recipe_toml, size_t keep_last,
                                      const std::filesystem::path& tokenizer, const std::string& data_encoding) {
  std::string name = io::checkpoint_name(state.step);
  io::DirectoryTransaction tx(checkpoints_dir / name, /*replace=*/true);
  if (state.base) {
    io::save_safetensors(tx.path() / "model.safetensors", to_pairs(model_tensors),
                         {{"format", "genesis"}, {"contents", "trained parameters"}});
  } else {
    io::save_safetensors(tx.path() / "model.safetensors", to_pairs(model_tensors), {{"format", "genesis"}});
  }
  io::save_safetensors(tx.path() / "optimizer.safetensors", to_pairs(optimizer_state),
                       {{"optimizer", std::string(optimizer_name)}});
  nlohmann::json trainer{{"step", state.step},
                         {"epoch", state.cursor.epoch},
                         {"batch_in_epoch", state.cursor.batch},
                         {"rng", {{"seed", state.rng.seed}, {"offset", state.rng.offset}}},
                         {"optimizer_steps", state.optimizer_steps},
                         {"optimizer", state.optimizer_name},
                         {"scheduler", state.scheduler_name},
                         {"world_size", state.world_size},
                         {"cpu_threads", state.cpu_threads},
                         {"format_version", 1}};
  if (const auto& g = state.grad_scaler) {
    trainer["grad_scaler"] = {
        {"scale", g->scale}, {"growth_tracker", g->growth_tracker}, {"skipped_steps", g->skipped_steps}};
  }
  if (state.base) trainer["base"] = {{"dir", state.base->dir}, {"fingerprint", state.base->fingerprint}};
  if (state.log_window_steps > 0 && std::isfinite(state.log_window_loss))
    trainer["log_window"] = {{"steps", state.log_window_steps}, {"loss_sum", state.log_window_loss}};
  io::write_file_atomic(tx.path() / "trainer.json", trainer.dump(2) + "\n");
  io::write_file_atomic(tx.path() / "recipe.toml", recipe_toml);
  if (!data_encoding.empty()) io::write_file_atomic(tx.path() / "data.json", data_encoding);
  // Language models also carry their Hugging Face config.json, which `genesis convert` and
  // `genesis inspect` read (and which makes the weights a model directory of their own).
  if (const auto* lm = dynamic_cast<const models::CausalLM*>(&model))
    io::write_file_atomic(tx.path() / "config.json", lm->hf_config_json() + "\n");
  if (!tokenizer.empty()) copy_tokenizer_files(tokenizer, tx.path());
  tx.commit();
  io::update_latest_pointer(checkpoints_dir, name);
  io::prune_checkpoints(checkpoints_dir, keep_last);
  return checkpoints_dir / name;
}

std::string checkpoint_data_encoding(const std::filesystem::path& path) {
  const std::filesystem::path file = io::resolve_checkpoint(path) / "data.json";
  return std::filesystem::is_regular_file(file) ? io::read_file(file, io::kMaxConfigFileBytes) : std::string();
}

namespace {

// The fields of trainer.json, each checked for its type and range: a hand-edited or damaged
// file is a FormatError naming the file and the field, never a silently truncated value.
TrainerState parse_trainer_json(const nlohmann::json& j, const std::string& file) {
  GENESIS_CHECK(j.is_object(), FormatError, file, ": expected a JSON object");
  auto field = [&](const nlohmann::json& object, const char* name, const std::string& where) -> const nlohmann::json& {
    GENESIS_CHECK(object.is_object() && object.contains(name), FormatError, file, ": missing field '", where, "'");
    return object.at(name);
  };
  auto count = [&](const nlohmann::json& object, const char* name, const std::string& where, int64_t min) {
    const nlohmann::json& v = field(object, name, where);
    const bool fits = v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t{INT64_MAX});
    GENESIS_CHECK(fits && v.get<int64_t>() >= min, FormatError, file, ": field '", where, "' must be an integer >= ",
                  min, ", not ", v.dump());
    return v.get<int64_t>();
  };
  auto word = [&](const nlohmann::json& object, const char* name) {
    const nlohmann::json& v = field(object, name, name);
    GENESIS_CHECK(v.is_string(), FormatError, file, ": field '", name, "' must be a string, not ", v.dump());
    return v.get<std::string>();
  };
  auto unsigned64 = [&](const nlohmann::json& object, const char* name, const std::string& where) {
    const nlohmann::json& v = field(object, name, where);
    GENESIS_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), FormatError, file,
                  ": field '", where, "' must be an unsigned integer, not ", v.dump());
    return v.get<uint64_t>();
  };
  if (j.contains("format_version"))
    GENESIS_CHECK(j["format_version"].is_number_integer() && j["format_version"].get<int64_t>() == 1, FormatError, file,
                  ": format_version ", j["format_version"].dump(), " is not one genesis reads (1)");
  TrainerState s;
  s.step = count(j, "step", "step", 0);
  s.cursor = {count(j, "epoch", "epoch", 0), count(j, "batch_in_epoch", "batch_in_epoch", 0)};
  const nlohmann::json& rng = field(j, "rng", "rng");
  s.rng = {unsigned64(rng, "seed", "rng.seed"), unsigned64(rng, "offset", "rng.offset")};
  s.optimizer_steps = count(j, "optimizer_steps", "optimizer_steps", 0);
  s.optimizer_name = word(j, "optimizer");
  s.scheduler_name = word(j, "scheduler");
  s.world_size = static_cast<int>(count(j, "world_size", "world_size", 1));
  GENESIS_CHECK(s.world_size <= (1 << 20), FormatError, file, ": field 'world_size' is implausibly large: ", s.world_size);
  if (j.contains("cpu_threads")) s.cpu_threads = count(j, "cpu_threads", "cpu_threads", 0);  // absent in older ones
  if (j.contains("grad_scaler")) {
    const nlohmann::json& g = j["grad_scaler"];
    const nlohmann::json& scale = field(g, "scale", "grad_scaler.scale");
    GENESIS_CHECK(scale.is_number() && scale.get<double>() > 0 && std::isfinite(scale.get<double>()), FormatError,
                  file, ": field 'grad_scaler.scale' must be a positive number, not ", scale.dump());
    s.grad_scaler = amp::GradScalerState{.scale = scale.get<double>(),
                                         .growth_tracker = count(g, "growth_tracker", "grad_scaler.growth_tracker", 0),
                                         .skipped_steps = count(g, "skipped_steps", "grad_scaler.skipped_steps", 0)};
  }
  if (j.contains("log_window")) {
    const nlohmann::json& w = j["log_window"];
    s.log_window_steps = count(w, "steps", "log_window.steps", 0);
    const nlohmann::json& loss = field(w, "loss_sum", "log_window.loss_sum");
    GENESIS_CHECK(loss.is_number() && std::isfinite(loss.get<double>()), FormatError, file,
                  ": field 'log_window.loss_sum' must be a finite number, not ", loss.dump());
    s.log_window_loss = loss.get<double>();
  }
  if (j.contains("base")) {
    const nlohmann::json& b = j["base"];
    auto text = [&](const char* name) {
      const nlohmann::json& v = field(b, name, std::string("base.") + name);
      GENESIS_CHECK(v.is_string() && !v.get<std::string>().empty(), FormatError, file, ": field 'base.", name,
                    "' must be a non-empty string, not ", v.dump());
      return v.get<std::string>();
    };
    s.base = BaseModelRef{.dir = text("dir"), .fingerprint = text("fingerprint")};
  }
  return s;
}

}  // namespace

TrainerState read_trainer_json(std::string_view text, const std::string& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    GENESIS_THROW(FormatError, file, ": invalid JSON: ", io::json_error_text(e));
  }
  return parse_trainer_json(j, file);
}

TrainerState load_checkpoint(const std::filesystem::path& path, nn::Module& model, Optimizer* optimizer,
                             const OptimizerStateLoader& load_optimizer) {
  std::filesystem::path dir = io::resolve_checkpoint(path);
  for (const char* f : {"model.safetensors", "trainer.json"}) {
    GENESIS_CHECK(std::filesystem::exists(dir / f), ValueError, "checkpoint ", dir.string(), " has no ", f);
  }
  const std::filesystem::path file = dir / "trainer.json";
  TrainerState s = read_trainer_json(io::read_file(file, io::kMaxConfigFileBytes), file.string());
  const io::SafetensorsFile weights(dir / "model.safetensors");
  std::vector<NamedTensor> state = read_all(weights);
  for (const NamedTensor& t : state) io::require_finite(t.tensor, t.name, weights.path());
  try {
    model.load_state_dict(state, s.base ? nn::Params::trainable : nn::Params::all);
  } catch (const ShapeError& e) {
    GENESIS_THROW(ValueError, "checkpoint ", (dir / "model.safetensors").string(), " does not fit the model: ", e.what());
  }
  if (optimizer) {
    GENESIS_CHECK(s.optimizer_name == optimizer->name(), ValueError, "checkpoint ", dir.string(), " was written by '",
                  s.optimizer_name, "' but the recipe uses '", optimizer->name(), "'");
    std::vector<NamedTensor> saved = read_all(io::SafetensorsFile(dir / "optimizer.safetensors"));
    if (load_optimizer) load_optimizer(*optimizer, saved, s.optimizer_steps);
    else optimizer->load_state(saved, s.optimizer_steps);
  }
  return s;
}

std::optional<BaseModelRef> checkpoint_base(const std::filesystem::path& path) {
  const std::filesystem::path file = io::resolve_checkpoint(path) / "trainer.json";
  GENESIS_CHECK(std::filesystem::exists(file), ValueError, "checkpoint ", file.parent_path().string(),
                " has no trainer.json");
  return read_trainer_json(io::read_file(file, io::kMaxConfigFileBytes), file.string()).base;
}

void require_base_unchanged(const BaseModelRef& base, const std::filesystem::path& checkpoint) {
  GENESIS_CHECK(std::filesystem::exists(base.dir), UsageError, checkpoint.string(),
                " holds LoRA adapters for the base ", base.dir,
                ", which is gone: restore it there (a relative path starts at the directory the run was started in)");
  const std::string now = models::model_dir_fingerprint(base.dir);
  GENESIS_CHECK(now == base.fingerprint, UsageError, checkpoint.string(), " holds LoRA adapters trained on ", base.dir,
                " (fingerprint ", base.fingerprint, "), which has changed since (now ", now,
                "): the adapters need the base they were trained on");
}

}  // namespace genesis::train
