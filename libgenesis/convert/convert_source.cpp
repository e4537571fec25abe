// Format detection and `genesis inspect` (headers only).
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "libgenesis/core/error.h"
#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/convert/convert.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/recipe/recipe.h"

namespace genesis::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool is_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

bool is_dir(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

bool has_weights(const fs::path& dir) {
  return is_file(dir / kWeightsFile) || is_file(dir / kWeightsIndexFile);
}

json read_json_object(const fs::path& path) {
  json value = json::parse(read_file(path, kMaxConfigFileBytes), nullptr, false);
  GENESIS_CHECK(!value.is_discarded() && value.is_object(), FormatError, "'", path.string(), "' is not a JSON object");
  return value;
}

// The classifier part of a recipe's model section (what rebuilds the model).
json classifier_config(const RecipeSpec::Model& model) {
  json config = {{"genesis_classifier", model.name}, {"dropout", model.dropout}};
  auto common = [&config](const auto& c) {
    config["input_shape"] = c.input_shape;
    config["num_classes"] = c.num_classes;
    config["activation"] = c.activation;
  };
  if (const auto* mlp = std::get_if<models::MlpConfig>(&model.config)) {
    common(*mlp);
    config["hidden"] = mlp->hidden;
  }
  if (const auto* cnn = std::get_if<models::CnnConfig>(&model.config)) {
    common(*cnn);
    config["channels"] = cnn->channels;
    config["fc"] = cnn->fc;
  }
  return config;
}

std::optional<RecipeSpec> parse_recipe_quietly(const ModelSource& source) {
  if (source.recipe_toml.empty()) return std::nullopt;
  try {
    return parse_recipe(source.recipe_toml, (source.dir / "recipe.toml").string());
  } catch (const RecipeError&) {
    return std::nullopt;
  }
}

// Fills architecture and config from config.json, else from the recipe.
void read_architecture(ModelSource& source) {
  if (is_file(source.dir / "config.json")) {
    source.config = read_json_object(source.dir / "config.json");
    if (source.config.contains("genesis_classifier") && source.config["genesis_classifier"].is_string()) {
      source.architecture = source.config["genesis_classifier"].get<std::string>();
    } else {
      GENESIS_CHECK(source.config.contains("model_type") && source.config["model_type"].is_string(), FormatError, "'",
                    (source.dir / "config.json").string(), "' has no model_type");
      source.architecture = source.config["model_type"].get<std::string>();
    }
    return;
  }
  // A recipe this build cannot read, or one of a language model (whose checkpoints carry their
  // config.json), leaves the architecture unknown: inspect still reports the tensors.
  if (std::optional<RecipeSpec> spec = parse_recipe_quietly(source);
      spec && (spec->model.name == "mlp" || spec->model.name == "cnn")) {
    source.architecture = spec->model.name;
    source.config = classifier_config(spec->model);
  }
}

std::string read_recipe_near(const fs::path& checkpoint, const std::optional<fs::path>& run_dir) {
  if (is_file(checkpoint / "recipe.toml")) return read_file(checkpoint / "recipe.toml");
  if (run_dir && is_file(*run_dir / "recipe.toml")) return read_file(*run_dir / "recipe.toml");
  return "";
}

[[noreturn]] void throw_unknown(const fs::path& path) {
  GENESIS_THROW(UsageError, "'", path.string(),
                "' is none of the known model formats; looked for: a .safetensors file, a Hugging Face model "
                "directory (config.json + model.safetensors or model.safetensors.index.json), a genesis checkpoint "
                "(model.safetensors + trainer.json, config.json or recipe.toml), a checkpoints directory "
                "(latest or step_<N>/) or a genesis run directory (checkpoints/)");
}

}  // namespace

