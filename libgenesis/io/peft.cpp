// PEFT's LoRA adapter directory (adapter_model.safetensors + adapter_config.json), written and read.
#include "libgenesis/io/peft.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <type_traits>

#include "libgenesis/core/error.h"
#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/json_text.h"
#include "libgenesis/io/safetensors.h"

namespace genesis::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kPrefix = "base_model.model.";
// What to do about a valid PEFT adapter that genesis cannot apply.
constexpr const char* kMergeAdvice =
    "merge the adapter into its base model with PEFT's merge_and_unload() and convert the merged model instead";

struct LoraName {
  std::string module;
  char side;  // 'A' or 'B'
};

// "<module>.lora_A.weight" -> {module, 'A'}; with `in_memory`, also PEFT's "<module>.lora_A.default.weight".
std::optional<LoraName> parse_lora_name(std::string_view name, bool in_memory) {
  auto strip = [&name](std::string_view suffix) {
    const bool found = name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
    if (found) name.remove_suffix(suffix.size());
    return found;
  };
  if (!strip(".weight")) return std::nullopt;
  if (in_memory) strip(".default");
  if (strip(".lora_A")) return LoraName{std::string(name), 'A'};
  if (strip(".lora_B")) return LoraName{std::string(name), 'B'};
  return std::nullopt;
}

std::string genesis_name(const LoraName& n) {
  return n.module + ".lora_" + n.side + ".weight";
}

// True when `module` (a dotted name) is `target` or ends with "." + target, as PEFT matches a
// target_modules list entry.
bool target_matches(const std::string& module, const std::string& target) {
  if (module == target) return true;
  return module.size() > target.size() && module.compare(module.size() - target.size(), target.size(), target) == 0 &&
         module[module.size() - target.size() - 1] == '.';
}

std::string last_component(const std::string& module) {
  const size_t dot = module.rfind('.');
  return dot == std::string::npos ? module : module.substr(dot + 1);
}

// The tensors grouped by module as (lora_A, lora_B) pairs, checked: every tensor is a floating-point
// lora_A/lora_B matrix, each module has both, and lora_A's rows equal lora_B's columns (the rank).
// Problems throw ErrorT prefixed with `where`.
struct LoraPair {
  Tensor a, b;
  int64_t rank() const { return a.shape()[0]; }
};
template <class ErrorT>
std::map<std::string, LoraPair> lora_pairs(const std::vector<NamedTensor>& tensors, const std::string& where) {
  std::map<std::string, LoraPair> pairs;
  for (const NamedTensor& t : tensors) {
    if (t.name.rfind(kPrefix, 0) == 0)
      throw ErrorT(detail::concat(where, "tensor '", t.name, "' already has PEFT's prefix ", kPrefix,
                                  "; genesis names leave it out"));
    const std::optional<LoraName> n = parse_lora_name(t.name, false);
    if (!n)
      throw ErrorT(detail::concat(where, "tensor '", t.name,
                                  "' is not a LoRA weight (a name ending in .lora_A.weight or .lora_B.weight)"));
    if (!t.tensor.defined()) throw ErrorT(detail::concat(where, "tensor '", t.name, "' is undefined"));
    if (!is_floating(t.tensor.dtype()) || t.tensor.dim() != 2)
      throw ErrorT(detail::concat(where, "tensor '", t.name, "' is ", dtype_name(t.tensor.dtype()), " ",
                                  t.tensor.shape(), "; a LoRA weight is a floating-point matrix"));
    Tensor& slot = n->side == 'A' ? pairs[n->module].a : pairs[n->module].b;
    if (slot.defined()) throw ErrorT(detail::concat(where, "tensor '", t.name, "' appears twice"));
    slot = t.tensor;
  }
  if (pairs.empty()) throw ErrorT(detail::concat(where, "no LoRA tensors (lora_A/lora_B weights)"));
  for (const auto& [module, pair] : pairs) {
    if (!pair.a.defined() || !pair.b.defined())
      throw ErrorT(detail::concat(where, "module '", module, "' has lora_", pair.a.defined() ? 'A' : 'B',
                                  " but no lora_", pair.a.defined() ? 'B' : 'A', " weight; an adapter needs both"));
    if (pair.a.shape()[0] != pair.b.shape()[1])
      throw ErrorT(detail::concat(where, "module '", module, "': lora_A is ", pair.a.shape(), " and lora_B ",
                                  pair.b.shape(), "; lora_A [r, in] and lora_B [out, r] must have the same rank r"));
  }
  return pairs;
}

