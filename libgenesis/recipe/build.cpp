#include "libgenesis/recipe/build.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "libgenesis/core/error.h"
#include "libgenesis/core/interrupt.h"
#include "libgenesis/data/shards.h"
#include "libgenesis/data/tokenizer.h"
#include "libgenesis/io/dir_lock.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/peft.h"
#include "libgenesis/io/user_paths.h"
#include "libgenesis/models/classifier.h"
#include "libgenesis/models/hf.h"
#include "libgenesis/models/sequence_classifier.h"
#include "libgenesis/recipe/schema.h"
#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/runtime.h"
#endif

#include <nlohmann/json.hpp>

namespace genesis::recipe {

namespace {

// A language model's config.json from the recipe's config, the keys it leaves unset (0) dropped:
// the model type's defaults fill them, and the config passes the checks of any config.json.
template <class Config>
std::string language_model_config(const Config& config) {
  nlohmann::json json = nlohmann::json::parse(models::to_config_json(config));
  for (auto it = json.begin(); it != json.end();) it = it->is_number() && *it == 0 ? json.erase(it) : std::next(it);
  return json.dump();
}

// The model of the recipe's config: a classifier's config takes model.dropout, a language model
// takes it over its config's (or its init_from config.json's) values.
std::shared_ptr<nn::Module> make_model(models::MlpConfig config, const RecipeSpec::Model& m, nn::LayerOptions options) {
  config.dropout = m.dropout;
  return std::make_shared<models::Mlp>(config, options);
}

std::shared_ptr<nn::Module> make_model(models::CnnConfig config, const RecipeSpec::Model& m, nn::LayerOptions options) {
  config.dropout = m.dropout;
  return std::make_shared<models::Cnn>(config, options);
}

template <class Config>
std::shared_ptr<nn::Module> make_model(const Config& config, const RecipeSpec::Model& m, nn::LayerOptions options) {
  auto lm = m.init_from.empty() ? models::causal_lm_from_config(language_model_config(config), options)
                                : models::load_hf_model(m.init_from, options);
  lm->set_dropout(m.dropout);
  return lm;
}

models::ActivationCheckpointing activation_checkpointing(const RecipeSpec& spec) {
  const std::string& mode = spec.training.activation_checkpointing;
  if (mode == "full") return models::ActivationCheckpointing::full;
  if (mode == "selective") return models::ActivationCheckpointing::selective;
  GENESIS_CHECK(mode == "none", RecipeError, "training.activation_checkpointing: unknown mode '", mode,
                "' (valid: none, full, selective)");
  return models::ActivationCheckpointing::none;
}

namespace fs = std::filesystem;

std::string join(const std::vector<std::string>& words, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? separator : "") + words[i];
  return out;
}

// The commands that prepare the recipe's shards by hand.
std::string preparation_commands(const RecipeSpec::Data& d) {
  std::string tokenize = "genesis data tokenize --tokenizer " + d.tokenizer + " --input";
  for (const std::string& s : d.source) tokenize += " " + s + (fs::is_directory(s) ? "/*.txt" : "");
  tokenize += " --out " + d.shards + " --val-fraction " + std::to_string(d.val_fraction);
  return d.fetch.empty() ? tokenize : "data/fetch.sh " + join(d.fetch, " ") + " && " + tokenize;
}

// The documents of data.source, in the order they are tokenized.
std::vector<fs::path> source_documents(const RecipeSpec::Data& d) {
  std::vector<fs::path> documents;
  for (const std::string& s : d.source) {
    std::vector<fs::path> found = data::source_documents(s);
    GENESIS_CHECK(!found.empty(), UsageError, "data.source: ", s, " holds no .txt files");
    documents.insert(documents.end(), found.begin(), found.end());
  }
  return documents;
}

// Why the shards in data.shards are prepared again, in the recipe's words.
std::string stale_shards_note(const data::ShardSourcesChange& change, const std::string& shards) {
  using What = data::ShardSourcesChange::What;
  const char* key = change.what == What::documents      ? "data.source"
                    : change.what == What::tokenizer    ? "data.tokenizer"
                    : change.what == What::val_fraction ? "data.val_fraction"
                    : change.what == What::separator    ? "the document separator"
                                                        : nullptr;
  if (key == nullptr)
    return shards + " no longer matches its " + data::kShardSourcesFile + " (" + change.detail +
           "): preparing the shards again";
  return std::string(key) + " changed since " + shards + " was made (" + change.detail +
         "): preparing the shards again";
}

// Marks the modules whose dotted names contain an amp.keep_f32 pattern to run without autocast.
void keep_modules_f32(const RecipeSpec& spec, nn::Module& model) {
  const auto modules = model.named_modules();
  for (const std::string& pattern : spec.amp.keep_f32) {
    bool matched = false;
    for (const auto& [name, module] : modules) {
      if (name.find(pattern) == std::string::npos) continue;
      module->set_autocast_enabled(false);
      matched = true;
    }
    if (matched) continue;
    std::vector<std::string> examples;
    for (size_t i = 1; i < modules.size() && examples.size() < 8; ++i) examples.push_back(modules[i].first);
    GENESIS_THROW(RecipeError, "amp.keep_f32: '", pattern, "' matches no module of model ", spec.model.name,
                  " (its modules: ", join(examples, ", "), modules.size() > examples.size() + 1 ? ", ..." : "", ")");
  }
}

std::string parameter_names(const nn::Module& model) {
  std::vector<std::string> names;
  for (const NamedTensor& p : model.named_parameters()) names.push_back(p.name);
  return nn::name_kinds(names);
}

// Gives the model the adapters [lora] asks for (freezing the rest); a target that matches no layer,
// or an r above a target's dimensions, is a RecipeError.
void add_lora_adapters(const RecipeSpec& spec, nn::Module& model) {
  if (!spec.model.adapter.empty()) {
    try {
      io::apply_peft_adapter(model, io::read_peft_adapter(spec.model.adapter));
    } catch (const ValueError& e) {
      GENESIS_THROW(RecipeError, "model.adapter ", spec.model.adapter, ": ", e.what());
    }
    return;
  }
  if (!spec.lora.enabled()) return;
  try {
    nn::add_lora(model, lora_options(spec));
  } catch (const ValueError& e) {
    GENESIS_THROW(RecipeError, "lora: ", e.what());
  }
}

// QLoRA: every frozen linear layer of the blocks (the layers "all-linear" names) stored in NF4 on
// `device`, one at a time, dequantizing to `compute`.
void quantize_base(nn::Module& model, Device device, DType compute) {
  for (const auto& target : nn::lora_targets(model)) target.second->quantize_nf4(device, compute);
}

// Freezes the parameters training.freeze names; a pattern that matches none, or freezing all, is a
// RecipeError.
void freeze_parameters(const RecipeSpec& spec, nn::Module& model) {
  const std::vector<std::string>& patterns = spec.training.freeze;
  if (patterns.empty()) return;
  const std::vector<int64_t> matched = model.set_trainable(patterns, false);
  for (size_t i = 0; i < patterns.size(); ++i)
    GENESIS_CHECK(matched[i] > 0, RecipeError, "training.freeze: '", patterns[i],
                  "' matches no parameter of the model (its parameters: ", parameter_names(model), ")");
  GENESIS_CHECK(model.num_parameters(nn::Params::trainable) > 0, RecipeError,
                "training.freeze freezes every parameter of the model: nothing would train (leave some out)");
}

}  // namespace