ModelSource open_model_source(const fs::path& path) {
  std::error_code ec;
  GENESIS_CHECK(fs::exists(path, ec), UsageError, "'", path.string(), "' does not exist");
  ModelSource source;
  source.path = path;
  if (!is_dir(path)) {
    GENESIS_CHECK(is_file(path), UsageError, "'", path.string(), "' is neither a file nor a directory");
    // A shard index stands for the sharded model around it.
    if (path.filename() == kWeightsIndexFile && !is_file(path.parent_path() / kWeightsFile))
      return open_model_source(path.parent_path().empty() ? "." : path.parent_path());
    source.format = "safetensors";
    source.dir = path.parent_path();
    source.weights = WeightSet::open_file(path);
    return source;
  }
  std::optional<fs::path> run_dir;
  fs::path dir = path;
  if (is_dir(path / "checkpoints") && !has_weights(path)) {
    source.format = "genesis-run";
    run_dir = path;
    dir = resolve_checkpoint(path / "checkpoints");
  } else if (!has_weights(path) &&
             (fs::exists(fs::symlink_status(path / "latest", ec)) || !list_checkpoints(path).empty())) {
    source.format = "genesis-checkpoint";
    dir = resolve_checkpoint(path);
  }
  if (!has_weights(dir)) throw_unknown(path);
  source.dir = dir;
  source.weights = WeightSet::open_directory(dir);
  source.training = is_file(dir / "trainer.json");
  source.recipe_toml = read_recipe_near(dir, run_dir);
  read_architecture(source);
  if (source.format.empty()) {
    auto format = source.weights.metadata().find("format");
    const bool genesis_written = format != source.weights.metadata().end() && format->second == "genesis";
    const bool has_config = is_file(dir / "config.json");
    if (has_config && source.config.contains("genesis_classifier"))
      source.format = "classifier-export";
    else if (source.training || genesis_written || !source.recipe_toml.empty())
      source.format = "genesis-checkpoint";
    else if (has_config)
      source.format = "huggingface";
    else
      throw_unknown(path);
  }
  return source;
}

