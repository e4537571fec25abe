#pragma once
// Training recipes: a TOML file (plus `--set section.key=value` overrides) validated against
// one schema (libgenesis/recipe/schema.h) into a typed RecipeSpec. Every key, its type,
// default, valid values and meaning are listed in docs/recipes.md, which is generated from
// that schema. toml++ stays inside the .cpp files of this directory.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "libgenesis/core/error.h"
#include "libgenesis/data/image_augment.h"
#include "libgenesis/models/classifier.h"
#include "libgenesis/models/gpt2.h"
#include "libgenesis/models/llama.h"

namespace genesis {

// A recipe that cannot be read, parsed or validated; the message starts with
// "file:line:col: " (or "--set section.key=value: " for an override). Exit code 2.
class RecipeError : public UsageError {
 public:
  using UsageError::UsageError;
};

// The fully resolved recipe. Members are filled by load_recipe/parse_recipe, defaults
// included; a default-constructed RecipeSpec holds zeros (and a default MlpConfig), not the
// schema defaults.
struct RecipeSpec {
  struct Run {
    std::string name;
    int64_t seed = 0;
    std::string device;  // "cpu", "cuda", "cuda:N" or "auto"
    std::string out_dir;
    int64_t threads = 0;  // 0 = automatic (libgenesis/core/threads.h)
    bool allow_tf32 = false;  // CUDA f32 matmuls may use TF32 tensor cores
    bool tensorboard = false;  // event files of the logged curves in the run directory
    double peak_tflops = 0;   // MFU reference; 0 = the GPU's bf16 peak or a measured CPU GEMM rate
    bool operator==(const Run&) const = default;
  };
  struct Model {
    // One config type per model family, the family's own (libgenesis/models): the classifiers',
    // GPT-2's and the Llama/Qwen decoders' (Hugging Face config.json names; llama, qwen2 and qwen3
    // share DecoderConfig, its model_type = name).
    using Config = std::variant<models::MlpConfig, models::CnnConfig, models::Gpt2Config, models::DecoderConfig>;
    std::string name;  // "mlp", "cnn", or a language model: "gpt2", "llama", "qwen2", "qwen3"
    // The config of name's family, filled from that family's [model] keys (those of other
    // families are read and ignored). A language model's numbers that the recipe leaves unset
    // hold 0 (its sizes, and by default rms_norm_eps and rope_theta): the model type's defaults
    // decide them, or init_from's config.json. The config's dropout fields are not keys.
    Config config;
    double dropout = 0;     // every family's: build_model sets the model's dropout from it
    std::string init_from;  // language models: a Hugging Face model directory to start from
    std::string dtype;      // "auto", "f32", "bf16", "f16": the storage of the parameters that do not train
    std::string adapter;    // a PEFT LoRA adapter directory applied to init_from's model (it trains on)
    // A language model's classifier head (data.name = "text_classification"): its classes and how
    // a row's hidden states are pooled ("last" or "mean"). The classifiers' own count is their config's.
    int64_t num_classes = 0;
    std::string pooling;
    bool is_language_model() const { return name == "gpt2" || name == "llama" || name == "qwen2" || name == "qwen3"; }
    // The config of `name`'s family with that family's defaults: what the loader fills once it
    // has read model.name.
    static Config default_config(const std::string& name);
    bool operator==(const Model&) const = default;
  };
  struct Data {
    // data.tokenizer's default, GPT-2's vocabulary as data/fetch.sh brings it; an SFT run left at it
    // takes model.init_from's tokenizer.
    static constexpr const char* kDefaultTokenizer = "${GENESIS_DATA}/gpt2";
    std::string name;                      // "fashion_mnist", "csv", "image_folder", "text_classification", "tokens" or "sft"
    std::string path;                      // fashion_mnist: IDX dir; csv: the table; image_folder: root; sft: records
    std::string val_path;                  // csv, sft
    std::string test_path;                 // csv
    std::string label;                     // csv, text_classification: the target column (field)
    std::string text;                      // text_classification: the text column (field)
    std::vector<std::string> features;     // csv: the input columns; empty = all but the label
    std::vector<std::string> categorical;  // csv: input columns read as categories (one-hot)
    std::string impute;                    // csv: "none" or "mean"
    std::string task;                      // csv: "classification" or "regression"
    std::string regression_loss;           // csv regression: "mse" or "l1"

