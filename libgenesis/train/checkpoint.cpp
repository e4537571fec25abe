#include "libgenesis/train/checkpoint.h"

#include <nlohmann/json.hpp>

#include "libgenesis/core/error.h"
#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/safetensors.h"
#include "libgenesis/models/causal_lm.h"

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
                                      const std::filesystem::path& tokenizer) {
  return save_checkpoint(checkpoints_dir, model, optimizer.name(), optimizer.state(), state, recipe_toml, keep_last,
                         tokenizer);
}

std::filesystem::path save_checkpoint(const std::filesystem::path& checkpoints_dir, const nn::Module& model,
                                      std::string_view optimizer_name,
                                      const std::vector<NamedTensor>& optimizer_state, const TrainerState& state,
                                      const std::string& recipe_toml, size_t keep_last,
                                      const std::filesystem::path& tokenizer) {
  std::string name = io::checkpoint_name(state.step);
  io::DirectoryTransaction tx(checkpoints_dir / name, /*replace=*/true);
  io::save_safetensors(tx.path() / "model.safetensors", to_pairs(model.state_dict()), {{"format", "genesis"}});
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
  io::write_file_atomic(tx.path() / "trainer.json", trainer.dump(2) + "\n");
  io::write_file_atomic(tx.path() / "recipe.toml", recipe_toml);
  // Language models also carry their Hugging Face config.json, which `genesis convert` and
  // `genesis inspect` read (and which makes the weights a model directory of their own).
  if (const auto* lm = dynamic_cast<const models::CausalLM*>(&model)) {
    io::write_file_atomic(tx.path() / "config.json", lm->hf_config_json() + "\n");
    if (!tokenizer.empty()) copy_tokenizer_files(tokenizer, tx.path());
  }
  tx.commit();
  io::update_latest_pointer(checkpoints_dir, name);
  io::prune_checkpoints(checkpoints_dir, keep_last);
  return checkpoints_dir / name;
}

TrainerState load_checkpoint(const std::filesystem::path& path, nn::Module& model, Optimizer* optimizer,
                             const OptimizerStateLoader& load_optimizer) {
  std::filesystem::path dir = io::resolve_checkpoint(path);
  for (const char* f : {"model.safetensors", "trainer.json"}) {
    GENESIS_CHECK(std::filesystem::exists(dir / f), ValueError, "checkpoint ", dir.string(), " has no ", f);
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(io::read_file(dir / "trainer.json"));
  } catch (const nlohmann::json::exception& e) {
    GENESIS_THROW(FormatError, (dir / "trainer.json").string(), ": invalid JSON: ", e.what());
  }
  TrainerState s;
  try {
    s.step = j.at("step").get<int64_t>();
    s.cursor = {j.at("epoch").get<int64_t>(), j.at("batch_in_epoch").get<int64_t>()};
    s.rng = {j.at("rng").at("seed").get<uint64_t>(), j.at("rng").at("offset").get<uint64_t>()};
    s.optimizer_steps = j.at("optimizer_steps").get<int64_t>();
    s.optimizer_name = j.at("optimizer").get<std::string>();
    s.scheduler_name = j.at("scheduler").get<std::string>();
    s.world_size = j.at("world_size").get<int>();
    s.cpu_threads = j.value("cpu_threads", int64_t{0});  // absent in checkpoints before it existed
    if (j.contains("grad_scaler")) {
      const nlohmann::json& g = j["grad_scaler"];
      s.grad_scaler = amp::GradScalerState{.scale = g.at("scale").get<double>(),
                                           .growth_tracker = g.at("growth_tracker").get<int64_t>(),
                                           .skipped_steps = g.at("skipped_steps").get<int64_t>()};
    }
  } catch (const nlohmann::json::exception& e) {
    GENESIS_THROW(FormatError, (dir / "trainer.json").string(), ": missing or mistyped field: ", e.what());
  }
  try {
    model.load_state_dict(read_all(io::SafetensorsFile(dir / "model.safetensors")));
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

}  // namespace genesis::train