namespace {

uint64_t tensor_bytes(const TensorInfo& info) {
  return info.data_end - info.data_begin;
}

int64_t element_count(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Optimizer state names are "<parameter>.<slot>": the slots and how many tensors each has.
json optimizer_summary(const fs::path& file, const WeightSet& model) {
  SafetensorsFile optimizer(file);
  std::map<std::string, int64_t> slots;
  uint64_t bytes = 0;
  for (const std::string& name : optimizer.names()) {
    bytes += tensor_bytes(optimizer.info(name));
    std::string slot = name;
    for (size_t dot = name.rfind('.'); dot != std::string::npos && dot > 0; dot = name.rfind('.', dot - 1)) {
      if (model.contains(name.substr(0, dot))) {
        slot = name.substr(dot + 1);
        break;
      }
    }
    ++slots[slot];
  }
  json out = {{"tensors", optimizer.names().size()}, {"bytes", bytes}, {"slots", slots}};
  auto kind = optimizer.metadata().find("optimizer");
  if (kind != optimizer.metadata().end()) out["kind"] = kind->second;
  return out;
}

json training_summary(const ModelSource& source) {
  const json trainer = read_json_object(source.dir / "trainer.json");
  json out = {{"trainer", trainer}};
  if (trainer.contains("step")) out["step"] = trainer["step"];
  json optimizer = json::object();
  if (trainer.contains("optimizer")) optimizer["kind"] = trainer["optimizer"];
  if (trainer.contains("optimizer_steps")) optimizer["steps"] = trainer["optimizer_steps"];
  if (is_file(source.dir / "optimizer.safetensors"))
    optimizer.update(optimizer_summary(source.dir / "optimizer.safetensors", source.weights));
  out["optimizer"] = optimizer;
  json scheduler = json::object();
  if (trainer.contains("scheduler")) scheduler["name"] = trainer["scheduler"];
  if (trainer.contains("optimizer_steps")) scheduler["step"] = trainer["optimizer_steps"];
  if (std::optional<RecipeSpec> spec = parse_recipe_quietly(source)) {
    scheduler["base_lr"] = spec->optimizer.lr;
    scheduler["warmup_steps"] = spec->scheduler.warmup_steps;
    scheduler["min_lr_factor"] = spec->scheduler.min_lr_factor;
    if (spec->training.steps_given())
      scheduler["total_steps"] = spec->training.steps;
    else
      scheduler["epochs"] = spec->training.epochs;
  }
  out["scheduler"] = scheduler;
  return out;
}

}  // namespace

json inspect_model(const fs::path& path) {
  const ModelSource source = open_model_source(path);
  json report = {{"path", path.string()}, {"format", source.format}};
  if (source.dir != path && source.format != "safetensors") report["checkpoint"] = source.dir.string();
  report["architecture"] = source.architecture.empty() ? json() : json(source.architecture);
  report["config"] = source.config;
  json files = json::array();
  for (const fs::path& file : source.weights.files()) files.push_back(file.filename().string());
  if (source.weights.sharded()) files.push_back(source.weights.index_path().filename().string());
  report["weight_files"] = files;
  report["metadata"] = source.weights.metadata();
  json tensors = json::array();
  int64_t parameters = 0;
  uint64_t bytes = 0;
  for (const std::string& name : source.weights.names()) {
    const TensorInfo& info = source.weights.info(name);
    const int64_t count = element_count(info.shape);
    parameters += count;
    bytes += tensor_bytes(info);
    tensors.push_back({{"name", name},
                       {"dtype", info.dtype},
                       {"shape", info.shape},
                       {"parameters", count},
                       {"bytes", tensor_bytes(info)},
                       {"file", source.weights.file_of(name).filename().string()}});
  }
  report["tensors"] = tensors;
  report["tensor_count"] = tensors.size();
  report["total_parameters"] = parameters;
  report["total_bytes"] = bytes;
  if (source.training) report["training"] = training_summary(source);
  return report;
}

namespace {

std::string with_commas(uint64_t value) {
  const std::string digits = std::to_string(value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string shape_text(const json& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i].get<int64_t>());
  return out + "]";
}

}  // namespace

std::string format_inspect_report(const json& report) {
  std::ostringstream out;
  auto line = [&](const char* key, const std::string& value) {
    char label[16];
    std::snprintf(label, sizeof(label), "%-14s", key);
    out << label << value << "\n";
  };
  line("path", report["path"].get<std::string>());
  line("format", report["format"].get<std::string>());
  if (report.contains("checkpoint")) line("checkpoint", report["checkpoint"].get<std::string>());
  line("architecture", report["architecture"].is_null() ? "unknown" : report["architecture"].get<std::string>());
  if (!report["config"].is_null()) line("config", report["config"].dump());
  std::string files;
  for (const json& file : report["weight_files"]) files += (files.empty() ? "" : ", ") + file.get<std::string>();
  line("files", files);
  line("tensors", std::to_string(report["tensor_count"].get<size_t>()) + " tensors, " +
                      with_commas(report["total_parameters"].get<uint64_t>()) + " parameters, " +
                      with_commas(report["total_bytes"].get<uint64_t>()) + " bytes");
  if (report.contains("training")) {
    const json& training = report["training"];
    if (training.contains("step")) line("step", std::to_string(training["step"].get<int64_t>()));
    static const json kNone = json::object();
    const json& optimizer = training.contains("optimizer") && training["optimizer"].is_object() ? training["optimizer"] : kNone;
    std::string text = optimizer.contains("kind") && optimizer["kind"].is_string() ? optimizer["kind"].get<std::string>()
                                                                                   : std::string("unknown");
    if (optimizer.contains("steps")) text += ", " + std::to_string(optimizer["steps"].get<int64_t>()) + " steps";
    if (optimizer.contains("slots")) {
      text += ", slots";
      for (const auto& [slot, count] : optimizer["slots"].items())
        text += " " + slot + "(" + std::to_string(count.get<int64_t>()) + ")";
    }
    line("optimizer", text);
    line("scheduler", training["scheduler"].dump());
  }
  size_t name_width = 4, dtype_width = 5, shape_width = 5;
  for (const json& t : report["tensors"]) {
    name_width = std::max(name_width, t["name"].get<std::string>().size());
    dtype_width = std::max(dtype_width, t["dtype"].get<std::string>().size());
    shape_width = std::max(shape_width, shape_text(t["shape"]).size());
  }
  auto row = [&](const std::string& name, const std::string& dtype, const std::string& shape,
                 const std::string& bytes) {
    out << "  " << name << std::string(name_width - name.size() + 2, ' ') << dtype
        << std::string(dtype_width - dtype.size() + 2, ' ') << shape << std::string(shape_width - shape.size() + 2, ' ')
        << bytes << "\n";
  };
  row("name", "dtype", "shape", "bytes");
  for (const json& t : report["tensors"])
    row(t["name"].get<std::string>(), t["dtype"].get<std::string>(), shape_text(t["shape"]),
        with_commas(t["bytes"].get<uint64_t>()));
  return out.str();
}

}  // namespace genesis::io
