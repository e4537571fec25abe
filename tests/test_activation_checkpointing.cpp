// Activation checkpointing (autograd/checkpoint.h, CausalLM::set_activation_checkpointing): the
// primitive gives the gradients of the function it wraps, bit for bit, and keeps less; full and
// selective checkpointing train GPT-2 and a Llama decoder exactly as without (dropout, autocast,
// LoRA, packed rows, every Nth block); the recipe keys.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/core/host_memory.h"
#include "libgenesis/models/hf.h"
#include "libgenesis/nn/lora.h"
#include "libgenesis/optim/optimizer.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/recipe/recipe.h"
#include "tests/generated_docs.h"
#include "tests/testing.h"

using namespace genesis;
using models::ActivationCheckpointing;
using testing::rand_values;

namespace {

const char* kLlama = R"({"model_type": "llama", "vocab_size": 40, "hidden_size": 16, "intermediate_size": 24,
                         "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
                         "tie_word_embeddings": false})";
const char* kGpt2 = R"({"model_type": "gpt2", "vocab_size": 40, "n_positions": 16, "n_embd": 8, "n_layer": 3,
                        "n_head": 2})";

// Wider and deeper, head_dim 32 (which CUDA's flash kernels take): for memory and one-step checks.
const char* kGpt2Wide = R"({"model_type": "gpt2", "vocab_size": 64, "n_positions": 64, "n_embd": 128, "n_layer": 6,
                            "n_head": 4})";
const char* kLlamaWide = R"({"model_type": "llama", "vocab_size": 64, "hidden_size": 128, "intermediate_size": 256,
                             "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2})";

// ids [batch, 64] cycling through a vocabulary of 64.
Tensor wide_ids(int64_t batch) {
  Tensor ids = empty({batch, 64}, {.dtype = DType::i64});
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 11 + 5) % 64;
  return ids;
}

struct RunOptions {
  double dropout = 0.0;
  bool lora = false;
  bool packed = false;
  bool autocast = false;
  int64_t every = 1;
};

struct Trace {
  std::vector<float> losses;
  std::vector<std::vector<float>> parameters;  // the trained ones, after the last step
  size_t saved_bytes = 0;                      // what the first step's graph kept for its backward
};

// A few AdamW steps of a tiny model on fixed tokens.
Trace train(const char* config, ActivationCheckpointing mode, const RunOptions& o) {
  manual_seed(5);
  std::shared_ptr<models::CausalLM> model = models::causal_lm_from_config(config);
  if (o.lora) nn::add_lora(*model, {.r = 4, .alpha = 8, .dropout = o.dropout, .targets = {"all-linear"}});
  model->set_dropout(o.lora ? 0.0 : o.dropout);
  model->set_activation_checkpointing(mode, o.every);
  model->train();
  Tensor ids = empty({2, 7}, {.dtype = DType::i64});
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 7 + 3) % 40;
  const Tensor targets = ids;
  // Packed rows: row 0 holds documents of 3 and 4 tokens, row 1 of 5 and 2.
  const Tensor doc_start =
      o.packed ? from_vector(std::vector<int32_t>{0, 0, 0, 3, 3, 3, 3, 0, 0, 0, 0, 0, 5, 5}, {2, 7}) : Tensor();
  std::vector<ParamGroup> groups(1);
  groups[0].params = model->named_parameters(nn::Params::trainable);
  groups[0].lr = groups[0].base_lr = 1e-2;
  auto adamw = make_adam(std::move(groups));
  Trace trace;
  for (int step = 0; step < 4; ++step) {
    adamw->zero_grad(false);
    Tensor loss;
    {
      AutocastGuard autocast(o.autocast ? std::optional<DType>(DType::bf16) : std::nullopt);
      loss = model->loss(ids, targets, Reduction::mean, doc_start);
    }
    if (step == 0) trace.saved_bytes = saved_storage_bytes(loss, model->parameters());
    loss.backward();
    adamw->step();
    trace.losses.push_back(loss.item<float>());
  }
  for (const Tensor& p : model->parameters(nn::Params::trainable)) trace.parameters.push_back(p.to_vector<float>());
  return trace;
}

