// `genesis convert`: writes a model found by open_model_source as a Hugging Face directory or a
// genesis checkpoint, into a temporary sibling of the destination renamed at the end.
#include "libgenesis/convert/convert.h"

#include <algorithm>
#include <optional>
#include <set>

#include "libgenesis/core/error.h"
#include "libgenesis/data/tokenizer.h"
#include "libgenesis/convert/lora_checkpoint.h"
#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/models/config_json.h"
#include "libgenesis/models/gpt2.h"
#include "libgenesis/models/llama.h"
#include "libgenesis/recipe/recipe.h"

namespace genesis::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Whether the source is a run of data.name = "text_classification" (its recipe says so).
bool text_classifier(const ModelSource& source) {
  if (source.recipe_toml.empty()) return false;
  try {
    return parse_recipe(source.recipe_toml, (source.dir / "recipe.toml").string()).classifies_text();
  } catch (const RecipeError&) {
    return false;
  }
}

const char* hf_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "float32";
    case DType::bf16:
      return "bfloat16";
    case DType::f16:
      return "float16";
    case DType::f64:
      return "float64";
    default:
      GENESIS_THROW(ValueError, "convert: no Hugging Face dtype name for ", dtype_name(dtype));
  }
}

const char* hf_architecture(const std::string& model_type) {
  if (model_type == "gpt2") return "GPT2LMHeadModel";
  if (model_type == "llama") return "LlamaForCausalLM";
  if (model_type == "qwen2") return "Qwen2ForCausalLM";
  return "Qwen3ForCausalLM";
}

// Sets `key` only when the source config does not already say it.
void complete(json& config, const char* key, const json& value) {
  if (!config.contains(key) || config[key].is_null()) config[key] = value;
}

// Tensors of a language model: exactly those of the model its config describes; checkpoint
// tensors the model rebuilds itself are dropped, so tied weights are written once.
std::vector<std::string> language_model_tensors(const ModelSource& source) {
  const LanguageModelLayout layout = language_model_layout(source.config);
  std::vector<std::string> names, missing, unexpected, mismatched;
  std::set<std::string> expected;
  for (const auto& [name, shape] : layout.tensors) {
    expected.insert(name);
    names.push_back(name);
    if (!source.weights.contains(name)) {
      missing.push_back(name);
    } else if (source.weights.info(name).shape != shape) {
      mismatched.push_back(name + " " + shape_str(source.weights.info(name).shape) + " (expected " + shape_str(shape) +
                           ")");
    }
  }
  for (const std::string& name : source.weights.names())
    if (!expected.count(name) && !layout.rebuilt(name)) unexpected.push_back(name);
  auto list = [](const std::vector<std::string>& items) {
    std::string out;
    for (size_t i = 0; i < items.size() && i < 8; ++i) out += (i ? ", " : "") + items[i];
    return items.size() > 8 ? out + ", ... (" + std::to_string(items.size()) + " in all)" : out;
  };
  GENESIS_CHECK(missing.empty() && unexpected.empty() && mismatched.empty(), FormatError, "'", source.dir.string(),
                "' does not fit the ", source.architecture,
                " model of its config.json:", missing.empty() ? "" : " missing " + list(missing) + ";",
                unexpected.empty() ? "" : " unexpected " + list(unexpected) + ";",
                mismatched.empty() ? "" : " mis-shaped " + list(mismatched) + ";");
  return names;
}

std::optional<DType> common_dtype(const std::vector<std::string>& names, const ModelSource& source,
                                  std::optional<DType> requested) {
  if (requested) return requested;
  std::optional<DType> common;
  for (const std::string& name : names) {
    std::optional<DType> dtype = dtype_from_safetensors(source.weights.info(name).dtype);
    if (!dtype || (common && *common != *dtype)) return std::nullopt;
    common = dtype;
  }
  return common;
}