namespace {

// `text` as one word of a POSIX shell command.
std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// data/fetch.sh of the source tree genesis was built from, else of the working directory; empty
// when neither has one.
fs::path fetch_script() {
#ifdef GENESIS_SOURCE_DIR
  if (const fs::path built_from = fs::path(GENESIS_SOURCE_DIR) / "data" / "fetch.sh"; fs::exists(built_from))
    return built_from;
#endif
  return fs::exists("data/fetch.sh") ? fs::absolute("data/fetch.sh") : fs::path();
}

}  // namespace

void fetch_data(const RecipeSpec& spec, const std::function<bool()>& missing, const std::string& by_hand,
                const std::function<void(const std::string&)>& progress) {
  const RecipeSpec::Data& d = spec.data;
  const fs::path script = fetch_script();
  GENESIS_CHECK(!d.fetch.empty() && !script.empty(), UsageError, "data for ", spec.run.name,
                " is not prepared and cannot be fetched from here (data/fetch.sh of the genesis source directory "
                "is not found); run: ",
                by_hand);
  // The child writes where this process reads: the data root as resolved here.
  const std::string fetch = "GENESIS_DATA=" + shell_quote(io::data_root().string()) + " bash " +
                            shell_quote(script.string()) + " " + join(d.fetch, " ");
  progress("preparing data: data/fetch.sh " + join(d.fetch, " ") + " into " + io::data_root().string());
  // Under genesis train SIGINT/SIGTERM are blocked in this thread (train/stop_signal.h) and a
  // child inherits the mask: unblocked for the fetch, so that Ctrl-C still stops it.
  sigset_t stop_signals, mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, &mask);
  const int status = std::system(fetch.c_str());
  pthread_sigmask(SIG_SETMASK, &mask, nullptr);
  // system() ignores SIGINT in this process while it waits: a Ctrl-C shows as the fetch's death.
  if (status != -1 && WIFSIGNALED(status) && (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGTERM))
    request_interrupt();
  check_interrupt("fetching the data (run again to resume the preparation)");
  const int code = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  GENESIS_CHECK(code == 0 && !missing(), UsageError, "data for ", spec.run.name, " could not be fetched (",
                code == 3 ? "npm or the registry is unavailable" : "data/fetch.sh exited " + std::to_string(code),
                "); where npm works, run: ", by_hand);
}