void check_same_training(const char* config, const RunOptions& o) {
  const Trace none = train(config, ActivationCheckpointing::none, o);
  const Trace full = train(config, ActivationCheckpointing::full, o);
  const Trace selective = train(config, ActivationCheckpointing::selective, o);
  INFO("saved bytes: none " << none.saved_bytes << ", selective " << selective.saved_bytes << ", full "
                            << full.saved_bytes);
  CHECK(full.losses == none.losses);
  CHECK(selective.losses == none.losses);
  REQUIRE(full.parameters.size() == none.parameters.size());
  REQUIRE(selective.parameters.size() == none.parameters.size());
  for (size_t i = 0; i < none.parameters.size(); ++i) {
    CHECK(full.parameters[i] == none.parameters[i]);
    CHECK(selective.parameters[i] == none.parameters[i]);
  }
  CHECK(full.saved_bytes < selective.saved_bytes);
  // Under LoRA the frozen linears keep nothing without checkpointing (their inputs serve only
  // the frozen weights' gradients), while selective keeps their outputs: it may keep more.
  if (!o.lora) CHECK(selective.saved_bytes < none.saved_bytes);
}

}  // namespace

TEST_CASE("checkpoint: the same outputs and gradients as without, bit for bit, keeping only the inputs",
          "[cpu][checkpoint]") {
  Tensor w1 = rand_values({16, 8}).requires_grad_(true);
  Tensor w2 = rand_values({8, 16}).requires_grad_(true);
  Tensor frozen = rand_values({8});  // read by the function, needs no gradient
  const CheckpointFunction block = [&](const TensorList& in) {
    const Tensor h = dropout(gelu(linear(in[0], w1), GeluApproximation::tanh), 0.3);
    return TensorList{add(in[0], linear(add(h, 0.0), w2)), mul(frozen, 2.0)};
  };
  auto run = [&](bool checkpointed, bool keep_products) {
    manual_seed(11);
    Tensor x = rand_values({4, 8}).requires_grad_(true);
    w1.zero_grad_(true);
    w2.zero_grad_(true);
    TensorList out = checkpointed ? checkpoint(block, {x}, {.keep_products = keep_products}) : block({x});
    Tensor loss = sum(mul(out[0], out[0]));
    const size_t kept = saved_storage_bytes(loss, {w1, w2, x});
    loss.backward();
    return std::tuple{loss.item<float>(), x.grad().to_vector<float>(), w1.grad().to_vector<float>(),
                      w2.grad().to_vector<float>(), kept, default_generator().state()};
  };
  const auto plain = run(false, false);
  for (bool keep_products : {false, true}) {
    const auto checkpointed = run(true, keep_products);
    CHECK(std::get<0>(checkpointed) == std::get<0>(plain));
    CHECK(std::get<1>(checkpointed) == std::get<1>(plain));
    CHECK(std::get<2>(checkpointed) == std::get<2>(plain));
    CHECK(std::get<3>(checkpointed) == std::get<3>(plain));
    CHECK(std::get<5>(checkpointed) == std::get<5>(plain));  // the replayed draws leave the generator as it was
    CHECK(std::get<4>(checkpointed) < std::get<4>(plain));
  }
  // Neither the inputs nor what the function reads need a gradient: no node is recorded.
  const CheckpointFunction doubling = [](const TensorList& in) { return TensorList{mul(in[0], 2.0)}; };
  CHECK(!checkpoint(doubling, {rand_values({3})}, {.inner_requires_grad = false})[0].requires_grad());
  const Tensor unknowing = checkpoint(doubling, {rand_values({3})})[0];  // it cannot know: a node
  CHECK(unknowing.requires_grad());
  CHECK_NOTHROW(sum(unknowing).backward());  // whose recomputation needs no backward
  // Without grad mode it is the function itself.
  NoGradGuard no_grad;
  CHECK(!checkpoint(block, {rand_values({4, 8})})[0].requires_grad());
}

TEST_CASE("checkpoint: a function that computes something else the second time is an error", "[cpu][checkpoint]") {
  Tensor w = rand_values({4, 4}).requires_grad_(true);
  int calls = 0;
  const CheckpointFunction changing = [&](const TensorList& in) {
    ++calls;
    return TensorList{calls == 1 ? linear(in[0], w) : mul(in[0], 2.0)};
  };
  Tensor out = checkpoint(changing, {rand_values({2, 4})}, {.keep_products = true})[0];
  CHECK_THROWS_WITH(sum(out).backward(), Catch::Contains("took 0 of the 1 kept results"));
}

TEST_CASE("activation checkpointing: GPT-2 and Llama train bit for bit as without, keeping less",
          "[cpu][checkpoint][lm]") {
  for (const char* config : {kGpt2, kLlama}) {
    INFO(config);
    check_same_training(config, {});
    check_same_training(config, {.dropout = 0.2});
  }
}