// Copies the tokenizer files found next to the checkpoint (or in its run directory); GPT-2's
// encoder.json / vocab.bpe are Hugging Face's vocab.json / merges.txt under other names.
std::vector<std::string> copy_tokenizer_files(const ModelSource& source, const fs::path& out) {
  static const std::pair<const char*, const char*> kFiles[] = {{"tokenizer.json", "tokenizer.json"},
                                                               {"tokenizer_config.json", "tokenizer_config.json"},
                                                               {"special_tokens_map.json", "special_tokens_map.json"},
                                                               {"added_tokens.json", "added_tokens.json"},
                                                               {"vocab.json", "vocab.json"},
                                                               {"merges.txt", "merges.txt"},
                                                               {"encoder.json", "vocab.json"},
                                                               {"vocab.bpe", "merges.txt"}};
  std::vector<fs::path> places = {source.dir};
  if (source.format == "genesis-run") places.push_back(source.path);
  std::vector<std::string> copied;
  for (const auto& [from, to] : kFiles) {
    if (std::find(copied.begin(), copied.end(), to) != copied.end()) continue;
    for (const fs::path& place : places) {
      std::error_code ec;
      if (!fs::is_regular_file(place / from, ec)) continue;
      write_file_atomic(out / to, read_file(place / from));
      copied.push_back(to);
      break;
    }
  }
  // GPT-2's two files also as a tokenizer.json, which transformers' fast tokenizers and genesis
  // read directly.
  const auto has = [&](const char* name) { return std::find(copied.begin(), copied.end(), name) != copied.end(); };
  if (!has("tokenizer.json") && has("vocab.json") && has("merges.txt")) {
    write_file_atomic(out / "tokenizer.json", data::Tokenizer::gpt2_as_hf_json(out / "vocab.json", out / "merges.txt"));
    copied.push_back("tokenizer.json");
  }
  return copied;
}

// The id of tokenizer_config.json's `key` token (a string or an AddedToken {"content": ...}) in
// the tokenizer of `dir`; nullopt when either is missing.
std::optional<int64_t> special_token_id(const fs::path& dir, const char* key) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / "tokenizer_config.json", ec) || !data::Tokenizer::found_in(dir)) return std::nullopt;
  const json c = json::parse(read_file(dir / "tokenizer_config.json", kMaxTokenizerFileBytes), nullptr, false);
  if (!c.is_object() || !c.contains(key)) return std::nullopt;
  const json& token = c[key].is_object() && c[key].contains("content") ? c[key]["content"] : c[key];
  if (!token.is_string()) return std::nullopt;
  const std::optional<data::TokenId> id = data::Tokenizer::load(dir).token_to_id(token.get<std::string>());
  return id ? std::optional<int64_t>(*id) : std::nullopt;
}

// The source's generation_config.json, else one from config.json's special token ids, completed
// from the exported tokenizer files (`out`): a fine-tuned chat model stops at its template's
// eos_token (<|im_end|>), which transformers' generate() reads from here.
json generation_config(const ModelSource& source, const json& config, const fs::path& out) {
  std::error_code ec;
  if (fs::is_regular_file(source.dir / "generation_config.json", ec))
    return json::parse(read_file(source.dir / "generation_config.json", kMaxConfigFileBytes));
  json result = {{"_from_model_config", true}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (config.contains(key) && !config[key].is_null()) result[key] = config[key];
  for (const auto& [id_key, token_key] : {std::pair{"bos_token_id", "bos_token"}, std::pair{"eos_token_id", "eos_token"}})
    if (!result.contains(id_key))
      if (const std::optional<int64_t> id = special_token_id(out, token_key)) result[id_key] = *id;
  return result;
}

void check_destination(const fs::path& src, const fs::path& dst, bool overwrite) {
  std::error_code ec;
  GENESIS_CHECK(!fs::exists(fs::symlink_status(dst, ec)) || overwrite, UsageError, "destination '", dst.string(),
                "' already exists (pass --overwrite to replace it)");
  if (fs::exists(dst, ec)) {
    GENESIS_CHECK(!fs::equivalent(src, dst, ec), UsageError, "destination '", dst.string(),
                  "' is the source; convert into a new directory");
    const fs::path dst_abs = fs::weakly_canonical(dst, ec), src_abs = fs::weakly_canonical(src, ec);
    const std::string dst_text = dst_abs.string() + "/";
    GENESIS_CHECK(src_abs.string().rfind(dst_text, 0) != 0, UsageError, "destination '", dst.string(),
                  "' contains the source '", src.string(), "'; convert into a new directory");
  }
}

}  // namespace