// Throws ErrorT unless every module's rank is r.
template <class ErrorT>
void require_rank(const std::map<std::string, LoraPair>& pairs, int64_t r, const std::string& where) {
  for (const auto& [module, pair] : pairs)
    if (pair.rank() != r)
      throw ErrorT(detail::concat(where, "r is ", r, " but module '", module, "' has rank ", pair.rank(), " (lora_A ",
                                  pair.a.shape(), ", lora_B ", pair.b.shape(), "): r and the tensors must agree"));
}

std::set<std::string> module_names(const std::map<std::string, LoraPair>& pairs) {
  std::set<std::string> names;
  for (const auto& entry : pairs) names.insert(entry.first);
  return names;
}

// Throws ErrorT unless each adapted module is matched by an entry of `targets` ("all-linear" matches all).
template <class ErrorT>
void require_targeted(const std::set<std::string>& modules, const std::vector<std::string>& targets,
                      const std::string& where) {
  if (targets.size() == 1 && targets[0] == "all-linear") return;
  for (const std::string& module : modules) {
    if (std::none_of(targets.begin(), targets.end(), [&](const std::string& t) { return target_matches(module, t); }))
      throw ErrorT(detail::concat(where, "module '", module, "' has adapter weights but no entry of target_modules ",
                                  json(targets).dump(), " matches it"));
  }
}

// ---- writing ---------------------------------------------------------------------------------

json target_modules_json(const PeftAdapter& adapter, const std::map<std::string, LoraPair>& pairs) {
  if (!adapter.target_modules_regex.empty()) return adapter.target_modules_regex;
  const std::vector<std::string>& targets = adapter.options.targets;
  if (targets.size() == 1 && targets[0] == "all-linear") {
    // What PEFT itself saves for "all-linear": the names of the linear layers it adapted.
    std::set<std::string> names;
    for (const auto& [module, pair] : pairs) names.insert(last_component(module));
    return names;
  }
  return targets;
}

json peft_config_json(const PeftAdapter& adapter, const std::map<std::string, LoraPair>& pairs) {
  const nn::LoraOptions& o = adapter.options;
  json alpha = o.alpha;
  if (o.alpha == std::floor(o.alpha) && std::abs(o.alpha) < 1e15) alpha = static_cast<int64_t>(o.alpha);
  // The keys PEFT's LoraConfig (and PeftConfig) write for a plain LoRA adapter; nlohmann's objects
  // keep their keys sorted, as PEFT writes them.
  return json{{"alpha_pattern", json::object()},
              {"auto_mapping", nullptr},
              {"base_model_name_or_path", adapter.base_model.empty() ? json() : json(adapter.base_model)},
              {"bias", "none"},
              {"fan_in_fan_out", adapter.fan_in_fan_out},
              {"inference_mode", true},
              {"init_lora_weights", o.init == "gaussian" ? json("gaussian") : json(true)},
              {"layers_pattern", nullptr},
              {"layers_to_transform", nullptr},
              {"lora_alpha", alpha},
              {"lora_dropout", o.dropout},
              {"modules_to_save", nullptr},
              {"peft_type", "LORA"},
              {"r", o.r},
              {"rank_pattern", json::object()},
              {"revision", nullptr},
              {"target_modules", target_modules_json(adapter, pairs)},
              {"task_type", "CAUSAL_LM"},
              {"use_dora", false},
              {"use_rslora", o.use_rslora}};
}

void write_peft_files(const fs::path& dir, const PeftAdapter& adapter, const json& config) {
  NamedTensors tensors;
  for (const NamedTensor& t : adapter.tensors) tensors.emplace_back(std::string(kPrefix) + t.name, t.tensor);
  // safetensors.torch.save_file's metadata, which PEFT writes too.
  save_safetensors(dir / kPeftWeightsFile, tensors, {{"format", "pt"}});
  write_file_atomic(dir / kPeftConfigFile, config.dump(2) + "\n");
}

// ---- reading ---------------------------------------------------------------------------------

// config[key] unless missing or null.
const json* field(const json& config, const char* key) {
  auto it = config.find(key);
  return it == config.end() || it->is_null() ? nullptr : &*it;
}