void fetch_missing_data(const RecipeSpec& spec, const std::function<bool()>& missing,
                        const std::function<void(const std::string&)>& progress) {
  if (spec.data.fetch.empty() || !missing()) return;
  fetch_data(spec, missing, "bash data/fetch.sh " + join(spec.data.fetch, " "), progress);
}

std::string default_tokenizer() { return io::expand_path(RecipeSpec::Data::kDefaultTokenizer); }

TokenData prepare_token_data(const RecipeSpec& spec, const std::function<void(const std::string&)>& progress,
                             const std::function<void(int64_t done, int64_t total)>& documents_done) {
  const RecipeSpec::Data& d = spec.data;
  GENESIS_CHECK(d.name == "tokens", RecipeError, "data.name: '", d.name, "' is not token shards");
  const fs::path dir = d.shards;
  TokenData out{dir / "train.bin", fs::exists(dir / "val.bin") ? dir / "val.bin" : fs::path(), d.tokenizer};
  data::TokenizeOptions options;
  options.val_fraction = d.val_fraction;
  auto missing = [&] {
    bool any = !fs::exists(d.tokenizer);
    for (const std::string& s : d.source) any |= !fs::exists(s);
    return any;
  };
  if (fs::exists(out.train)) {
    // Without sources at hand there is nothing to compare the shards with: they are used as
    // they are, as are shards without a source.json (made by hand, or by an older genesis).
    if (d.source.empty() || missing() || !fs::exists(dir / data::kShardSourcesFile)) return out;
    options.sources = data::describe_shard_sources(source_documents(d), d.tokenizer, options);
    const std::optional<data::ShardSourcesChange> change = data::compare_shard_sources(dir, *options.sources);
    if (!change || change->what == data::ShardSourcesChange::What::none) return out;
    progress(stale_shards_note(*change, d.shards));
  }
  GENESIS_CHECK(!d.source.empty(), UsageError, dir.string(),
                "/train.bin is missing and data.source names no text to make it from: tokenize your text with "
                "`genesis data tokenize --tokenizer ",
                d.tokenizer, " --input FILES... --out ", d.shards, "`");
  const std::string by_hand = preparation_commands(d);
  if (missing()) {
    for (const std::string& source : d.source)
      GENESIS_CHECK(fs::exists(source) || !d.fetch.empty(), UsageError, "data.source: ", source,
                    " does not exist (and data.fetch names nothing that would bring it); once it does, the run "
                    "prepares the shards, or by hand: ", by_hand);
    GENESIS_CHECK(fs::exists(d.tokenizer) || !d.fetch.empty(), UsageError, "data.tokenizer: ", d.tokenizer,
                  " does not exist (and data.fetch names nothing that would bring it)");
    fetch_data(spec, missing, by_hand, progress);
  }
  const std::vector<fs::path> documents = source_documents(d);
  if (!options.sources) options.sources = data::describe_shard_sources(documents, d.tokenizer, options);
  // Two runs preparing one directory would write the same temporaries; the second is refused.
  const io::DirLock lock(dir, "wait for it to finish preparing the shards, or set data.shards to another directory");
  progress("preparing data: tokenizing " + std::to_string(documents.size()) + " documents with " + d.tokenizer +
           " into " + d.shards);
  const data::Tokenizer tokenizer = data::Tokenizer::load(d.tokenizer);
  int64_t done = 0;
  const auto total = static_cast<int64_t>(documents.size());
  if (documents_done) documents_done(0, total);
  options.on_document = [&](const fs::path&, size_t, size_t) {
    if (documents_done) documents_done(++done, total);
  };
  data::TokenizeSummary summary = data::tokenize_to_shards(tokenizer, documents, dir, options);
  progress("preparing data: wrote " + summary.train_path.string() + " (" + std::to_string(summary.train_tokens) +
           " tokens)" +
           (summary.val_path.empty()
                ? std::string()
                : " and " + summary.val_path.string() + " (" + std::to_string(summary.val_tokens) + " tokens)"));
  out.val = summary.val_path;
  return out;
}

