// Per-rank memory of a training run, estimated from its recipe (train/memory_estimate.h).
#include "libgenesis/train/memory_estimate.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/autograd/engine.h"
#include "libgenesis/convert/convert.h"
#include "libgenesis/io/peft.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/quant.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/activation_estimate.h"
#include "libgenesis/train/step.h"
#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis::train {

namespace {

#if GENESIS_WITH_CUDA
// The host memory Linux says can be had without swapping (MemAvailable), when it says.
std::optional<int64_t> host_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line))
    if (line.starts_with("MemAvailable:")) return std::strtoll(line.c_str() + 13, nullptr, 10) * 1024;  // kB
  return std::nullopt;
}
#endif

// One parameter of the model as the run stores it.
struct ParamEntry {
  std::string name;
  int64_t numel = 0;
  bool trainable = true;
  bool nf4 = false;
};

// The module a parameter belongs to ("a.b.weight" -> "a.b").
std::string module_of(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

// Whether a layout tensor is the weight of a linear layer of a decoder block (the layers LoRA adapts
// and QLoRA quantizes): a matrix under a numbered block. Embeddings and the head are outside them.
bool block_linear_weight(const std::string& name, const Shape& shape) {
  if (shape.size() != 2 || !name.ends_with(".weight")) return false;
  size_t start = 0;
  while (start < name.size()) {
    const size_t end = std::min(name.find('.', start), name.size());
    const std::string_view part(name.data() + start, end - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(c) != 0; }))
      return true;
    start = end + 1;
  }
  return false;
}

// The adapters a recipe adds, by module: LoRA's r. model.adapter's tensors, or [lora]'s targets
// among the block linears.
std::map<std::string, int64_t> adapter_ranks(const RecipeSpec& spec,
                                             const std::vector<std::pair<std::string, Shape>>& tensors) {
  std::map<std::string, int64_t> ranks;
  if (!spec.model.adapter.empty()) {
    for (const NamedTensor& t : io::read_peft_adapter(spec.model.adapter).tensors)
      if (t.name.ends_with(".lora_A.weight")) ranks[module_of(module_of(t.name))] = t.tensor.size(0);
    return ranks;
  }
  if (!spec.lora.enabled()) return ranks;
  const std::vector<std::string>& targets = spec.lora.targets;
  const bool every = std::find(targets.begin(), targets.end(), "all-linear") != targets.end();
  for (const auto& [name, shape] : tensors) {
    if (!block_linear_weight(name, shape)) continue;
    const std::string module = module_of(name);
    if (every || std::any_of(targets.begin(), targets.end(),
                             [&](const std::string& p) { return nn::lora_pattern_matches(module, p); }))
      ranks[module] = spec.lora.r;
  }
  return ranks;
}

// A language model's parameters from its config's layout: training.freeze, the adapters and QLoRA's
// NF4 base applied by name, as recipe::build_model applies them to the model.
std::vector<ParamEntry> language_model_parameters(const RecipeSpec& spec, const nlohmann::json& config,
                                                  std::map<std::string, int64_t>& ranks) {
  const io::LanguageModelLayout layout = io::language_model_layout(config);
  ranks = adapter_ranks(spec, layout.tensors);
  const bool adapters = spec.trains_adapters(), nf4 = spec.lora.base_quant == "nf4";
  std::vector<ParamEntry> params;
  for (const auto& [name, shape] : layout.tensors) {
    ParamEntry p{name, numel_of(shape), !adapters, nf4 && block_linear_weight(name, shape)};
    for (const std::string& pattern : spec.training.freeze) p.trainable &= name.find(pattern) == std::string::npos;
    params.push_back(p);
    const auto rank = ranks.find(module_of(name));
    if (rank != ranks.end() && name.ends_with(".weight") && shape.size() == 2)  // A [r, in] and B [out, r]
      params.push_back({module_of(name) + ".lora_A+B.weight", rank->second * (shape[0] + shape[1]), true, false});
  }
  return params;
}