// A setting of a valid PEFT adapter that genesis cannot apply yet: its key, which values, and why.
struct Unsupported {
  const char* key;
  bool (*refused)(const json& value);
  const char* why;
};

bool is_true(const json& value) {
  return value.is_boolean() && value.get<bool>();
}
bool non_empty(const json& value) {
  return !((value.is_object() || value.is_array() || value.is_string()) && value.empty());
}
// PiSSA, OLoRA, CorDA and LoftQ rewrite the base weights when they initialize the adapter.
bool changes_base(const json& value) {
  if (!value.is_string()) return false;
  const std::string name = value.get<std::string>();
  return name.rfind("pissa", 0) == 0 || name == "olora" || name == "corda" || name == "loftq";
}

constexpr const char* kSameRank = "genesis gives every module the same r and lora_alpha";
constexpr const char* kTargetsOnly = "genesis adapts every module that target_modules names, and nothing else";
constexpr Unsupported kUnsupported[] = {
    {"use_dora", is_true, "DoRA: genesis applies plain LoRA, without DoRA's magnitude vectors"},
    {"rank_pattern", non_empty, kSameRank},
    {"alpha_pattern", non_empty, kSameRank},
    {"bias", [](const json& value) { return value != "none"; }, "the adapter carries trained biases of the base model"},
    {"lora_bias", is_true, "genesis's lora_B has no bias"},
    {"modules_to_save", non_empty, "the adapter carries full copies of those modules"},
    {"layers_to_transform", non_empty, kTargetsOnly},
    {"exclude_modules", non_empty, kTargetsOnly},
    {"layer_replication", non_empty, kTargetsOnly},
    {"target_parameters", non_empty, kTargetsOnly},
    {"trainable_token_indices", non_empty, "the adapter carries trained rows of the embedding"},
    {"use_qalora", is_true, "QALoRA pools the adapter's input"},
    {"init_lora_weights", changes_base,
     "this initialization changed the base model's weights, which the adapter needs"},
};

void refuse_unsupported(const json& config, const fs::path& file) {
  for (const Unsupported& u : kUnsupported)
    if (const json* value = field(config, u.key); value && u.refused(*value))
      GENESIS_THROW(NotImplementedError, "'", file.string(), "': ", u.key, " ", value->dump(),
                    " is not supported yet (", u.why, "); ", kMergeAdvice);
}

json read_config(const fs::path& file) {
  json config;
  try {
    config = json::parse(read_file(file, kMaxConfigFileBytes));
  } catch (const json::exception& e) {
    GENESIS_THROW(FormatError, "'", file.string(), "': invalid JSON: ", json_error_text(e));
  }
  GENESIS_CHECK(config.is_object(), FormatError, "'", file.string(), "' is not a JSON object");
  const json* type = field(config, "peft_type");
  GENESIS_CHECK(type && type->is_string(), FormatError, "'", file.string(),
                "' has no peft_type: not a PEFT adapter config");
  GENESIS_CHECK(*type == "LORA", NotImplementedError, "'", file.string(), "' is a PEFT ", type->get<std::string>(),
                " adapter; genesis reads LoRA adapters (peft_type \"LORA\") only");
  refuse_unsupported(config, file);
  return config;
}

// PEFT's default for a missing key, else the value of the expected JSON kind (FormatError otherwise).
template <class T>
T config_value(const json& config, const char* key, T fallback, const fs::path& file) {
  const json* value = field(config, key);
  if (!value) return fallback;
  const bool ok = std::is_same_v<T, bool>      ? value->is_boolean()
                  : std::is_same_v<T, int64_t> ? value->is_number_integer()
                  : std::is_same_v<T, double>  ? value->is_number()
                                               : value->is_string();
  GENESIS_CHECK(ok, FormatError, "'", file.string(), "': ", key, " is ", value->dump(), ", not ",
                std::is_same_v<T, bool>      ? "a boolean"
                : std::is_same_v<T, int64_t> ? "an integer"
                : std::is_same_v<T, double>  ? "a number"
                                             : "a string");
  return value->get<T>();
}