LanguageModelLayout language_model_layout(const json& config) {
  GENESIS_CHECK(config.contains("model_type") && config["model_type"].is_string(), UsageError,
                "model config: missing model_type (supported: gpt2, llama, qwen2, qwen3)");
  LanguageModelLayout layout;
  auto add = [&](const std::string& name, Shape shape) { layout.tensors.emplace_back(name, std::move(shape)); };
  if (config["model_type"] == "gpt2") {
    const models::Gpt2Config c = models::gpt2_config_from_json(config.dump());
    const int64_t e = c.n_embd, inner = c.n_inner > 0 ? c.n_inner : 4 * c.n_embd;
    add("transformer.wte.weight", {c.vocab_size, e});
    add("transformer.wpe.weight", {c.n_positions, e});
    for (int64_t i = 0; i < c.n_layer; ++i) {
      // Conv1D weights are [in, out].
      const std::string p = "transformer.h." + std::to_string(i) + ".";
      for (const char* norm : {"ln_1", "ln_2"}) {
        add(p + norm + ".weight", {e});
        add(p + norm + ".bias", {e});
      }
      add(p + "attn.c_attn.weight", {e, 3 * e});
      add(p + "attn.c_attn.bias", {3 * e});
      add(p + "attn.c_proj.weight", {e, e});
      add(p + "attn.c_proj.bias", {e});
      add(p + "mlp.c_fc.weight", {e, inner});
      add(p + "mlp.c_fc.bias", {inner});
      add(p + "mlp.c_proj.weight", {inner, e});
      add(p + "mlp.c_proj.bias", {e});
    }
    add("transformer.ln_f.weight", {e});
    add("transformer.ln_f.bias", {e});
    layout.rebuilt = [](const std::string& name) {
      return name == "lm_head.weight" || name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
    };
    return layout;
  }
  const models::DecoderConfig c = models::decoder_config_from_json(config.dump());
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  add("model.embed_tokens.weight", {c.vocab_size, h});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {h});
    add(p + "self_attn.q_proj.weight", {q, h});
    add(p + "self_attn.k_proj.weight", {kv, h});
    add(p + "self_attn.v_proj.weight", {kv, h});
    add(p + "self_attn.o_proj.weight", {h, q});
    if (c.qkv_bias()) {
      add(p + "self_attn.q_proj.bias", {q});
      add(p + "self_attn.k_proj.bias", {kv});
      add(p + "self_attn.v_proj.bias", {kv});
    }
    if (c.o_bias()) add(p + "self_attn.o_proj.bias", {h});
    if (c.qk_norm()) {
      add(p + "self_attn.q_norm.weight", {c.head_dim});
      add(p + "self_attn.k_norm.weight", {c.head_dim});
    }
    add(p + "post_attention_layernorm.weight", {h});
    add(p + "mlp.gate_proj.weight", {c.intermediate_size, h});
    add(p + "mlp.up_proj.weight", {c.intermediate_size, h});
    add(p + "mlp.down_proj.weight", {h, c.intermediate_size});
  }
  add("model.norm.weight", {h});
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, h});
  layout.rebuilt = [tied = c.tie_word_embeddings](const std::string& name) {
    return (tied && name == "lm_head.weight") || name.ends_with("rotary_emb.inv_freq");
  };
  return layout;
}

