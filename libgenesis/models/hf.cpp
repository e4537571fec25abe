#include "libgenesis/models/hf.h"

#include <fstream>
#include <map>
#include <set>

#include "libgenesis/core/error.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/fnv.h"
#include "libgenesis/io/safetensors.h"
#include "libgenesis/models/config_json.h"
#include "libgenesis/models/gpt2.h"
#include "libgenesis/models/llama.h"

namespace genesis::models {

namespace fs = std::filesystem;

std::shared_ptr<CausalLM> causal_lm_from_config(std::string_view config_json, nn::LayerOptions options) {
  const nlohmann::json config = detail::parse_config_object(config_json, "model config");
  GENESIS_CHECK(config.contains("model_type") && config["model_type"].is_string(), UsageError,
                "model config: missing model_type (supported: gpt2, llama, qwen2, qwen3)");
  const std::string type = config["model_type"].get<std::string>();
  if (type == "gpt2") return std::make_shared<Gpt2LM>(gpt2_config_from_json(config_json), options);
  return std::make_shared<DecoderLM>(decoder_config_from_json(config_json), options);
}

double config_parameter_count(std::string_view config_json) {
  const nlohmann::json config = detail::parse_config_object(config_json, "model config");
  const std::string type = detail::ConfigReader(config, "model").string("model_type", std::string());
  if (type == "gpt2") {
    const Gpt2Config c = gpt2_config_from_json(config_json);
    const double e = static_cast<double>(c.n_embd), inner = static_cast<double>(c.n_inner > 0 ? c.n_inner : 4 * c.n_embd);
    const double layer = 2 * e + (e * 3 * e + 3 * e) + (e * e + e) + 2 * e + (e * inner + inner) + (inner * e + e);
    return static_cast<double>(c.vocab_size + c.n_positions) * e + static_cast<double>(c.n_layer) * layer + 2 * e;
  }
  const DecoderConfig c = decoder_config_from_json(config_json);
  const double h = static_cast<double>(c.hidden_size), d = static_cast<double>(c.head_dim);
  const double q = static_cast<double>(c.num_attention_heads) * d, kv = static_cast<double>(c.num_key_value_heads) * d;
  double layer = 2 * h + h * q + 2 * h * kv + q * h + 3 * h * static_cast<double>(c.intermediate_size);
  if (c.qkv_bias()) layer += q + 2 * kv;
  if (c.o_bias()) layer += h;
  if (c.qk_norm()) layer += 2 * d;
  const double vocab = static_cast<double>(c.vocab_size) * h;
  return vocab * (c.tie_word_embeddings ? 1 : 2) + static_cast<double>(c.num_hidden_layers) * layer + h;
}

namespace {

// The safetensors files of a model directory: model.safetensors, or every shard named by
// the index's weight_map.
std::vector<fs::path> weight_files(const fs::path& dir) {
  if (fs::exists(dir / "model.safetensors")) return {dir / "model.safetensors"};
  const fs::path index_path = dir / "model.safetensors.index.json";
  GENESIS_CHECK(fs::exists(index_path), IoError, dir.string(),
                ": no model.safetensors or model.safetensors.index.json (a Hugging Face model directory is expected)");
  const nlohmann::json index = nlohmann::json::parse(io::read_file(index_path, io::kMaxConfigFileBytes), nullptr, false);
  GENESIS_CHECK(
      !index.is_discarded() && index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
      FormatError, index_path.string(), ": expected a JSON object with a \"weight_map\" object");
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) {
    GENESIS_CHECK(file.is_string(), FormatError, index_path.string(), ": weight_map entry '", name,
                  "' must name a file");
    shards.insert(file.get<std::string>());
  }
  std::vector<fs::path> files;
  for (const std::string& shard : shards) {
    GENESIS_CHECK(fs::path(shard).filename() == shard, FormatError, index_path.string(), ": shard '", shard,
                  "' must be a file name inside the directory");
    files.push_back(dir / shard);
  }
  return files;
}

}  // namespace