    std::string format;                // sft: "auto", "messages", "prompt_completion", "text"
    bool skip_bad = false;             // sft, image_folder
    std::vector<double> mean;          // image_folder: per channel; empty = the training images'
    std::vector<double> std;           // image_folder: per channel
    data::AugmentOptions augment;      // image_folder: [data.augment], of training batches
    std::string chat_template;         // sft
    std::string train_on;              // sft: "assistant", "completion", "all"
    bool pack = false;                 // sft
    std::string cache_dir;             // sft
    std::string shards;                // tokens: directory of train.bin, val.bin
    int64_t seq_len = 0;               // tokens
    std::string tokenizer;             // tokens
    std::vector<std::string> source;   // tokens: text files/directories tokenized when train.bin is missing
    std::vector<std::string> fetch;    // tokens: data/fetch.sh targets
    double val_fraction = 0;
    bool normalize = false;
    bool shuffle = false;
    int64_t prefetch = 0;
    bool operator==(const Data&) const = default;
  };
  struct Optimizer {
    std::string name;  // "sgd", "adam" or "adamw"
    double lr = 0;
    double weight_decay = 0;
    double momentum = 0;        // sgd
    double dampening = 0;       // sgd
    bool nesterov = false;      // sgd
    std::vector<double> betas;  // adam, adamw: two values
    double eps = 0;
    bool amsgrad = false;
    std::vector<std::string> no_decay;  // parameter-name substrings excluded from weight decay
    bool operator==(const Optimizer&) const = default;
  };
  struct Scheduler {
    std::string name;
    int64_t warmup_steps = 0;
    double warmup_start_factor = 0;
    int64_t step_size = 0;            // step
    double gamma = 0;                 // step, multistep, exponential
    std::vector<int64_t> milestones;  // multistep
    double min_lr_factor = 0;         // cosine, linear, wsd
    double decay_fraction = 0;        // wsd
    double pct_start = 0;             // onecycle
    double div_factor = 0;            // onecycle
    double final_div_factor = 0;      // onecycle
    bool operator==(const Scheduler&) const = default;
  };
  struct Training {
    // Run length: 0 means "not given". At least one of the two is given; when both are,
    // steps decides and epochs is ignored (steps_given() says which one applies).
    int64_t steps = 0;
    int64_t epochs = 0;
    int64_t batch_size = 0;
    int64_t grad_accum_steps = 0;
    double clip_grad_norm = 0;   // 0 = off
    double clip_grad_value = 0;  // 0 = off
    int64_t log_every = 0;
    int64_t eval_every = 0;        // 0 = never
    int64_t checkpoint_every = 0;  // 0 = only at the end; -1 = never
    int64_t keep_last = 0;
    std::string on_nonfinite;  // "stop" or "skip": a step with a non-finite loss or gradient norm
    std::vector<std::string> freeze;  // parameter-name substrings: those parameters do not train
    std::string activation_checkpointing;        // "none", "full" or "selective" (models::ActivationCheckpointing)
    int64_t activation_checkpointing_every = 0;  // every this many decoder blocks one is checkpointed
    bool steps_given() const { return steps > 0; }
    bool operator==(const Training&) const = default;
  };
  // LoRA (nn/lora.h): on when r > 0.
  struct Lora {
    int64_t r = 0;
    double alpha = 0;
    double dropout = 0;
    std::vector<std::string> targets;
    bool use_rslora = false;
    std::string init;
    std::string base_quant;  // "none" or "nf4" (QLoRA)
    bool enabled() const { return r > 0; }
    bool operator==(const Lora&) const = default;
  };
  // Whether the model is a language model with a classifier head (models/sequence_classifier.h):
  // what data.name = "text_classification" trains.
  bool classifies_text() const { return model.is_language_model() && data.name == "text_classification"; }
  // Whether the run trains LoRA adapters on a frozen base: new ones ([lora]) or model.adapter's.
  bool trains_adapters() const { return lora.enabled() || !model.adapter.empty(); }
  struct Eval {
    std::string split;  // "test" or "val"
    int64_t batch_size = 0;  // 0 = unset: recipe::eval_batch_size decides
    int64_t exact_match = 0;  // sft: validation conversations scored by generation
    bool operator==(const Eval&) const = default;
  };
  struct Amp {
    std::string dtype;  // "f32" (off), "bf16" or "fp16": the low dtype of autocast
    // fp16 only: "dynamic", or a fixed scale as its TOML number text ("1024.0"); "" = not set
    // (fp16 then scales dynamically). recipe::grad_scaler_options reads it.
    std::string loss_scale;
    double init_scale = 0;  // dynamic scaling: torch.amp.GradScaler's meaning
    double growth_factor = 0;
    double backoff_factor = 0;
    int64_t growth_interval = 0;
    std::vector<std::string> keep_f32;  // module-name substrings whose forward runs without autocast
    bool operator==(const Amp&) const = default;
  };
  struct Dist {
    std::string backend;  // "auto", "tcp", "mpi" or "nccl"
    double bucket_mb = 0;
    int64_t zero = 0;  // 0: DDP, 1: ZeRO-1 (optimizer state sharded over the ranks)
    std::string reduce_dtype;  // "f32" (the gradients as they are) or "bf16" (narrowed on the wire)
    std::string param_dtype;  // ZeRO-3's gathers: "f32" (the parameters as they are) or "bf16"
    bool offload_optimizer = false;  // optimizer state and update on the host (Optimizer::offload_to_host)
    double timeout_s = 0;
    bool operator==(const Dist&) const = default;
  };

  Run run;
  Model model;
  Data data;
  Optimizer optimizer;
  Scheduler scheduler;
  Training training;
  Lora lora;
  Eval eval;
  Amp amp;
  Dist dist;

  // The resolved recipe as TOML: every section and key in schema order, defaults included
  // (an unset optional key appears as a comment). Loading it gives back an equal RecipeSpec.
  std::string to_toml() const;

  bool operator==(const RecipeSpec&) const = default;
};

// Loads a recipe file: its `include = [...]` files first (paths relative to the including
// file; later ones win, the including file wins over all), then the overrides, each
// "section.key=value" with the value read as the key's type. Throws RecipeError.
RecipeSpec load_recipe(const std::filesystem::path& path, const std::vector<std::string>& overrides = {});

// The same for recipe text; `source_name` names it in messages and anchors its includes.
RecipeSpec parse_recipe(std::string_view toml_text, const std::string& source_name,
                        const std::vector<std::string>& overrides = {});

// The resolved recipe as {section: {key: value}} JSON (`genesis recipe show --json`); unset
// optional keys are null.
nlohmann::json recipe_json(const RecipeSpec& spec);

// One key whose value differs between two recipes: "section.key" and both values as TOML text.
struct RecipeChange {
  std::string key;
  std::string before, after;
};
// The keys whose resolved values differ, in schema order (what `--resume` and `eval` compare
// against a checkpoint's recipe.toml).
std::vector<RecipeChange> recipe_changes(const RecipeSpec& before, const RecipeSpec& after);

// docs/recipes.md: the reference of every section and key, generated from the schema.
std::string recipe_reference_markdown();

}  // namespace genesis