// Sets options.targets (and adapter.target_modules_regex) from target_modules and the adapted
// `modules`; see peft.h.
void read_targets(const json& config, const std::set<std::string>& modules, PeftAdapter& adapter,
                  const fs::path& file) {
  const json* targets = field(config, "target_modules");
  std::vector<std::string>& out = adapter.options.targets;
  if (!targets) {
    std::set<std::string> names;
    for (const std::string& module : modules) names.insert(last_component(module));
    out.assign(names.begin(), names.end());
  } else if (targets->is_string()) {
    const std::string text = targets->get<std::string>();
    GENESIS_CHECK(!text.empty(), FormatError, "'", file.string(), "': target_modules is an empty string");
    if (text == "all-linear") {
      out = {text};
    } else {
      adapter.target_modules_regex = text;
      out.assign(modules.begin(), modules.end());
    }
  } else {
    GENESIS_CHECK(targets->is_array() && !targets->empty() &&
                      std::all_of(targets->begin(), targets->end(), [](const json& t) { return t.is_string(); }),
                  FormatError, "'", file.string(), "': target_modules is ", targets->dump(),
                  "; PEFT writes a list of module names or one regular expression");
    out = targets->get<std::vector<std::string>>();
    require_targeted<FormatError>(modules, out, "'" + file.string() + "': ");
  }
}

// The adapter that `config` (read_config's, from `file`) describes, without tensors; `modules`
// are the modules it adapts.
PeftAdapter adapter_of_config(const json& config, const fs::path& file, const std::set<std::string>& modules) {
  PeftAdapter adapter;
  nn::LoraOptions& o = adapter.options;
  o.r = config_value<int64_t>(config, "r", 8, file);
  GENESIS_CHECK(o.r > 0, FormatError, "'", file.string(), "': r must be positive, got ", o.r);
  o.alpha = config_value<double>(config, "lora_alpha", 8.0, file);
  o.dropout = config_value<double>(config, "lora_dropout", 0.0, file);
  GENESIS_CHECK(std::isfinite(o.alpha) && o.dropout >= 0.0 && o.dropout < 1.0, FormatError, "'", file.string(),
                "': lora_alpha ", o.alpha, " and lora_dropout ", o.dropout, " must be finite, the dropout in [0, 1)");
  o.use_rslora = config_value<bool>(config, "use_rslora", false, file);
  const json* init = field(config, "init_lora_weights");
  o.init = init && *init == "gaussian" ? "gaussian" : "default";
  read_targets(config, modules, adapter, file);
  adapter.base_model = config_value<std::string>(config, "base_model_name_or_path", "", file);
  adapter.fan_in_fan_out = config_value<bool>(config, "fan_in_fan_out", false, file);
  return adapter;
}

}  // namespace

void write_peft_adapter(const fs::path& dir, const PeftAdapter& adapter, bool overwrite) {
  const std::string where = "write_peft_adapter: ";
  const nn::LoraOptions& o = adapter.options;
  GENESIS_CHECK(o.r > 0, ValueError, where, "r must be positive, got ", o.r);
  GENESIS_CHECK(std::isfinite(o.alpha), ValueError, where, "alpha must be finite, got ", o.alpha);
  GENESIS_CHECK(o.dropout >= 0.0 && o.dropout < 1.0, ValueError, where, "dropout must be in [0, 1), got ", o.dropout);
  GENESIS_CHECK(!o.targets.empty() || !adapter.target_modules_regex.empty(), ValueError, where,
                "no target modules (options.targets is empty)");
  const std::map<std::string, LoraPair> pairs = lora_pairs<ValueError>(adapter.tensors, where);
  require_rank<ValueError>(pairs, o.r, where);
  if (adapter.target_modules_regex.empty()) require_targeted<ValueError>(module_names(pairs), o.targets, where);
  const json config = peft_config_json(adapter, pairs);

  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) {
    DirectoryTransaction tx(dir);
    write_peft_files(tx.path(), adapter, config);
    tx.commit();
    return;
  }
  GENESIS_CHECK(fs::is_directory(dir, ec), UsageError, "adapter destination '", dir.string(),
                "' exists and is not a directory");
  GENESIS_CHECK(overwrite || fs::is_empty(dir, ec), UsageError, "adapter destination '", dir.string(),
                "' already exists and is not empty (pass --overwrite to replace its adapter files)");
  write_peft_files(dir, adapter, config);
}