// A classifier's parameters, from the model itself (a few MB): build_model applies everything.
std::vector<ParamEntry> classifier_parameters(const nn::Module& model) {
  std::vector<ParamEntry> params;
  for (const nn::ParameterInfo& p : model.parameter_info())
    params.push_back({p.name, p.numel, p.trainable, p.quantized});
  return params;
}

// A classifier's activations: what one example's forward keeps for the backward (traced on the
// CPU), times the batch.
int64_t classifier_activations(const RecipeSpec& spec, nn::Module& model) {
  const Shape input = std::visit(
      [](const auto& c) -> Shape {
        if constexpr (requires { c.input_shape; }) return c.input_shape;
        return {};
      },
      spec.model.config);
  Shape batch_of_one{1};
  batch_of_one.insert(batch_of_one.end(), input.begin(), input.end());
  model.train();
  AutocastGuard autocast(recipe::amp_dtype(spec));
  const Tensor loss = training_loss(model(zeros(batch_of_one)), zeros({1}, {.dtype = DType::i64}), Reduction::sum);
  return static_cast<int64_t>(saved_storage_bytes(loss, model.parameters())) * spec.training.batch_size;
}

int64_t optimizer_slots(const RecipeSpec::Optimizer& o) {
  if (o.name == "adam" || o.name == "adamw") return o.amsgrad ? 3 : 2;
  if (o.name == "sgd") return o.momentum != 0 ? 1 : 0;
  if (o.name == "lion") return 1;
  return 0;
}

int64_t shard(int64_t bytes, int64_t world, bool sharded) {
  return sharded && world > 1 ? (bytes + world - 1) / world : bytes;
}

std::string bytes_text(int64_t bytes) {
  char text[32];
  const auto b = static_cast<double>(bytes);
  if (bytes >= int64_t{1} << 30)
    std::snprintf(text, sizeof text, "%.2f GiB", b / (1 << 30));
  else
    std::snprintf(text, sizeof text, "%.1f MiB", b / (1 << 20));
  return text;
}

