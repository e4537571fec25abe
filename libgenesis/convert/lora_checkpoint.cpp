#include "libgenesis/convert/lora_checkpoint.h"

#include <set>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/io/peft.h"
#include "libgenesis/core/error.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/checkpoint.h"

namespace genesis::io {

namespace fs = std::filesystem;

Tensor LoraCheckpoint::merged(const std::string& name, const Tensor& stored) const {
  const auto it = adapters.find(name);
  if (it == adapters.end()) return stored;
  NoGradGuard no_grad;
  const auto& [a, b] = it->second;
  Tensor delta = mul(matmul(b.to(DType::f32), a.to(DType::f32)), options.scale());  // [out, in]
  if (fan_in_fan_out) delta = delta.t();
  return add(stored.to(DType::f32), delta).to(stored.dtype());
}

std::optional<LoraCheckpoint> open_lora_checkpoint(const ModelSource& source) {
  if (!source.training) return std::nullopt;
  const fs::path trainer_file = source.dir / "trainer.json";
  const std::string trainer_text = read_file(trainer_file, kMaxConfigFileBytes);
  const nlohmann::json trainer = nlohmann::json::parse(trainer_text, nullptr, false);
  if (!trainer.is_object() || !trainer.contains("base")) return std::nullopt;  // a whole model, checked elsewhere
  const train::TrainerState state = train::read_trainer_json(trainer_text, trainer_file.string());
  GENESIS_CHECK(!source.recipe_toml.empty(), FormatError, source.dir.string(),
                ": a LoRA checkpoint without its recipe.toml (which holds the adapters' [lora] options)");
  const RecipeSpec spec = parse_recipe(source.recipe_toml, (source.dir / "recipe.toml").string());
  LoraCheckpoint lora;
  lora.base_dir = state.base->dir;
  lora.base_fingerprint = state.base->fingerprint;
  lora.fan_in_fan_out = source.architecture == "gpt2";
  std::map<std::string, Tensor> factors;
  for (const std::string& name : source.weights.names()) {
    const bool factor = name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight");
    GENESIS_CHECK(factor, FormatError, source.weights.file_of(name).string(), ": tensor '", name,
                  "' is not a LoRA factor (<module>.lora_A.weight or .lora_B.weight), yet trainer.json names a base");
    lora.tensors.push_back({name, source.weights.tensor(name)});
    factors[name] = lora.tensors.back().tensor;
  }
  for (const auto& [name, tensor] : factors) {
    if (!name.ends_with(".lora_A.weight")) continue;
    const std::string module = name.substr(0, name.size() - std::string(".lora_A.weight").size());
    const auto b = factors.find(module + ".lora_B.weight");
    GENESIS_CHECK(b != factors.end(), FormatError, source.dir.string(), ": ", name, " has no ", module,
                  ".lora_B.weight beside it");
    lora.adapters[module + ".weight"] = {tensor, b->second};
  }
  GENESIS_CHECK(lora.adapters.size() * 2 == factors.size(), FormatError, source.dir.string(),
                ": every lora_B.weight needs its lora_A.weight");
  // The run's adapters: new ones of [lora], or model.adapter's trained on (its config gives their
  // options; the checkpoint holds their weights).
  if (spec.model.adapter.empty()) {
    lora.options = recipe::lora_options(spec);
  } else {
    std::set<std::string> modules;
    for (const auto& entry : lora.adapters)
      modules.insert(entry.first.substr(0, entry.first.size() - std::string(".weight").size()));
    lora.options = read_peft_config(spec.model.adapter, modules).options;
  }
  train::require_base_unchanged(*state.base, source.dir);
  return lora;
}

ConvertResult write_peft(const LoraCheckpoint& lora, const ModelSource& source, const fs::path& dst,
                         const ConvertOptions& options) {
  PeftAdapter adapter{.options = lora.options, .base_model = lora.base_dir.string(),
                      .fan_in_fan_out = lora.fan_in_fan_out, .tensors = {}, .target_modules_regex = {}};
  ConvertResult result{.from_format = source.format, .to = "peft", .architecture = source.architecture,
                       .files = {kPeftWeightsFile, kPeftConfigFile}, .tensors = 0, .bytes = 0};
  for (const NamedTensor& t : lora.tensors) {
    Tensor value = options.dtype && t.tensor.dtype() != *options.dtype ? t.tensor.to(*options.dtype) : t.tensor;
    result.bytes += static_cast<uint64_t>(value.numel()) * dtype_size(value.dtype());
    adapter.tensors.push_back({t.name, std::move(value)});
  }
  result.tensors = static_cast<int64_t>(adapter.tensors.size());
  write_peft_adapter(dst, adapter, options.overwrite);
  return result;
}

}  // namespace genesis::io