TEST_CASE("activation checkpointing: the peak of host memory during a step drops", "[cpu][checkpoint][lm]") {
  const Tensor ids = wide_ids(4);
  for (std::string config : {kGpt2Wide, kLlamaWide}) {
    // The step's peak above the model and its gradients, with the model's 6 layers or 12.
    auto step_peak = [&](ActivationCheckpointing mode, int layers) {
      std::string sized = config;
      for (const char* key : {"\"n_layer\": 6", "\"num_hidden_layers\": 6"})
        if (const size_t at = sized.find(key); at != std::string::npos)
          sized.replace(at, std::strlen(key), std::string(key, std::strlen(key) - 1) + std::to_string(layers));
      manual_seed(3);
      std::shared_ptr<models::CausalLM> model = models::causal_lm_from_config(sized);
      model->set_activation_checkpointing(mode);
      model->train();
      model->loss(ids, ids).backward();  // the gradient buffers exist from here on
      reset_host_peak_memory();
      const size_t before = host_memory_stats().allocated;
      model->loss(ids, ids).backward();
      return static_cast<double>(host_memory_stats().peak_allocated - before);
    };
    // What each mode keeps per layer: the growth of the peak from 6 layers to 12, over 6. (The
    // peak itself also holds one block's recomputed activations under checkpointing; at a depth
    // this small that can outweigh selective's saving over none on the Llama, whose MLP keeps no
    // SwiGLU output even without checkpointing: ops/linalg.h's swiglu_linear.)
    auto per_layer = [&](ActivationCheckpointing mode) { return (step_peak(mode, 12) - step_peak(mode, 6)) / 6; };
    const double none = per_layer(ActivationCheckpointing::none);
    const double selective = per_layer(ActivationCheckpointing::selective);
    const double full = per_layer(ActivationCheckpointing::full);
    INFO(config << "\npeak bytes per layer: none " << none << ", selective " << selective << ", full " << full);
    CHECK(full < selective);
    CHECK(selective < none);
  }
}

TEST_CASE("activation checkpointing: under bf16 autocast, with LoRA, packed rows and every 2nd block",
          "[cpu][checkpoint][lm]") {
  for (const char* config : {kGpt2, kLlama}) {
    INFO(config);
    SECTION("autocast") { check_same_training(config, {.dropout = 0.1, .autocast = true}); }
    SECTION("lora") { check_same_training(config, {.dropout = 0.1, .lora = true}); }
    SECTION("packed") { check_same_training(config, {.packed = true}); }
    SECTION("every 2nd block") { check_same_training(config, {.dropout = 0.1, .every = 2}); }
  }
}

TEST_CASE("activation checkpointing: a [lora] recipe on a bf16 base under autocast trains the same bits",
          "[cpu][checkpoint][lora]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "genesis_test_checkpointing_base";
  std::filesystem::remove_all(dir);
  manual_seed(5);
  models::save_hf_model(*models::causal_lm_from_config(kLlama), dir);
  const std::string text = "[run]\nname = \"t\"\n[model]\nname = \"llama\"\ninit_from = \"" + dir.string() +
                           "\"\ndropout = 0.1\n[data]\nname = \"tokens\"\nshards = \"unused\"\nseq_len = 7\n"
                           "val_fraction = 0.1\n[optimizer]\nname = \"adamw\"\nlr = 1e-2\n[training]\nsteps = 4\n"
                           "[eval]\nsplit = \"val\"\n[amp]\ndtype = \"bf16\"\n[lora]\nr = 4\ndropout = 0.1\n";
  Tensor ids = empty({2, 7}, {.dtype = DType::i64});
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 5 + 1) % 40;
  auto run = [&](const std::string& mode, ActivationCheckpointing expected) {
    const RecipeSpec spec = parse_recipe(text, "t.toml", {"training.activation_checkpointing=" + mode});
    manual_seed(7);
    const std::shared_ptr<nn::Module> model = recipe::build_model(spec, kCPU);
    auto* lm = dynamic_cast<models::CausalLM*>(model.get());
    REQUIRE(lm != nullptr);
    CHECK(lm->activation_checkpointing() == expected);
    const std::unique_ptr<Optimizer> optimizer = recipe::build_optimizer(spec, *model);
    model->train();
    std::vector<std::vector<float>> trace;  // the losses, then the trained parameters
    trace.emplace_back();
    for (int step = 0; step < 4; ++step) {
      optimizer->zero_grad();
      Tensor loss;
      {
        AutocastGuard autocast(DType::bf16);
        loss = lm->loss(ids, ids);
      }
      loss.backward();
      optimizer->step();
      trace.front().push_back(loss.item<float>());
    }
    for (const Tensor& p : model->parameters(nn::Params::trainable)) trace.push_back(p.to_vector<float>());
    CHECK(model->parameters(nn::Params::frozen).front().dtype() == DType::bf16);
    return trace;
  };
  const auto none = run("none", ActivationCheckpointing::none);
  CHECK(run("full", ActivationCheckpointing::full) == none);
  CHECK(run("selective", ActivationCheckpointing::selective) == none);
  std::filesystem::remove_all(dir);
}