json hf_config_for(const json& source_config, std::optional<DType> dtype) {
  json config = source_config;
  const std::string type = models::detail::ConfigReader(config, "model").string("model_type", std::string());
  complete(config, "architectures", json::array({hf_architecture(type)}));
  if (type == "gpt2") {
    const models::Gpt2Config c = models::gpt2_config_from_json(source_config.dump());
    complete(config, "vocab_size", c.vocab_size);
    complete(config, "n_positions", c.n_positions);
    complete(config, "n_embd", c.n_embd);
    complete(config, "n_layer", c.n_layer);
    complete(config, "n_head", c.n_head);
    complete(config, "layer_norm_epsilon", c.layer_norm_epsilon);
    complete(config, "activation_function", "gelu_new");
    complete(config, "tie_word_embeddings", true);
  } else {
    const models::DecoderConfig c = models::decoder_config_from_json(source_config.dump());
    complete(config, "vocab_size", c.vocab_size);
    complete(config, "hidden_size", c.hidden_size);
    complete(config, "intermediate_size", c.intermediate_size);
    complete(config, "num_hidden_layers", c.num_hidden_layers);
    complete(config, "num_attention_heads", c.num_attention_heads);
    complete(config, "num_key_value_heads", c.num_key_value_heads);
    // head_dim is implied by hidden_size / num_attention_heads except in Qwen3 (which defaults it to 128).
    if (type == "qwen3" || c.head_dim * c.num_attention_heads != c.hidden_size)
      complete(config, "head_dim", c.head_dim);
    complete(config, "max_position_embeddings", c.max_position_embeddings);
    complete(config, "rms_norm_eps", c.rms_norm_eps);
    complete(config, "hidden_act", "silu");
    complete(config, "tie_word_embeddings", c.tie_word_embeddings);
    if (type != "qwen2") complete(config, "attention_bias", c.attention_bias);
    // transformers 5 reads rope_parameters, earlier versions the flat rope_theta; a config that
    // already has rope_parameters (written by transformers 5) is left as its writer made it.
    if (!config.contains("rope_parameters") || config["rope_parameters"].is_null())
      complete(config, "rope_theta", c.rope_theta);
    complete(config, "rope_parameters", {{"rope_theta", c.rope_theta}, {"rope_type", "default"}});
  }
  if (dtype) {
    config["dtype"] = hf_dtype_name(*dtype);
    if (config.contains("torch_dtype")) config["torch_dtype"] = hf_dtype_name(*dtype);
  }
  return config;
}