std::string count_text(int64_t n) {
  char text[32];
  const auto v = static_cast<double>(n);
  if (n >= 1'000'000'000)
    std::snprintf(text, sizeof text, "%.2fB", v / 1e9);
  else if (n >= 1'000'000)
    std::snprintf(text, sizeof text, "%.1fM", v / 1e6);
  else if (n >= 1'000)
    std::snprintf(text, sizeof text, "%.1fK", v / 1e3);
  else
    std::snprintf(text, sizeof text, "%lld", static_cast<long long>(n));
  return text;
}

nlohmann::json activation_json(const ActivationBytes& a) {
  return {{"saved", a.saved}, {"head", a.head}, {"backward", a.backward}, {"total", a.total()}};
}

}  // namespace

const ActivationBytes& MemoryEstimate::activations() const {
  return checkpointing == "full" ? full : checkpointing == "selective" ? selective : none;
}

int64_t MemoryEstimate::total_bytes() const {
  const int64_t act = activations().total();
  return parameter_bytes() + (optimizer_offloaded ? 0 : optimizer_bytes) +
         (gradients_overlap ? std::max(gradient_bytes, act) : gradient_bytes + act);
}

MemoryEstimate estimate_memory(const RecipeSpec& spec, const MemoryEstimateOptions& options) {
  MemoryEstimate e;
  e.model = spec.model.name;
  e.device = options.device.is_cuda() ? "cuda" : "cpu";
  e.world_size = std::max<int64_t>(1, options.world_size);
  e.zero = spec.dist.zero;
  e.amp_dtype = spec.amp.dtype;
  e.batch_size = spec.training.batch_size;
  const DType frozen = recipe::frozen_dtype(spec);
  e.frozen_dtype = dtype_name(frozen);
  const auto frozen_bytes = static_cast<int64_t>(dtype_size(frozen));

  std::vector<ParamEntry> params;
  std::map<std::string, int64_t> ranks;
  nlohmann::json config;
  std::shared_ptr<nn::Module> classifier;
  if (spec.model.is_language_model()) {
    config = nlohmann::json::parse(recipe::language_model_config_json(spec));
    params = language_model_parameters(spec, config, ranks);
  } else {
    classifier = recipe::build_model(spec, kCPU);
    params = classifier_parameters(*classifier);
  }
  std::map<std::string, const ParamEntry*> by_name;
  for (const ParamEntry& p : params) {
    by_name[p.name] = &p;
    if (p.trainable) {
      e.trainable_parameters += p.numel;
      e.trainable_bytes += 4 * p.numel;
    } else {
      e.frozen_parameters += p.numel;
      e.quantized_parameters += p.nf4 ? p.numel : 0;
      e.frozen_bytes += p.nf4 ? Nf4Weight::bytes_for(p.numel) : frozen_bytes * p.numel;
    }
  }
  e.optimizer_slots = optimizer_slots(spec.optimizer);
  e.optimizer_offloaded = spec.dist.offload_optimizer;
  e.gradient_bytes = shard(4 * e.trainable_parameters, e.world_size, e.zero >= 2);
  e.optimizer_bytes = shard(4 * e.optimizer_slots * e.trainable_parameters, e.world_size, e.zero >= 1);
  if (e.zero >= 3 && e.world_size > 1) {
    // Unit 0 (outside the decoder blocks) whole for the step, and about three blocks at a time,
    // their frozen parameters included.
    static const std::regex block(R"(\.(layers|h)\.(\d+)\.)");
    std::map<std::string, int64_t> blocks;
    int64_t outside = 0;
    for (const ParamEntry& p : params) {
      // A frozen base is sharded with its unit (in its own bytes) and gathered with it.
      const int64_t bytes =
          p.trainable ? 4 * p.numel : p.nf4 ? Nf4Weight::bytes_for(p.numel) : frozen_bytes * p.numel;
      std::smatch m;
      if (std::regex_search(p.name, m, block)) blocks[m[2].str()] += bytes;
      else outside += bytes;
    }
    int64_t largest = 0;
    for (const auto& [index, bytes] : blocks) largest = std::max(largest, bytes);
    const int64_t units = std::min<int64_t>(3, static_cast<int64_t>(blocks.size()));
    e.gathered_bytes = (outside + units * largest) - shard(outside + units * largest, e.world_size, true);
  }
  e.trainable_bytes = shard(e.trainable_bytes, e.world_size, e.zero >= 3);
  e.frozen_bytes = shard(e.frozen_bytes, e.world_size, e.zero >= 3 && spec.model.is_language_model());
  e.gradients_overlap = options.device.is_cuda() && e.world_size == 1 && spec.training.grad_accum_steps <= 1;

  if (classifier) {
    e.none = e.full = e.selective = {classifier_activations(spec, *classifier), 0, 0};
    return e;
  }
  e.checkpointing = spec.training.activation_checkpointing;
  e.seq_len = spec.data.seq_len;
  const std::optional<DType> amp = recipe::amp_dtype(spec);
  auto layer = [&](const std::string& module) {
    detail::LinearLayer l;
    const auto it = by_name.find(module + ".weight");
    if (it != by_name.end()) {
      l.trains = it->second->trainable;
      l.nf4 = it->second->nf4;
      l.weight_f32 = l.trains || (!l.nf4 && frozen_bytes == 4);
    }
    const auto rank = ranks.find(module);
    l.adapter_rank = rank == ranks.end() ? 0 : rank->second;
    return l;
  };
  const std::string embedding = spec.model.name == "gpt2" ? "transformer.wte" : "model.embed_tokens";
  const detail::LinearLayer embedded = layer(embedding);
  detail::ActivationInputs in{.config = config,
                              .batch = spec.training.batch_size,
                              .seq_len = spec.data.seq_len,
                              .residual_bytes = embedded.weight_f32 ? 4 : frozen_bytes,
                              .autocast = amp.has_value(),
                              .cuda = options.device.is_cuda(),
                              .dropout = spec.model.dropout,
                              .lora_dropout = spec.lora.dropout,
                              .every = spec.training.activation_checkpointing_every,
                              .gradient_buffers = !e.gradients_overlap,
                              .classifier_head = spec.classifies_text(),
                              .layer = layer};
  in.act_bytes = amp ? static_cast<int64_t>(dtype_size(*amp)) : in.residual_bytes;
  const detail::ModeActivations modes = detail::language_model_activations(in);
  e.none = modes.none;
  e.full = modes.full;
  e.selective = modes.selective;
  return e;
}

std::string memory_table(const MemoryEstimate& e) {
  std::ostringstream os;
  auto row = [&](const std::string& what, const std::string& detail, int64_t bytes) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-17s %-54s %11s\n", what.c_str(), detail.c_str(), bytes_text(bytes).c_str());
    os << line;
  };
  os << "memory per rank (" << e.model << " on " << e.device << ", " << e.world_size
     << (e.world_size == 1 ? " rank" : " ranks") << ", dist.zero = " << e.zero << "), estimated from the recipe:\n";
  row("parameters", count_text(e.trainable_parameters) + " trained (f32)" + (e.zero >= 3 ? ", sharded" : ""),
      e.trainable_bytes);
  if (e.frozen_parameters > 0)
    row("",
        count_text(e.frozen_parameters) + " frozen (" +
            (e.quantized_parameters > 0 ? count_text(e.quantized_parameters) + " NF4, the rest " : std::string()) +
            e.frozen_dtype + ")",
        e.frozen_bytes);
  if (e.gathered_bytes > 0) row("", "gathered while computing (ZeRO-3: unit 0, ~3 blocks)", e.gathered_bytes);
  row("gradients", std::string("f32") + (e.zero >= 2 ? ", sharded" : ""), e.gradient_bytes);
  row("optimizer state",
      std::to_string(e.optimizer_slots) + " f32 slot" + (e.optimizer_slots == 1 ? "" : "s") + " per trained parameter" +
          (e.zero >= 1 ? ", sharded" : "") + (e.optimizer_offloaded ? ", in host memory (not counted)" : ""),
      e.optimizer_bytes);
  const std::string batch = "batch " + std::to_string(e.batch_size) +
                            (e.seq_len > 0 ? " x " + std::to_string(e.seq_len) + " tokens" : std::string()) + ", amp " +
                            e.amp_dtype;
  row("activations", (e.checkpointing.empty() ? std::string() : e.checkpointing + ", ") + batch + " (estimate)",
      e.activations().total());
  row("total", e.gradients_overlap ? "the step's peak: gradients replace activations" : "the step's peak",
      e.total_bytes());
  if (e.checkpointing.empty()) return os.str();
  os << "activations by training.activation_checkpointing (estimates):\n";
  for (const char* mode : {"none", "full", "selective"}) {
    MemoryEstimate other = e;
    other.checkpointing = mode;
    char line[160];
    std::snprintf(line, sizeof line, "  %-10s %12s   total %12s%s\n", mode,
                  bytes_text(other.activations().total()).c_str(), bytes_text(other.total_bytes()).c_str(),
                  e.checkpointing == mode ? "   (the recipe's)" : "");
    os << line;
  }
  return os.str();
}