TEST_CASE("activation checkpointing: the recipe keys", "[cpu][checkpoint][recipe]") {
  const std::string lm = testing::source_path("recipes/mobydick_gpt_tiny.toml");
  const RecipeSpec defaults = load_recipe(lm);
  CHECK(defaults.training.activation_checkpointing == "none");
  CHECK(defaults.training.activation_checkpointing_every == 1);
  const RecipeSpec selective =
      load_recipe(lm, {"training.activation_checkpointing=selective", "training.activation_checkpointing_every=2"});
  CHECK(selective.training.activation_checkpointing == "selective");
  CHECK(selective.training.activation_checkpointing_every == 2);
  auto error_of = [](const std::string& path, const std::vector<std::string>& overrides) -> std::string {
    try {
      load_recipe(path, overrides);
    } catch (const RecipeError& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK_THAT(error_of(lm, {"training.activation_checkpointing=some"}),
             Catch::Contains("training.activation_checkpointing must be one of: none, full, selective"));
  CHECK_THAT(error_of(lm, {"training.activation_checkpointing_every=0"}),
             Catch::Contains("training.activation_checkpointing_every"));
  CHECK_THAT(error_of(testing::source_path("recipes/fashion_mnist_mlp.toml"), {"training.activation_checkpointing=full"}),
             Catch::Contains("model mlp has none"));
}

namespace {

// One bf16-autocast step with dropout of the wide GPT-2 and Llama (on CUDA the flash kernels,
// whose dropout bits selective keeps and full draws again): full's and selective's loss
// and gradients against none's.
void check_step_on(Device device) {
  const Tensor ids = wide_ids(2).to(device);
  for (const char* config : {kGpt2Wide, kLlamaWide}) {
    INFO(config);
    auto step = [&](ActivationCheckpointing mode) {
      manual_seed(3);
      std::shared_ptr<models::CausalLM> model = models::causal_lm_from_config(config);
      model->to(device);
      model->set_dropout(0.1);
      model->set_activation_checkpointing(mode);
      model->train();
      Tensor loss;
      {
        AutocastGuard autocast(DType::bf16);
        loss = model->loss(ids, ids);
      }
      loss.backward();
      std::vector<Tensor> values{loss.to(kCPU)};
      for (const Tensor& p : model->parameters()) values.push_back(p.grad().to(kCPU));
      return values;
    };
    const std::vector<Tensor> none = step(ActivationCheckpointing::none);
    for (ActivationCheckpointing mode : {ActivationCheckpointing::full, ActivationCheckpointing::selective}) {
      const std::vector<Tensor> other = step(mode);
      REQUIRE(other.size() == none.size());
      CHECK(other[0].item() == Approx(none[0].item()).epsilon(1e-6));
      for (size_t i = 1; i < none.size(); ++i) {
        // The same kernels on the same values: bit for bit on the CPU; on CUDA within the
        // tolerance of GEMM reordering (selective keeps linear_gelu's output there).
        const double err = std::sqrt(sum(mul(sub(other[i], none[i]), sub(other[i], none[i]))).item());
        const double norm = std::sqrt(sum(mul(none[i], none[i])).item());
        CHECK(err <= 1e-2 * norm + 1e-6);
        if (device.is_cpu()) CHECK(other[i].to_vector<float>() == none[i].to_vector<float>());
      }
    }
  }
}

}  // namespace

TEST_CASE("activation checkpointing: a bf16 step with dropout at head_dim 32 gives none's loss and gradients",
          "[cpu][checkpoint]") {
  check_step_on(kCPU);
}

TEST_CASE("cuda activation checkpointing: bf16 flash attention with dropout gives none's loss and gradients",
          "[cuda][checkpoint]") {
  if (!testing::cuda_ready()) return;
  check_step_on(Device(DeviceType::cuda, 0));
}
