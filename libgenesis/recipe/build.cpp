#include "libgenesis/recipe/build.h"

#include "libgenesis/core/error.h"
#include "libgenesis/models/classifier.h"
#include "libgenesis/models/hf.h"
#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/runtime.h"
#endif

#include <nlohmann/json.hpp>

namespace genesis::recipe {

namespace {

// The recipe's language-model keys as a Hugging Face config.json object (unset keys left
// out, so the model type's defaults apply).
std::string language_model_config(const RecipeSpec::Model& m) {
  nlohmann::json config{{"model_type", m.name}};
  auto put = [&](const char* key, auto value) {
    if (value != 0) config[key] = value;
  };
  put("vocab_size", m.vocab_size);
  if (m.name == "gpt2") {
    put("n_positions", m.n_positions);
    put("n_embd", m.n_embd);
    put("n_layer", m.n_layer);
    put("n_head", m.n_head);
    return config.dump();
  }
  put("hidden_size", m.hidden_size);
  put("intermediate_size", m.intermediate_size);
  put("num_hidden_layers", m.num_hidden_layers);
  put("num_attention_heads", m.num_attention_heads);
  put("num_key_value_heads", m.num_key_value_heads);
  put("head_dim", m.head_dim);
  put("max_position_embeddings", m.max_position_embeddings);
  put("rms_norm_eps", m.rms_norm_eps);
  put("rope_theta", m.rope_theta);
  config["tie_word_embeddings"] = m.tie_word_embeddings;
  if (m.name != "qwen2") config["attention_bias"] = m.attention_bias;
  return config.dump();
}

}  // namespace

Device resolve_device(const std::string& requested) {
  if (requested != "auto") return Device::parse(requested);
#if GENESIS_WITH_CUDA
  if (cuda::is_available()) return Device(DeviceType::cuda, 0);
#endif
  return kCPU;
}

std::shared_ptr<nn::Module> build_model(const RecipeSpec& spec, Device device) {
  const RecipeSpec::Model& m = spec.model;
  nn::LayerOptions options{.dtype = DType::f32, .device = kCPU};
  std::shared_ptr<nn::Module> model;
  if (m.name == "mlp") {
    model = std::make_shared<models::Mlp>(
        models::MlpConfig{.input_shape = m.input_shape, .hidden = m.hidden, .num_classes = m.num_classes,
                          .activation = m.activation, .dropout = m.dropout},
        options);
  } else if (m.name == "cnn") {
    model = std::make_shared<models::Cnn>(
        models::CnnConfig{.input_shape = m.input_shape, .channels = m.channels, .fc = m.fc,
                          .num_classes = m.num_classes, .activation = m.activation, .dropout = m.dropout},
        options);
  } else if (m.is_language_model()) {
    model = m.init_from.empty() ? models::causal_lm_from_config(language_model_config(m), options)
                                : models::load_hf_model(m.init_from, options);
  } else {
    GENESIS_THROW(RecipeError, "model.name: unknown model '", m.name, "' (valid: mlp, cnn, gpt2, llama, qwen2, qwen3)");
  }
  if (!device.is_cpu()) model->to(device);
  return model;
}

std::unique_ptr<Optimizer> build_optimizer(const RecipeSpec& spec, const nn::Module& model) {
  const RecipeSpec::Optimizer& o = spec.optimizer;
  ParamGroup decay, no_decay;
  decay.lr = decay.base_lr = no_decay.lr = no_decay.base_lr = o.lr;
  decay.weight_decay = o.weight_decay;
  no_decay.weight_decay = 0.0;
  for (NamedTensor& p : model.named_parameters()) {
    bool excluded = false;
    for (const std::string& pattern : o.no_decay) excluded |= p.name.find(pattern) != std::string::npos;
    (excluded ? no_decay : decay).params.push_back(std::move(p));
  }
  std::vector<ParamGroup> groups;
  for (ParamGroup* g : {&decay, &no_decay})
    if (!g->params.empty()) groups.push_back(std::move(*g));
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
  GENESIS_CHECK(d.name == "fashion_mnist", RecipeError, "data.name: unknown dataset '", d.name,
                "' (valid: fashion_mnist)");
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

int64_t total_steps(const RecipeSpec& spec, int64_t batches_per_epoch) {
  const RecipeSpec::Training& t = spec.training;
  if (t.steps_given()) return t.steps;
  int64_t per_epoch = (batches_per_epoch + t.grad_accum_steps - 1) / t.grad_accum_steps;
  return t.epochs * per_epoch;
}

}  // namespace genesis::recipe