nlohmann::json memory_json(const MemoryEstimate& e) {
  nlohmann::json activations = {{"none", activation_json(e.none)},
                                {"full", activation_json(e.full)},
                                {"selective", activation_json(e.selective)}};
  return {{"model", e.model},
          {"device", e.device},
          {"world_size", e.world_size},
          {"zero", e.zero},
          {"parameters",
           {{"trainable", e.trainable_parameters},
            {"frozen", e.frozen_parameters},
            {"quantized", e.quantized_parameters},
            {"trainable_bytes", e.trainable_bytes},
            {"frozen_bytes", e.frozen_bytes},
            {"gathered_bytes", e.gathered_bytes},
            {"frozen_dtype", e.frozen_dtype},
            {"bytes", e.parameter_bytes()}}},
          {"gradient_bytes", e.gradient_bytes},
          {"optimizer", {{"slots", e.optimizer_slots}, {"bytes", e.optimizer_bytes}, {"offloaded", e.optimizer_offloaded}}},
          {"amp_dtype", e.amp_dtype},
          {"batch_size", e.batch_size},
          {"seq_len", e.seq_len},
          {"activation_checkpointing", e.checkpointing.empty() ? nlohmann::json() : nlohmann::json(e.checkpointing)},
          {"activation_bytes", e.activations().total()},
          {"activations", activations},
          {"gradients_overlap", e.gradients_overlap},
          {"total_bytes", e.total_bytes()},
          {"estimate", true}};
}