PeftAdapter read_peft_adapter(const fs::path& dir) {
  const fs::path config_file = dir / kPeftConfigFile, weights_file = dir / kPeftWeightsFile;
  std::error_code ec;
  GENESIS_CHECK(fs::is_directory(dir, ec), IoError, "'", dir.string(),
                "' is not a directory; a PEFT adapter is a directory holding ", kPeftConfigFile, " and ",
                kPeftWeightsFile);
  GENESIS_CHECK(fs::is_regular_file(config_file, ec), IoError, "'", dir.string(), "' has no ", kPeftConfigFile,
                ": not a PEFT adapter directory (PEFT's save_pretrained writes ", kPeftConfigFile, " and ",
                kPeftWeightsFile, ")");
  GENESIS_CHECK(fs::is_regular_file(weights_file, ec) || !fs::exists(dir / "adapter_model.bin", ec), IoError, "'",
                dir.string(),
                "' holds adapter_model.bin (a PyTorch pickle), which genesis does not read; save the "
                "adapter again with PEFT's save_pretrained(safe_serialization=True)");
  GENESIS_CHECK(fs::is_regular_file(weights_file, ec), IoError, "'", dir.string(), "' has no ", kPeftWeightsFile,
                " beside its ", kPeftConfigFile, "; copy the adapter's weights there");
  const json config = read_config(config_file);  // the config's errors first

  const SafetensorsFile file(weights_file);
  const std::string in_weights = "'" + weights_file.string() + "': ";
  std::vector<NamedTensor> tensors;
  for (const std::string& stored : file.names()) {
    const std::optional<LoraName> n = stored.rfind(kPrefix, 0) == 0
                                          ? parse_lora_name(std::string_view(stored).substr(kPrefix.size()), true)
                                          : std::nullopt;
    GENESIS_CHECK(n, FormatError, in_weights, "tensor '", stored, "' is not a LoRA weight (PEFT names them ", kPrefix,
                  "<module>.lora_A.weight and .lora_B.weight)");
    const std::optional<DType> dtype = dtype_from_safetensors(file.info(stored).dtype);
    GENESIS_CHECK(dtype && is_floating(*dtype), FormatError, in_weights, "tensor '", stored, "' is ",
                  file.info(stored).dtype, "; LoRA weights are F32, BF16, F16 or F64");
    Tensor tensor = file.tensor(stored);
    require_finite(tensor, stored, weights_file);
    tensors.push_back({genesis_name(*n), tensor});
  }
  std::sort(tensors.begin(), tensors.end(), [](const NamedTensor& a, const NamedTensor& b) { return a.name < b.name; });
  const std::map<std::string, LoraPair> pairs = lora_pairs<FormatError>(tensors, in_weights);
  PeftAdapter adapter = adapter_of_config(config, config_file, module_names(pairs));
  require_rank<FormatError>(pairs, adapter.options.r, "'" + config_file.string() + "': ");
  adapter.tensors = std::move(tensors);
  return adapter;
}

PeftAdapter read_peft_config(const fs::path& dir, const std::set<std::string>& modules) {
  const fs::path config_file = dir / kPeftConfigFile;
  std::error_code ec;
  GENESIS_CHECK(fs::is_regular_file(config_file, ec), IoError, "'", dir.string(), "' has no ", kPeftConfigFile,
                ": not a PEFT adapter directory (PEFT's save_pretrained writes ", kPeftConfigFile, " and ",
                kPeftWeightsFile, ")");
  return adapter_of_config(read_config(config_file), config_file, modules);
}

std::vector<std::string> apply_peft_adapter(nn::Module& model, const PeftAdapter& adapter) {
  std::set<std::string> modules;
  for (const NamedTensor& t : adapter.tensors) {
    const size_t cut = t.name.rfind(".lora_");
    GENESIS_CHECK(cut != std::string::npos, ValueError, "adapter tensor '", t.name, "' is not a LoRA factor");
    modules.insert(t.name.substr(0, cut));
  }
  nn::LoraOptions options = adapter.options;
  options.targets.assign(modules.begin(), modules.end());  // full names: each matches itself only
  std::vector<std::string> adapted = nn::add_lora(model, options);
  try {
    model.load_state_dict(adapter.tensors, nn::Params::trainable);
  } catch (const ShapeError& e) {
    GENESIS_THROW(ValueError, "the adapter does not fit the model: ", e.what());
  }
  return adapted;
}

}  // namespace genesis::io
