#include "apps/genesis/lm_session.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "apps/genesis/commands.h"
#include "libgenesis/core/error.h"
#include "libgenesis/io/peft.h"
#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/models/hf.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/checkpoint.h"

namespace genesis::cli {

namespace {

namespace fs = std::filesystem;

// eos_token_id of a Hugging Face JSON file: a number, a list of numbers, or absent/null.
std::vector<int64_t> eos_ids_of(const fs::path& file) {
  if (!fs::exists(file)) return {};
  const nlohmann::json j = nlohmann::json::parse(io::read_file(file), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("eos_token_id")) return {};
  const nlohmann::json& eos = j["eos_token_id"];
  std::vector<int64_t> ids;
  if (eos.is_number_integer()) ids.push_back(eos.get<int64_t>());
  if (eos.is_array())
    for (const auto& id : eos)
      if (id.is_number_integer()) ids.push_back(id.get<int64_t>());
  return ids;
}

LoadedModel load_from_hf(const fs::path& dir, Device device) {
  GENESIS_CHECK(fs::exists(dir), UsageError, "--model ", dir.string(), " does not exist");
  LoadedModel m;
  m.model = models::load_hf_model(dir);
  m.model->to(device);
  if (data::Tokenizer::found_in(dir)) m.tokenizer = data::Tokenizer::load(dir);
  m.eos_ids = eos_ids_of(dir / "generation_config.json");
  if (m.eos_ids.empty()) m.eos_ids = eos_ids_of(dir / "config.json");
  return m;
}

// The model is rebuilt from the checkpoint's recipe.toml and its weights loaded; the tokenizer
// comes along: the checkpoint's own copy (checkpoints keep the files of the tokenizer their data
// used, so this works from any directory), else the recipe's data.tokenizer.
LoadedModel load_from_checkpoint(const fs::path& path, Device device) {
  GENESIS_CHECK(fs::exists(path), UsageError, "--checkpoint ", path.string(), " does not exist");
  const fs::path dir = io::resolve_checkpoint(fs::exists(path / "checkpoints") ? path / "checkpoints" : path);
  GENESIS_CHECK(fs::exists(dir / "recipe.toml"), UsageError, "--checkpoint ", dir.string(),
                " has no recipe.toml (a genesis checkpoint directory is expected)");
  RecipeSpec spec = parse_recipe(io::read_file(dir / "recipe.toml"), (dir / "recipe.toml").string());
  GENESIS_CHECK(spec.model.is_language_model(), UsageError, "--checkpoint ", dir.string(), " holds a ", spec.model.name,
                " model, not a language model");
  GENESIS_CHECK(!spec.classifies_text(), UsageError, "--checkpoint ", dir.string(),
                " holds a text classifier (a language model with a classifier head): genesis predict --checkpoint ",
                path.string(), " TEXTS classifies texts");
  LoadedModel m;
  if (spec.model.init_from.empty()) {
    m.model = std::dynamic_pointer_cast<models::CausalLM>(recipe::build_model(spec, kCPU));
  } else if (spec.trains_adapters()) {
    // A LoRA run: the checkpoint holds the adapters; the base comes from init_from, as trained.
    if (const std::optional<train::BaseModelRef> base = train::checkpoint_base(dir))
      train::require_base_unchanged(*base, dir);
    m.model = std::dynamic_pointer_cast<models::CausalLM>(recipe::build_model(spec, kCPU));
  } else {
    // A fine-tuned run: the architecture is init_from's config.json, the weights the checkpoint's.
    const fs::path config = fs::path(spec.model.init_from) / "config.json";
    GENESIS_CHECK(fs::exists(config), UsageError, "--checkpoint ", dir.string(), " was fine-tuned from ",
                  spec.model.init_from, ", whose config.json is gone (it defines the architecture)");
    m.model = models::causal_lm_from_config(io::read_file(config));
  }
  train::load_checkpoint(dir, *m.model, nullptr);
  m.model->to(device);
  m.autocast = recipe::amp_dtype(spec);
  if (data::Tokenizer::found_in(dir))
    m.tokenizer = data::Tokenizer::load(dir);
  else if (spec.data.name == "tokens" && fs::exists(spec.data.tokenizer))
    m.tokenizer = data::Tokenizer::load(spec.data.tokenizer);
  m.recipe = std::move(spec);
  m.checkpoint_dir = dir;
  return m;
}

}  // namespace

void add_model_options(CLI::App* sub, ModelArgs& a) {
  auto* model = sub->add_option("--model", a.model_dir, "Hugging Face model directory (config.json + safetensors)");
  auto* checkpoint = sub->add_option("--checkpoint", a.checkpoint,
                                     "genesis run directory, its checkpoints/, or one checkpoint of a language model");
  model->excludes(checkpoint);
  sub->add_option("--adapter", a.adapter,
                  "A PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors) to apply");
  sub->add_option("--max-new-tokens", a.max_new_tokens, "Tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--temperature", a.sampling.temperature, "Softmax temperature; 0 = greedy")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--top-k", a.sampling.top_k, "Sample among the K most probable tokens; 0 = all")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--top-p", a.sampling.top_p, "Sample among the most probable tokens of this mass; 1 = all")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--seed", a.seed, "Seed of the sampler")->capture_default_str();
  sub->add_option("--device", a.device, "cpu, cuda, cuda:N or auto")->capture_default_str()->check(device_validator());
  sub->add_option(
         "--dtype", a.dtype,
         "Autocast dtype: f32, bf16 or fp16 (CUDA); default: the checkpoint recipe's amp.dtype, f32 for --model")
      ->check(CLI::IsMember({"f32", "bf16", "fp16"}));
}

void check_model_args(const ModelArgs& a) {
  GENESIS_CHECK(!a.model_dir.empty() || !a.checkpoint.empty(), UsageError, "give --model HF_DIR or --checkpoint DIR");
  models::check_sampling_options(a.sampling);
}

LoadedModel load_model(const ModelArgs& a) {
  const Device device = recipe::resolve_device(a.device);
  LoadedModel m = a.model_dir.empty() ? load_from_checkpoint(a.checkpoint, device) : load_from_hf(a.model_dir, device);
  m.device = device;
  if (!a.adapter.empty()) {
    try {
      io::apply_peft_adapter(*m.model, io::read_peft_adapter(a.adapter));
    } catch (const ValueError& e) {
      GENESIS_THROW(UsageError, "--adapter ", a.adapter, ": ", e.what());
    }
  }
  return m;
}

std::optional<DType> generation_autocast(const ModelArgs& a, const LoadedModel& m) {
  std::optional<DType> dtype = m.autocast;
  if (a.dtype == "f32") dtype = std::nullopt;
  if (a.dtype == "bf16") dtype = DType::bf16;
  if (a.dtype == "fp16") dtype = DType::f16;
  GENESIS_CHECK(dtype != DType::f16 || !m.device.is_cpu(), UsageError,
                "--dtype fp16 runs on CUDA only; use --dtype bf16 (or f32) on the CPU");
  return dtype;
}

std::string TokenTextStream::push(int64_t token) {
  if (token < 0 || token >= static_cast<int64_t>(tokenizer_.vocab_size())) return {};
  return utf8_.push(tokenizer_.token_bytes(static_cast<data::TokenId>(token)));
}

}  // namespace genesis::cli