std::string model_dir_fingerprint(const fs::path& dir) {
  uint64_t h = io::fnv1a(io::kFnvBasis, io::read_file(dir / "config.json", io::kMaxConfigFileBytes));
  constexpr uint64_t kSample = 64 << 10, kStride = 64 << 20;
  std::vector<char> block(kSample);
  for (const fs::path& file : weight_files(dir)) {
    std::ifstream in(file, std::ios::binary);
    GENESIS_CHECK(in.good(), IoError, "cannot read ", file.string());
    const uint64_t size = fs::file_size(file);
    h = io::fnv1a(h, file.filename().string());
    h = io::fnv1a(h, &size, sizeof size);
    auto sample = [&](uint64_t offset) {
      in.seekg(static_cast<std::streamoff>(offset));
      in.read(block.data(), static_cast<std::streamsize>(std::min(kSample, size - offset)));
      GENESIS_CHECK(in.good() || in.eof(), IoError, "cannot read ", file.string());
      h = io::fnv1a(h, block.data(), static_cast<size_t>(in.gcount()));
      in.clear();
    };
    // The header: its length, then the JSON (sampled like the rest when it is huge).
    uint64_t header = 0;
    in.read(reinterpret_cast<char*>(&header), sizeof header);
    in.clear();  // a file shorter than 8 bytes: its bytes are still sampled below
    for (uint64_t at = 0; at < std::min(header + 8, size); at += kSample) sample(at);
    for (uint64_t at = header + 8; at < size; at += kStride) sample(at);
    if (size > kSample) sample(size - kSample);
  }
  return "fnv1a64-sampled-" + io::hex16(h);
}

void load_hf_weights(CausalLM& model, const fs::path& dir) {
  std::set<std::string> own;
  for (const NamedTensor& p : model.state_dict()) own.insert(p.name);
  const std::string prefix = model.base_model_prefix() + ".";
  std::vector<NamedTensor> state;
  std::map<std::string, fs::path> seen;
  for (const fs::path& file : weight_files(dir)) {
    io::SafetensorsFile weights(file);
    for (const std::string& stored : weights.names()) {
      const std::string name = !own.count(stored) && own.count(prefix + stored) ? prefix + stored : stored;
      if (model.ignores_checkpoint_tensor(name)) continue;
      auto [it, inserted] = seen.emplace(name, file);
      GENESIS_CHECK(inserted, FormatError, dir.string(), ": tensor '", name, "' appears in both ",
                    it->second.filename().string(), " and ", file.filename().string());
      state.push_back({name, weights.tensor(stored)});
      io::require_finite(state.back().tensor, stored, file);
    }
  }
  try {
    model.load_state_dict(state);
  } catch (const ShapeError& e) {
    GENESIS_THROW(ShapeError, dir.string(), " does not fit the ", model.model_type(),
                  " model of its config: ", e.what());
  }
}

void save_hf_model(const CausalLM& model, const fs::path& dir) {
  fs::create_directories(dir);
  io::NamedTensors tensors;
  for (const NamedTensor& p : model.state_dict()) tensors.emplace_back(p.name, p.tensor.detach());
  io::save_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
  io::write_file_atomic(dir / "config.json", model.hf_config_json() + "\n");
}

std::shared_ptr<CausalLM> load_hf_model(const fs::path& dir, nn::LayerOptions options) {
  const fs::path config_path = dir / "config.json";
  GENESIS_CHECK(fs::exists(config_path), IoError, dir.string(),
                ": no config.json (a Hugging Face model directory is expected)");
  const std::string config = io::read_file(config_path, io::kMaxConfigFileBytes);
  // The weights' element count from their headers (nothing loaded yet) against the config's.
  double stored = 0;
  for (const fs::path& file : weight_files(dir)) {
    io::SafetensorsFile weights(file);
    for (const std::string& name : weights.names()) {
      double count = 1;
      for (int64_t d : weights.info(name).shape) count *= static_cast<double>(d);
      stored += count;
    }
  }
  const double described = config_parameter_count(config);
  GENESIS_CHECK(described <= 1.5 * stored + 1e6, UsageError, config_path.string(), " describes a model of ",
                static_cast<int64_t>(described), " parameters but the weights in ", dir.string(), " hold ",
                static_cast<int64_t>(stored), ": the config does not belong to these weights (check its sizes: ",
                "layers, widths, vocabulary)");
  std::shared_ptr<CausalLM> model = causal_lm_from_config(config, options);
  load_hf_weights(*model, dir);
  return model;
}

}  // namespace genesis::models
