#pragma once
// LoRA adapters in PEFT's format (Hugging Face `peft`), the directory save_pretrained writes and
// PeftModel.from_pretrained reads:
//   adapter_model.safetensors  "base_model.model.<module>.lora_A.weight" [r, in] and
//                              "base_model.model.<module>.lora_B.weight" [out, r] for every adapted module
//   adapter_config.json        LoraConfig's fields: peft_type "LORA", r, lora_alpha, target_modules, ...
// genesis names an adapter's tensors as PEFT does, without the "base_model.model." prefix, beside the
// base weight they adapt ("model.layers.0.self_attn.q_proj.lora_A.weight"). GPT-2's Conv1D layers keep
// the same [r, in] / [out, r] shapes: PEFT's fan_in_fan_out transposes only the base weight.
//
// target_modules: a list is read as LoraOptions::targets (the same suffix matching as PEFT's). A
// single string is a Python regular expression in PEFT, which genesis does not evaluate: the tensors
// already name every module the expression selected, so targets become those modules' full names
// (exact, since a full name matches only itself) and `target_modules_regex` keeps the string, which
// write_peft_adapter writes back. The string "all-linear" is read as targets {"all-linear"}, which means
// the same in genesis. A missing or null target_modules (PEFT's per-architecture default) becomes the
// adapted modules' last name components ("q_proj", "v_proj").
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "libgenesis/core/named_tensor.h"
#include "libgenesis/nn/lora.h"

namespace genesis::io {

inline constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";
inline constexpr const char* kPeftConfigFile = "adapter_config.json";

struct PeftAdapter {
  nn::LoraOptions options;
  std::string base_model;       // base_model_name_or_path; "" when unknown (written as null)
  bool fan_in_fan_out = false;  // true for GPT-2 (Conv1D stores its base weight [in, out])
  // genesis names ("<module>.lora_A.weight" [r, in], "<module>.lora_B.weight" [out, r]), in any
  // floating-point dtype, written as given; read back sorted by name, as the file stores them.
  std::vector<NamedTensor> tensors;
  // target_modules when the config gave one regular expression (see above); "" for a list.
  std::string target_modules_regex;
};

// Writes `adapter` into `dir` as PEFT's two files, each through a temporary file renamed into
// place (the weights first, then the config). A missing `dir` is created as a temporary sibling
// renamed at the end, so it appears complete or not at all. An existing directory that holds
// anything is refused (UsageError) unless `overwrite`: then the two files are replaced and the other
// files there are left alone. ValueError names what is wrong with an adapter that PEFT could not
// load: a tensor name that is not a lora_A/lora_B weight, a module without both, shapes that do not
// fit options.r, no tensors, an r, alpha or dropout out of range, no targets.
void write_peft_adapter(const std::filesystem::path& dir, const PeftAdapter& adapter, bool overwrite = false);

// Reads PEFT's two files from `dir`. The tensors are CPU tensors viewing the mapped file, in their
// stored dtype; "lora_A.default.weight" (PEFT's in-memory name) is read as "lora_A.weight". options.init
// is "gaussian" when the config says so and "default" otherwise. One-line errors that name the file:
// IoError for a missing file; FormatError for malformed JSON or safetensors, tensors that are not
// lora_A/lora_B weights, incomplete pairs, shapes that disagree with each other or with r, a target
// list that misses an adapted module; NotImplementedError for valid PEFT adapters genesis cannot
// apply yet (another peft_type, DoRA, rank_pattern/alpha_pattern, trained biases, modules_to_save,
// layers_to_transform, exclude_modules, layer_replication, trainable tokens, target_parameters, and
// initializations that change the base model: PiSSA, OLoRA, CorDA, LoftQ).
PeftAdapter read_peft_adapter(const std::filesystem::path& dir);

// adapter_config.json of the adapter in `dir` alone, for what needs its options and not its weights
// (a LoRA run trained from model.adapter: its checkpoint holds the weights): a PeftAdapter without
// tensors, read and checked as read_peft_adapter reads the config. `modules` are the modules the
// adapter adapts ("model.layers.0.self_attn.q_proj"): a missing target_modules or a regular
// expression becomes targets as above, and a target list must match each of them (FormatError).
PeftAdapter read_peft_config(const std::filesystem::path& dir, const std::set<std::string>& modules);

// Gives `model` the adapter's layers (exactly the modules its tensors name, whatever its
// target_modules said) with its r, alpha and rsLoRA scale, and copies its tensors in (cast to f32,
// moved to the model's device); the base is frozen. Returns the adapted modules' names.
// ValueError naming a module the model lacks or a shape that does not fit it.
std::vector<std::string> apply_peft_adapter(nn::Module& model, const PeftAdapter& adapter);

}  // namespace genesis::io