void check_memory_fits(const RecipeSpec& spec, Device device, int64_t world_size) {
  if (!device.is_cuda()) return;
  const char* skip = std::getenv("GENESIS_SKIP_MEMORY_CHECK");
  if (skip && std::string_view(skip) == "1") return;
#if GENESIS_WITH_CUDA
  MemoryEstimate e;
  try {
    e = estimate_memory(spec, {.world_size = world_size, .device = device});
  } catch (const std::exception&) {
    return;  // what the estimate could not read (a missing init_from, say), the run names in its own words
  }
  if (e.optimizer_offloaded) {
    const int64_t host_needed = e.optimizer_bytes * e.world_size;  // the ranks of one host
    const std::optional<int64_t> host_free = host_available_bytes();
    GENESIS_CHECK(!host_free || static_cast<double>(host_needed) <= 1.1 * static_cast<double>(*host_free), Error,
                  "dist.offload_optimizer keeps about ", bytes_text(host_needed), " of optimizer state in host memory",
                  e.world_size > 1 ? " (all ranks)" : "", " but only ", bytes_text(host_free.value_or(0)),
                  " is available; try an optimizer with fewer slots (sgd, lion), dist.zero over more hosts' ranks, or "
                  "leave dist.offload_optimizer out (GENESIS_SKIP_MEMORY_CHECK=1 skips this check)");
  }
  const auto free = static_cast<int64_t>(cuda::device_memory(device.index).free);
  const int64_t needed = e.total_bytes();
  if (static_cast<double>(needed) <= 1.1 * static_cast<double>(free)) return;
  std::string advice;
  if (!e.optimizer_offloaded && e.optimizer_bytes > 0)
    advice += "dist.offload_optimizer = true (optimizer state " + bytes_text(e.optimizer_bytes) + " to the host), ";
  if (e.checkpointing != "full")
    advice += "training.activation_checkpointing = \"full\" (activations " + bytes_text(e.full.total()) + "), ";
  if (e.trainable_parameters > 0 && e.zero < 3) advice += "dist.zero over more ranks, ";
  advice += "a smaller training.batch_size with grad_accum_steps";
  if (!spec.trains_adapters()) advice += ", LoRA or QLoRA ([lora], lora.base_quant = \"nf4\")";
  GENESIS_THROW(Error, "this run needs about ", bytes_text(needed), " on ", device.str(), " (parameters ",
                bytes_text(e.parameter_bytes()), ", gradients ", bytes_text(e.gradient_bytes), ", optimizer state ",
                e.optimizer_offloaded ? "on the host" : bytes_text(e.optimizer_bytes), ", activations ", bytes_text(e.activations().total()),
                " estimated) but only ", bytes_text(free), " is free; try ", advice,
                " (`genesis recipe show --memory` shows the estimate; GENESIS_SKIP_MEMORY_CHECK=1 skips this check)");
#else
  (void)spec;
  (void)world_size;
#endif
}

}  // namespace genesis::train