void check_init_from(const RecipeSpec& spec) {
  const std::string& dir = spec.model.init_from;
  if (dir.empty()) return;
  const fs::path config = fs::path(dir) / "config.json";
  GENESIS_CHECK(fs::is_regular_file(config), RecipeError, "model.init_from: ", dir,
                fs::exists(dir) ? " has no config.json (a Hugging Face model directory is expected)" : " does not exist");
  const nlohmann::json json = nlohmann::json::parse(io::read_file(config, io::kMaxConfigFileBytes), nullptr, false);
  const std::string type =
      json.is_object() && json.contains("model_type") && json["model_type"].is_string() ? json["model_type"].get<std::string>()
                                                                                       : std::string();
  GENESIS_CHECK(type == spec.model.name, RecipeError, "model.name = \"", spec.model.name, "\" but model.init_from ", dir,
                " holds a ", type.empty() ? std::string("model without a model_type") : "\"" + type + "\" model",
                " (its config.json); set model.name = \"", type.empty() ? "..." : type, "\"");
}

std::string language_model_config_json(const RecipeSpec& spec) {
  GENESIS_CHECK(spec.model.is_language_model(), RecipeError, "model.name = \"", spec.model.name,
                "\" is not a language model");
  check_init_from(spec);
  if (!spec.model.init_from.empty())
    return io::read_file(fs::path(spec.model.init_from) / "config.json", io::kMaxConfigFileBytes);
  if (const auto* gpt2 = std::get_if<models::Gpt2Config>(&spec.model.config)) return language_model_config(*gpt2);
  return language_model_config(std::get<models::DecoderConfig>(spec.model.config));
}

void check_classifier_data(const RecipeSpec& spec) {
  if (spec.data.name != "fashion_mnist") return;
  const Shape samples{1, 28, 28};  // what load_fashion_mnist makes of an image
  Shape input;
  int64_t classes = 0;
  bool flattens = false;
  if (const auto* mlp = std::get_if<models::MlpConfig>(&spec.model.config)) {
    input = mlp->input_shape;
    classes = mlp->num_classes;
    flattens = true;
  } else if (const auto* cnn = std::get_if<models::CnnConfig>(&spec.model.config)) {
    input = cnn->input_shape;
    classes = cnn->num_classes;
  } else {
    return;  // a language model on samples: run_training names that mismatch
  }
  GENESIS_CHECK(flattens ? numel_of(input) == numel_of(samples) : input == samples, RecipeError, "model.input_shape ",
                shape_str(input), " does not match the data's samples ", shape_str(samples), " (data.name = \"",
                spec.data.name, "\"); set model.input_shape = ", shape_str(samples));
  GENESIS_CHECK(classes >= data::kFashionMnistClasses, RecipeError, "model.num_classes = ", classes,
                " is fewer than the data's ", data::kFashionMnistClasses, " classes (data.name = \"", spec.data.name,
                "\"); set model.num_classes = ", data::kFashionMnistClasses);
}

Device resolve_device(const std::string& requested) {
  if (requested != "auto") return Device::parse(requested);
#if GENESIS_WITH_CUDA
  if (cuda::is_available()) return Device(DeviceType::cuda, 0);
#endif
  return kCPU;
}