ConvertResult convert_model(const fs::path& src, const fs::path& dst, const ConvertOptions& options) {
  GENESIS_CHECK(options.to.empty() || options.to == "hf" || options.to == "genesis" || options.to == "peft", UsageError,
                "--to '", options.to, "' is not a target (hf, genesis or peft)");
  GENESIS_CHECK(
      !options.dtype || *options.dtype == DType::f32 || *options.dtype == DType::bf16 || *options.dtype == DType::f16,
      UsageError, "--dtype must be f32, bf16 or f16");
  check_destination(src, dst, options.overwrite);
  const ModelSource opened = open_model_source(src);
  GENESIS_CHECK(!text_classifier(opened), UsageError, "'", src.string(),
                "' is a text classifier (a language model with a classifier head, data.name = "
                "\"text_classification\"), which convert does not export; its model.safetensors already names its "
                "tensors as transformers' *ForSequenceClassification does");
  const std::optional<LoraCheckpoint> lora = open_lora_checkpoint(opened);
  GENESIS_CHECK(lora || options.to != "peft", UsageError, "--to peft takes a LoRA run or checkpoint, and '",
                src.string(), "' holds a whole model");
  GENESIS_CHECK(lora || !options.merge, UsageError, "--merge takes a LoRA run or checkpoint, and '", src.string(),
                "' holds a whole model");
  if (lora && options.to == "peft") return write_peft(*lora, opened, dst, options);
  GENESIS_CHECK(!lora || (options.merge && options.to != "genesis"), UsageError, "'", src.string(),
                "' holds LoRA adapters for the base ", lora ? lora->base_dir.string() : "",
                ": --to peft writes them as a PEFT adapter, --to hf --merge the base with them merged");
  // A merge converts the base, each adapted weight read with its update added.
  const ModelSource source = lora ? open_model_source(lora->base_dir) : opened;
  GENESIS_CHECK(source.format != "safetensors", UsageError, "'", src.string(),
                "' is a bare safetensors file; convert takes a model directory (it needs the config)");
  ConvertResult result;
  result.from_format = source.format;
  result.architecture = source.architecture;
  // A classifier export is already the exported side, and genesis has no checkpoint form to turn it
  // back into: there is no "other side" to default to.
  GENESIS_CHECK(!options.to.empty() || source.format != "classifier-export", UsageError, "'", src.string(),
                "' is already a classifier export (what convert --to hf writes); pass --to hf to write it again "
                "(with --dtype or --max-shard-size), or convert the genesis checkpoint it came from");
  result.to = !options.to.empty() ? options.to : source.format == "huggingface" ? "genesis" : "hf";
  const bool to_hf = result.to == "hf";
  GENESIS_CHECK(!source.architecture.empty(), UsageError, "'", source.dir.string(),
                "' has weights but no config.json, and no recipe.toml of an mlp or cnn, to say what model they "
                "belong to (language-model checkpoints need their Hugging Face config.json)");
  GENESIS_CHECK(source.format != "classifier-export" || to_hf, UsageError, "'", src.string(),
                "' is a classifier export; convert the genesis checkpoint it came from instead");

  std::vector<std::string> names;
  json config;
  if (source.is_language_model()) {
    names = language_model_tensors(source);
    config = hf_config_for(source.config, common_dtype(names, source, options.dtype));
  } else {
    names = source.weights.names();
    config = source.config;
    config["dtype"] = json();
    if (std::optional<DType> dtype = common_dtype(names, source, options.dtype)) config["dtype"] = dtype_name(*dtype);
  }

  std::map<std::string, uint64_t> byte_sizes;
  for (const std::string& name : names) {
    const TensorInfo& info = source.weights.info(name);
    std::optional<DType> stored = dtype_from_safetensors(info.dtype);
    GENESIS_CHECK(stored && is_floating(*stored), FormatError, "tensor '", name, "' in '",
                  source.weights.file_of(name).string(), "' is ", info.dtype,
                  "; convert handles floating-point weights (F32, BF16, F16, F64)");
    const DType out = options.dtype.value_or(*stored);
    byte_sizes[name] = static_cast<uint64_t>(numel_of(info.shape)) * dtype_size(out);
    result.bytes += byte_sizes[name];
  }
  result.tensors = static_cast<int64_t>(names.size());

  DirectoryTransaction tx(dst, options.overwrite);
  int64_t done = 0;
  const TensorGetter get = [&](const std::string& name) {
    if (options.progress) options.progress(++done, result.tensors);
    Tensor stored = source.weights.tensor(name);
    if (lora) stored = lora->merged(name, stored);
    return options.dtype && stored.dtype() != *options.dtype ? stored.to(*options.dtype) : stored;
  };
  // transformers refuses safetensors files whose metadata format is not "pt".
  const std::map<std::string, std::string> metadata = {{"format", to_hf ? "pt" : "genesis"}};
  for (const fs::path& file : save_sharded(tx.path(), names, byte_sizes, get, options.max_shard_bytes, metadata))
    result.files.push_back(file.filename());

  if (source.is_language_model() || to_hf) {
    write_file_atomic(tx.path() / "config.json", config.dump(2) + "\n");
    result.files.emplace_back("config.json");
  }
  if (!source.is_language_model() && !to_hf) {
    GENESIS_CHECK(!source.recipe_toml.empty(), UsageError, "'", src.string(), "' has no recipe.toml to describe its ",
                  source.architecture, " model");
    write_file_atomic(tx.path() / "recipe.toml", source.recipe_toml);
    result.files.emplace_back("recipe.toml");
  }
  if (source.is_language_model() && !options.model_only) {
    for (const std::string& file : copy_tokenizer_files(source, tx.path())) result.files.emplace_back(file);
    write_file_atomic(tx.path() / "generation_config.json", generation_config(source, config, tx.path()).dump(2) + "\n");
    result.files.emplace_back("generation_config.json");
  }
  tx.commit();
  return result;
}

}  // namespace genesis::io
