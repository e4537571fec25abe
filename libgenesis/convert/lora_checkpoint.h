#pragma once
// The checkpoint of a LoRA run seen by `genesis convert` (convert.h): its adapters, their
// options (the run's [lora]) and the base they apply to (trainer.json "base").
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "libgenesis/convert/convert.h"
#include "libgenesis/core/named_tensor.h"
#include "libgenesis/nn/lora.h"

namespace genesis::io {

struct LoraCheckpoint {
  std::filesystem::path base_dir;  // model.init_from as the run's recipe gave it
  std::string base_fingerprint;
  nn::LoraOptions options;
  bool fan_in_fan_out = false;  // GPT-2: the base's Conv1D weights are stored [in, out]
  std::vector<NamedTensor> tensors;  // "<module>.lora_A.weight" / ".lora_B.weight", as stored
  std::map<std::string, std::pair<Tensor, Tensor>> adapters;  // "<module>.weight" -> (A, B)

  // The base's tensor `name` with its adapter's update added when it has one: W + scale B A
  // (transposed for a Conv1D weight), computed in f32 and returned in stored's dtype.
  Tensor merged(const std::string& name, const Tensor& stored) const;
};

// The LoRA checkpoint `source` is, or nullopt when it is none (no trainer.json naming a base).
// FormatError for a tensor that is not an adapter factor or an incomplete pair; UsageError when
// the base directory is gone or has changed since training (its fingerprint differs).
std::optional<LoraCheckpoint> open_lora_checkpoint(const ModelSource& source);

// `genesis convert --to peft`: the adapters as PEFT's adapter_model.safetensors + adapter_config.json.
ConvertResult write_peft(const LoraCheckpoint& lora, const ModelSource& source, const std::filesystem::path& dst,
                         const ConvertOptions& options);

}  // namespace genesis::io