std::shared_ptr<nn::Module> build_model(const RecipeSpec& spec, Device device) {
  check_init_from(spec);
  const nn::LayerOptions options{.dtype = DType::f32, .device = kCPU};
  std::shared_ptr<nn::Module> model =
      std::visit([&](const auto& config) { return make_model(config, spec.model, options); }, spec.model.config);
  freeze_parameters(spec, *model);
  add_lora_adapters(spec, *model);
  if (auto* lm = dynamic_cast<models::CausalLM*>(model.get()))
    lm->set_activation_checkpointing(activation_checkpointing(spec), spec.training.activation_checkpointing_every);
  // The head comes after the adapters: it is new, so it trains whole (PEFT's modules_to_save).
  if (spec.classifies_text())
    model = std::make_shared<models::SequenceClassifier>(std::static_pointer_cast<models::CausalLM>(model),
                                                         spec.model.num_classes,
                                                         models::parse_pooling(spec.model.pooling).value_or(models::Pooling::last));
  // The frozen part takes its dtype before the move: a bf16 base never exists in f32 on the GPU,
  // and an NF4 one arrives there layer by layer.
  const DType frozen = frozen_dtype(spec);
  if (frozen != DType::f32) model->to(frozen, nn::Params::frozen);
  if (spec.lora.base_quant == "nf4") quantize_base(*model, device, frozen);
  if (!device.is_cpu()) model->to(device);
  keep_modules_f32(spec, *model);
  return model;
}

DType frozen_dtype(const RecipeSpec& spec) {
  const std::string& d = spec.model.dtype;
  if (d == "auto") return spec.trains_adapters() ? amp_dtype(spec).value_or(DType::f32) : DType::f32;
  return d == "bf16" ? DType::bf16 : d == "f16" ? DType::f16 : DType::f32;
}

nn::LoraOptions lora_options(const RecipeSpec& spec) {
  const RecipeSpec::Lora& l = spec.lora;
  return {.r = l.r, .alpha = l.alpha, .dropout = l.dropout, .targets = l.targets, .use_rslora = l.use_rslora,
          .init = l.init};
}

std::optional<DType> amp_dtype(const RecipeSpec& spec) {
  if (spec.amp.dtype == "bf16") return DType::bf16;
  if (spec.amp.dtype == "fp16") return DType::f16;
  GENESIS_CHECK(spec.amp.dtype == "f32", RecipeError, "amp.dtype: unknown dtype '", spec.amp.dtype,
                "' (valid: f32, bf16, fp16)");
  return std::nullopt;
}

void check_amp_device(const RecipeSpec& spec, Device device) {
  GENESIS_CHECK(amp_dtype(spec) != DType::f16 || !device.is_cpu(), RecipeError,
                "amp.dtype = \"fp16\" needs a CUDA device, and this run is on the CPU (run.device = \"",
                spec.run.device, "\"): use amp.dtype = \"bf16\" (or \"f32\") on the CPU");
}

std::unique_ptr<amp::GradScaler> build_grad_scaler(const RecipeSpec& spec, Device device) {
  if (amp_dtype(spec) != DType::f16) return nullptr;
  const RecipeSpec::Amp& a = spec.amp;
  const std::optional<double> fixed = number_in_text(a.loss_scale);
  return std::make_unique<amp::GradScaler>(device, amp::GradScalerOptions{.init_scale = fixed.value_or(a.init_scale),
                                                                          .growth_factor = a.growth_factor,
                                                                          .backoff_factor = a.backoff_factor,
                                                                          .growth_interval = a.growth_interval,
                                                                          .dynamic = !fixed});
}

std::vector<ParamGroup> optimizer_groups(const RecipeSpec& spec, const nn::Module& model) {
  const RecipeSpec::Optimizer& o = spec.optimizer;
  ParamGroup decay, no_decay;
  decay.lr = decay.base_lr = no_decay.lr = no_decay.base_lr = o.lr;
  decay.weight_decay = o.weight_decay;
  no_decay.weight_decay = 0.0;
  for (NamedTensor& p : model.named_parameters(nn::Params::trainable)) {
    bool excluded = false;
    for (const std::string& pattern : o.no_decay) excluded |= p.name.find(pattern) != std::string::npos;
    (excluded ? no_decay : decay).params.push_back(std::move(p));
  }
  std::vector<ParamGroup> groups;
  for (ParamGroup* g : {&decay, &no_decay})
    if (!g->params.empty()) groups.push_back(std::move(*g));
  return groups;
}

std::unique_ptr<Optimizer> build_optimizer(const RecipeSpec& spec, const nn::Module& model) {
  return build_optimizer(spec, optimizer_groups(spec, model));
}

namespace {

std::unique_ptr<Optimizer> make_optimizer(const RecipeSpec::Optimizer& o, std::vector<ParamGroup> groups) {
  if (o.name == "sgd") {
    return make_sgd(std::move(groups), {.momentum = o.momentum, .dampening = o.dampening, .nesterov = o.nesterov});
  }
  if (o.name == "adam" || o.name == "adamw") {
    return make_adam(std::move(groups), {.beta1 = o.betas.at(0), .beta2 = o.betas.at(1), .eps = o.eps,
                                         .amsgrad = o.amsgrad, .decoupled_weight_decay = o.name == "adamw"});
  }
  if (o.name == "lion") return make_lion(std::move(groups), {.beta1 = o.betas.at(0), .beta2 = o.betas.at(1)});
  GENESIS_THROW(RecipeError, "optimizer.name: unknown optimizer '", o.name, "' (valid: sgd, adam, adamw, lion)");
}

}  // namespace

std::unique_ptr<Optimizer> build_optimizer(const RecipeSpec& spec, std::vector<ParamGroup> groups) {
  if (spec.dist.offload_optimizer) {  // run.device = "auto" may have found no GPU
    for (const ParamGroup& g : groups)
      for (const NamedTensor& p : g.params)
        GENESIS_CHECK(p.tensor.device().is_cuda(), RecipeError,
                      "dist.offload_optimizer moves the optimizer state from a GPU to the host, but this run's "
                      "parameters are on ",
                      p.tensor.device().str(), ": leave dist.offload_optimizer out, or run on a GPU");
  }
  std::unique_ptr<Optimizer> optimizer = make_optimizer(spec.optimizer, std::move(groups));
  if (spec.dist.offload_optimizer) optimizer->offload_to_host();
  return optimizer;
}

LrSchedule build_schedule(const RecipeSpec& spec, int64_t total) {
  const RecipeSpec::Scheduler& s = spec.scheduler;
  return LrSchedule({.kind = parse_schedule_kind(s.name),
                     .total_steps = total,
                     .warmup_steps = s.warmup_steps,
                     .warmup_start_factor = s.warmup_start_factor,
                     .step_size = s.step_size,
                     .gamma = s.gamma,
                     .milestones = s.milestones,
                     .min_lr_factor = s.min_lr_factor,
                     .decay_fraction = s.decay_fraction,
                     .pct_start = s.pct_start,
                     .div_factor = s.div_factor,
                     .final_div_factor = s.final_div_factor});
}

RunData build_data(const RecipeSpec& spec) {
  const RecipeSpec::Data& d = spec.data;
  GENESIS_CHECK(d.name == "fashion_mnist", RecipeError, "data.name: '", d.name,
                "' is not a sample dataset (valid: fashion_mnist; tokens come from prepare_token_data)");
  data::Dataset train = data::load_fashion_mnist(d.path, "train");
  RunData out;
  if (d.val_fraction > 0.0) {
    auto [tr, val] = data::split_validation(train, d.val_fraction, static_cast<uint64_t>(spec.run.seed));
    train = std::move(tr);
    if (spec.eval.split == "val") out.eval = std::move(val);
  }
  if (spec.eval.split == "test") out.eval = data::load_fashion_mnist(d.path, "test");
  if (d.normalize) {
    data::Normalization n = data::compute_normalization(train);
    data::normalize(train, n);
    if (out.eval.size() > 0) data::normalize(out.eval, n);
  }
  out.train = std::move(train);
  return out;
}

int64_t eval_batch_size(const RecipeSpec& spec) {
  if (spec.eval.batch_size > 0) return spec.eval.batch_size;
  return spec.model.is_language_model() ? spec.training.batch_size : 1000;
}

int64_t total_steps(const RecipeSpec& spec, int64_t batches_per_epoch) {
  const RecipeSpec::Training& t = spec.training;
  if (t.steps_given()) return t.steps;
  int64_t per_epoch = (batches_per_epoch + t.grad_accum_steps - 1) / t.grad_accum_steps;
  return t.epochs * per_epoch;
}

}  // namespace genesis::recipe
