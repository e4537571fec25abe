// LoRA (nn/lora.h): the adapter's forward and gradients (f64 gradcheck), target selection,
// an adapted model equal to its base while B = 0, a frozen base left byte-identical by training,
// the [lora] recipe keys, PEFT's adapters, and QLoRA's NF4 base.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/autograd/checkpoint.h"
#include "libgenesis/io/peft.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/models/hf.h"
#include "libgenesis/nn/layers.h"
#include "libgenesis/nn/lora.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/quant.h"
#include "libgenesis/ops/transformer.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/lm_metrics.h"
#include "tests/testing.h"
#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/caching_allocator.h"
#endif

using namespace genesis;
namespace fs = std::filesystem;

namespace {

const char* kLlama = R"({"model_type": "llama", "vocab_size": 40, "hidden_size": 16, "intermediate_size": 24,
                         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                         "tie_word_embeddings": false})";
const char* kGpt2 = R"({"model_type": "gpt2", "vocab_size": 40, "n_positions": 16, "n_embd": 8, "n_layer": 2,
                        "n_head": 2})";

std::shared_ptr<models::CausalLM> tiny(const char* config) {
  manual_seed(5);
  return models::causal_lm_from_config(config);
}

Tensor ids_for(int64_t vocab) {
  Tensor ids = empty({2, 7}, {.dtype = DType::i64});
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 7 + 3) % vocab;
  return ids;
}

std::vector<std::string> adapted(const nn::Module& model) {
  std::vector<std::string> names;
  for (const auto& [name, target] : nn::lora_targets(model))
    if (target->lora()) names.push_back(name);
  return names;
}

// Random non-zero B factors, so that the adapters change the output.
void randomize_b(nn::Module& model, uint64_t seed) {
  NoGradGuard no_grad;
  Generator gen(seed);
  for (NamedTensor p : model.named_parameters(nn::Params::trainable))
    if (p.name.ends_with("lora_B.weight")) p.tensor.copy_(mul(randn(p.tensor.shape(), {}, &gen), 0.05));
}

// Stores every linear layer's weight of `model` in NF4 on `device`.
void quantize_all(nn::Module& model, Device device, DType compute) {
  for (const auto& target : nn::lora_targets(model)) target.second->quantize_nf4(device, compute);
}

// The text of a recipe that trains the tiny Llama saved in `dir` (model.init_from) on the CPU.
std::string llama_recipe(const fs::path& dir) {
  return "[run]\nname = \"t\"\n[model]\nname = \"llama\"\ninit_from = \"" + dir.string() +
         "\"\n[data]\nname = \"tokens\"\nshards = \"unused\"\nseq_len = 8\nval_fraction = 0.1\n"
         "[optimizer]\nname = \"adamw\"\nlr = 1e-3\n[training]\nsteps = 1\n[eval]\nsplit = \"val\"\n";
}

// Two copies of the tiny Llama with the same non-zero adapters on every linear layer, both on the
// CPU in f32: one to stay there, one to move to the GPU.
std::pair<std::shared_ptr<models::CausalLM>, std::shared_ptr<models::CausalLM>> adapted_pair() {
  auto cpu = tiny(kLlama);
  nn::add_lora(*cpu, {.r = 4, .alpha = 8, .targets = {"all-linear"}});
  randomize_b(*cpu, 9);
  auto gpu = tiny(kLlama);
  nn::add_lora(*gpu, {.r = 4, .alpha = 8, .targets = {"all-linear"}});
  gpu->load_state_dict(cpu->state_dict());
  return {cpu, gpu};
}

// One loss and backward of `cpu` (f32) and of `gpu` (on cuda:0 under bf16 autocast) on the same
// tokens: the losses within 2%, each adapter's gradient (f32 on both) within `tolerance` x its
// norm.
void check_cuda_step(models::CausalLM& cpu, models::CausalLM& gpu, double tolerance) {
  constexpr Device kCuda0{DeviceType::cuda, 0};
  const Tensor ids = ids_for(40);
  const Tensor cpu_loss = cpu.loss(ids, ids_for(39), Reduction::mean, Tensor());
  cpu_loss.backward();
  Tensor gpu_loss;
  {
    AutocastGuard autocast(DType::bf16);
    gpu_loss = gpu.loss(ids.to(kCuda0), ids_for(39).to(kCuda0), Reduction::mean, Tensor());
  }
  gpu_loss.backward();
  CHECK(gpu_loss.item() == Approx(cpu_loss.item()).epsilon(2e-2));
  const std::vector<NamedTensor> a = cpu.named_parameters(nn::Params::trainable);
  const std::vector<NamedTensor> b = gpu.named_parameters(nn::Params::trainable);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].name);
    CHECK(b[i].tensor.dtype() == DType::f32);
    const Tensor ga = a[i].tensor.grad(), gb = b[i].tensor.grad().to(kCPU);
    const double err = std::sqrt(sum(mul(sub(ga, gb), sub(ga, gb))).item());
    const double norm = std::sqrt(sum(mul(ga, ga)).item());
    CHECK(err <= tolerance * norm + 1e-6);
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("LoRA: forward is base + scale (x A^T) B^T, gradients of x, A and B gradchecked in f64", "[cpu][lora]") {
  manual_seed(3);
  nn::Linear layer(5, 4, true);
  layer.to(DType::f64);
  layer.set_trainable(false);
  nn::LoraOptions options{.r = 3, .alpha = 6, .targets = {"all-linear"}};
  layer.attach_lora(nn::make_lora_adapter(5, 4, options, kCPU));
  layer.to(DType::f64);
  const nn::LoraAdapter& lora = *layer.lora();
  CHECK(lora.scale == 2.0);
  Tensor a = lora.a->weight(), b = lora.b->weight();
  CHECK(a.shape() == Shape{3, 5});
  CHECK(b.shape() == Shape{4, 3});
  CHECK(b.to_vector<double>() == std::vector<double>(12, 0.0));  // PEFT's init: B = 0
  {
    NoGradGuard no_grad;
    b.copy_(testing::rand_values({4, 3}, DType::f64));
  }
  const Tensor x = testing::rand_leaf({2, 3, 5});
  // The closed form, in f64.
  const Tensor w = layer.named_parameters()[0].tensor, bias = layer.named_parameters()[1].tensor;
  const Tensor expected =
      add(add(matmul(x, w.t()), bias), mul(matmul(matmul(x, a.t()), b.t()), 2.0));
  testing::require_close(layer(x), expected, 1e-12, 1e-12);
  testing::gradcheck([&](const TensorList& in) { return layer(in[0]); }, {x, a, b});
  // The frozen base weight gets no gradient.
  mean(layer(x)).backward();
  CHECK(!w.grad().defined());
  CHECK(a.grad().defined());

  // Dropout acts on the adapter's input while training only.
  nn::Linear dropped(5, 4, false);
  dropped.attach_lora(nn::make_lora_adapter(5, 4, {.r = 2, .dropout = 0.5, .targets = {"all-linear"}}, kCPU));
  {
    NoGradGuard no_grad;
    dropped.lora()->b->weight().fill_(1.0);
  }
  const Tensor x32 = testing::rand_values({8, 5});
  dropped.eval();
  const Tensor eval_out = dropped(x32);
  testing::require_close(eval_out, dropped(x32), 0, 0);
  dropped.train();
  CHECK(!testing::allclose(dropped(x32), eval_out, 1e-3, 1e-3));
}

namespace {

// `block` under selective checkpointing against the plain run, on a [4, in_features] input: the
// output and the gradients of the input and of the adapter factors a and b, bit for bit.
void check_checkpointing_bit_exact(const CheckpointFunction& block, int64_t in_features, Tensor& a, Tensor& b) {
  auto run = [&](bool checkpointed) {
    manual_seed(9);
    Tensor in = testing::rand_values({4, in_features}).requires_grad_(true);
    a.zero_grad_(true);
    b.zero_grad_(true);
    const Tensor out = checkpointed ? checkpoint(block, {in}, {.keep_products = true})[0] : block({in})[0];
    sum(mul(out, out)).backward();
    return std::tuple{out.to_vector<float>(), in.grad().to_vector<float>(), a.grad().to_vector<float>(),
                      b.grad().to_vector<float>()};
  };
  CHECK(run(true) == run(false));
}

}  // namespace

TEST_CASE("LoRA: lora_linear on a transposed weight, and under selective checkpointing bit for bit", "[cpu][lora]") {
  manual_seed(4);
  const Tensor x = testing::rand_leaf({2, 3, 5}), wt = testing::rand_leaf({5, 4});
  const Tensor a = testing::rand_leaf({2, 5}), b = testing::rand_leaf({4, 2});
  // GPT-2's Conv1D keeps its weight [in, out] and is applied through the transposed view.
  const Tensor composed = add(linear(x, wt.t()), mul(linear(linear(x, a), b), 0.5));
  testing::require_close(lora_linear(x, wt.t(), Tensor(), a, b, 0.5), composed, 1e-12, 1e-12);
  testing::gradcheck([](const TensorList& in) { return lora_linear(in[0], in[1].t(), Tensor(), in[2], in[3], 0.5); },
                     {x, wt, a, b});

  // Selective checkpointing keeps the op's output and x A^T; the replay takes them back.
  const Tensor w = testing::rand_values({6, 5}), bias = testing::rand_values({6});
  Tensor a32 = testing::rand_values({3, 5}).requires_grad_(true), b32 = testing::rand_values({6, 3}).requires_grad_(true);
  check_checkpointing_bit_exact(
      [&](const TensorList& in) {
        return TensorList{gelu(lora_linear(in[0], w, bias, a32, b32, 2.0), GeluApproximation::tanh)};
      },
      5, a32, b32);
}

namespace {

// The forward's output and every input's gradient of swiglu_linear, fused or composed (swiglu,
// then lora_linear or linear), for gate and up [rows, k] (strided views when `strided`).
std::vector<std::vector<float>> swiglu_linear_run(bool fused, bool adapted, bool strided, Device device,
                                                  std::optional<DType> autocast) {
  manual_seed(21);
  const int64_t rows = 37, k = 13, n = 11, r = 3;
  auto leaf = [&](const Shape& shape) { return testing::rand_values(shape).to(device).requires_grad_(true); };
  Tensor gate = leaf(strided ? Shape{k, rows} : Shape{rows, k}), up = leaf(strided ? Shape{k, rows} : Shape{rows, k});
  Tensor w = leaf({n, k}), bias = leaf({n}), a = leaf({r, k}), b = leaf({n, r});
  // Under autocast gate and up arrive in the autocast dtype, as the MLP's projections give them
  // (the fused op casts f32 ones, being a matrix product; swiglu alone would keep them f32).
  Tensor g = strided ? gate.t() : gate, u = strided ? up.t() : up;
  if (autocast) {
    g = g.to(*autocast);
    u = u.to(*autocast);
  }
  Tensor out;
  {
    AutocastGuard cast(autocast);
    if (fused) {
      out = adapted ? swiglu_linear(g, u, w, bias, a, b, 1.5) : swiglu_linear(g, u, w, bias);
    } else {
      const Tensor h = swiglu(g, u);
      out = adapted ? lora_linear(h, w, bias, a, b, 1.5) : linear(h, w, bias);
    }
  }
  const Tensor weights = testing::rand_values(out.shape()).to(device).to(out.dtype());
  sum(mul(out.to(DType::f32), weights.to(DType::f32))).backward();
  std::vector<std::vector<float>> values{out.to(DType::f32).to(Device{}).to_vector<float>()};
  for (const Tensor& t : {gate, up, w, bias, a, b})
    if (t.grad().defined()) values.push_back(t.grad().to(DType::f32).to(Device{}).to_vector<float>());
  return values;
}

}  // namespace

TEST_CASE("LoRA: swiglu_linear equals swiglu then lora_linear or linear, bit for bit, and checkpoints", "[cpu][lora]") {
  for (bool adapted : {true, false})
    for (bool strided : {false, true}) {
      INFO("adapted " << adapted << ", strided " << strided);
      const auto fused = swiglu_linear_run(true, adapted, strided, Device{}, std::nullopt);
      CHECK(fused.size() == (adapted ? 7u : 5u));
      CHECK(fused == swiglu_linear_run(false, adapted, strided, Device{}, std::nullopt));
    }
  // Under bf16 autocast on the CPU as well (h rounded to bf16 in both).
  CHECK(swiglu_linear_run(true, true, false, Device{}, DType::bf16) ==
        swiglu_linear_run(false, true, false, Device{}, DType::bf16));
  // Gradients in f64, the adapted and the plain forms.
  const Tensor gate = testing::rand_leaf({2, 3, 6}), up = testing::rand_leaf({2, 3, 6});
  const Tensor w = testing::rand_leaf({5, 6}), bias = testing::rand_leaf({5});
  const Tensor a = testing::rand_leaf({2, 6}), b = testing::rand_leaf({5, 2});
  testing::gradcheck([](const TensorList& in) { return swiglu_linear(in[0], in[1], in[2], in[3], in[4], in[5], 0.5); },
                     {gate, up, w, bias, a, b});
  testing::gradcheck([](const TensorList& in) { return swiglu_linear(in[0], in[1], in[2].t()); },
                     {gate, up, testing::rand_leaf({6, 5})});
  // Errors name the op and the shapes.
  CHECK_THROWS_WITH(swiglu_linear(gate, testing::rand_leaf({2, 3, 5}), w), Catch::Contains("swiglu_linear: gate"));
  CHECK_THROWS_WITH(swiglu_linear(gate, up, w, bias, a, Tensor(), 1.0), Catch::Contains("lora_b"));

  // Selective checkpointing keeps the op's output and x A^T; the replay takes them back.
  Tensor a32 = testing::rand_values({3, 6}).requires_grad_(true), b32 = testing::rand_values({5, 3}).requires_grad_(true);
  const Tensor w_gate = testing::rand_values({6, 6}), w_up = testing::rand_values({6, 6}), w_down = testing::rand_values({5, 6});
  check_checkpointing_bit_exact(
      [&](const TensorList& in) {
        const Tensor projected =
            swiglu_linear(linear(in[0], w_gate), linear(in[0], w_up), w_down, Tensor(), a32, b32, 2.0);
        return TensorList{gelu(projected, GeluApproximation::tanh)};
      },
      6, a32, b32);
}

#if GENESIS_WITH_CUDA
TEST_CASE("cuda LoRA: swiglu_linear equals the composed ops bit for bit, and keeps no SwiGLU output", "[cuda][lora]") {
  if (!testing::cuda_ready()) return;
  constexpr Device kCuda0{DeviceType::cuda, 0};
  for (bool adapted : {true, false})
    for (bool strided : {false, true})
      for (std::optional<DType> autocast : {std::optional<DType>(), std::optional<DType>(DType::bf16)}) {
        INFO("adapted " << adapted << ", strided " << strided << ", autocast " << autocast.has_value());
        CHECK(swiglu_linear_run(true, adapted, strided, kCuda0, autocast) ==
              swiglu_linear_run(false, adapted, strided, kCuda0, autocast));
      }
  // What the graph holds after the forward: the composed form keeps h [rows, k] for the down
  // projection's weight gradient; the fused op does not.
  auto held = [&](bool fused) {
    const int64_t rows = 1024, k = 512, n = 256;
    const Tensor gate = testing::rand_values({rows, k}).to(kCuda0).requires_grad_(true);
    const Tensor up = testing::rand_values({rows, k}).to(kCuda0).requires_grad_(true);
    const Tensor w = testing::rand_values({n, k}).to(kCuda0).requires_grad_(true);
    const size_t before = cuda::memory_stats().allocated;
    const Tensor out = fused ? swiglu_linear(gate, up, w) : linear(swiglu(gate, up), w);
    return static_cast<int64_t>(cuda::memory_stats().allocated - before) -
           static_cast<int64_t>(out.numel() * out.element_size());
  };
  CHECK(held(true) == 0);
  CHECK(held(false) >= 1024 * 512 * 4);
}
#endif  // GENESIS_WITH_CUDA

TEST_CASE("LoRA: targets by name or dotted suffix, all-linear, and errors naming the layers", "[cpu][lora]") {
  CHECK(nn::lora_pattern_matches("model.layers.0.self_attn.q_proj", "q_proj"));
  CHECK(nn::lora_pattern_matches("model.layers.0.self_attn.q_proj", "self_attn.q_proj"));
  CHECK(nn::lora_pattern_matches("q_proj", "q_proj"));
  CHECK(!nn::lora_pattern_matches("model.layers.0.self_attn.q_proj", "proj"));
  CHECK(!nn::lora_pattern_matches("model.layers.0.self_attn.xq_proj", "q_proj"));

  auto llama = tiny(kLlama);
  const int64_t total = llama->num_parameters();
  auto names = nn::add_lora(*llama, {.r = 2, .targets = {"q_proj", "mlp.down_proj"}});
  CHECK(names == std::vector<std::string>{"model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj",
                                          "model.layers.1.self_attn.q_proj", "model.layers.1.mlp.down_proj"});
  CHECK(adapted(*llama) == names);
  // Only the adapters train: q_proj 16 -> 16 and down_proj 24 -> 16 at r = 2, two layers.
  const int64_t adapters = 2 * (2 * (16 + 16) + 2 * (24 + 16));
  CHECK(llama->num_parameters(nn::Params::trainable) == adapters);
  CHECK(llama->num_parameters() == total + adapters);
  for (const NamedTensor& p : llama->named_parameters(nn::Params::trainable))
    CHECK((p.name.ends_with(".lora_A.weight") || p.name.ends_with(".lora_B.weight")));

  // all-linear: the seven projections of each decoder layer; GPT-2's four Conv1D layers; never a head.
  auto all = tiny(kLlama);
  CHECK(nn::add_lora(*all, {.r = 2, .targets = {"all-linear"}}).size() == 2 * 7);
  auto gpt2 = tiny(kGpt2);
  CHECK(nn::add_lora(*gpt2, {.r = 2, .targets = {"all-linear"}}) ==
        std::vector<std::string>{"transformer.h.0.attn.c_attn", "transformer.h.0.attn.c_proj",
                                 "transformer.h.0.mlp.c_fc", "transformer.h.0.mlp.c_proj",
                                 "transformer.h.1.attn.c_attn", "transformer.h.1.attn.c_proj",
                                 "transformer.h.1.mlp.c_fc", "transformer.h.1.mlp.c_proj"});
  for (const NamedTensor& p : gpt2->named_parameters(nn::Params::trainable)) {
    if (p.name == "transformer.h.0.attn.c_attn.lora_A.weight") CHECK(p.tensor.shape() == Shape{2, 8});
    if (p.name == "transformer.h.0.attn.c_attn.lora_B.weight") CHECK(p.tensor.shape() == Shape{24, 2});
  }

  const std::string none = error_of([] { nn::add_lora(*tiny(kLlama), {.r = 2, .targets = {"q_proj", "proj"}}); });
  CHECK(none.find("LoRA target 'proj' matches no linear layer") != std::string::npos);
  CHECK(none.find("model.layers.N.self_attn.q_proj, model.layers.N.self_attn.k_proj") != std::string::npos);
  const std::string big = error_of([] { nn::add_lora(*tiny(kLlama), {.r = 9, .targets = {"k_proj"}}); });
  CHECK(big.find("r = 9 exceeds the dimensions of 'model.layers.0.self_attn.k_proj' (16 -> 8): use r <= 8") !=
        std::string::npos);
  CHECK(error_of([] { nn::add_lora(*tiny(kLlama), {.r = 2, .targets = {}}); }).find("no target") != std::string::npos);

  CHECK(nn::LoraOptions{.r = 16, .alpha = 32}.scale() == 2.0);
  CHECK(nn::LoraOptions{.r = 16, .alpha = 32, .use_rslora = true}.scale() == 8.0);
}

TEST_CASE("LoRA: with B = 0 the adapted models give their base's logits bit for bit", "[cpu][lora]") {
  for (const char* config : {kLlama, kGpt2}) {
    auto model = tiny(config);
    model->eval();
    const Tensor ids = ids_for(40);
    const std::vector<float> base = model->forward(ids).to_vector<float>();
    nn::add_lora(*model, {.r = 4, .alpha = 16, .targets = {"all-linear"}});
    CHECK(model->forward(ids).to_vector<float>() == base);
  }
}

TEST_CASE("LoRA: training moves the adapters only, the frozen base stays byte-identical", "[cpu][lora]") {
  for (const char* config : {kLlama, kGpt2}) {
    auto model = tiny(config);
    {
      // A "pretrained" head: Hugging Face's init (std 0.02) leaves logits within about +-0.3 of
      // each other behind the final norm, which no adapter below it can widen.
      NoGradGuard no_grad;
      for (NamedTensor p : model->named_parameters())
        if (p.name.find("lm_head") != std::string::npos || p.name.find("wte") != std::string::npos)
          p.tensor.copy_(mul(p.tensor, 50.0));
    }
    nn::add_lora(*model, {.r = 4, .alpha = 8, .dropout = 0.1, .targets = {"all-linear"}});
    std::vector<std::pair<std::string, std::vector<float>>> frozen;
    for (const NamedTensor& p : model->named_parameters(nn::Params::frozen))
      frozen.emplace_back(p.name, p.tensor.to_vector<float>());
    std::vector<ParamGroup> groups(1);
    groups[0].params = model->named_parameters(nn::Params::trainable);
    groups[0].lr = groups[0].base_lr = 3e-2;
    auto adamw = make_adam(std::move(groups));
    const Tensor ids = ids_for(40);
    const Tensor targets = ids;  // learn to repeat the input: reachable through the adapters
    double first = 0, last = 0;
    for (int step = 0; step < 40; ++step) {
      adamw->zero_grad(true);
      const Tensor loss = model->loss(ids, targets, Reduction::mean, Tensor());
      loss.backward();
      adamw->step();
      (step == 0 ? first : last) = loss.item();
    }
    INFO("loss " << first << " -> " << last);
    CHECK(last < 0.7 * first);
    const std::vector<NamedTensor> after = model->named_parameters(nn::Params::frozen);
    REQUIRE(after.size() == frozen.size());
    for (size_t i = 0; i < after.size(); ++i) {
      CHECK(after[i].name == frozen[i].first);
      CHECK(after[i].tensor.to_vector<float>() == frozen[i].second);
      CHECK(!after[i].tensor.grad().defined());
    }
    // Two optimizer slots and a step count per adapter tensor, none for the base.
    CHECK(adamw->state().size() == 3 * model->named_parameters(nn::Params::trainable).size());
  }
}

TEST_CASE("LoRA recipes: [lora] adapts init_from's model in model.dtype, bad keys are recipe errors", "[cpu][lora]") {
  const fs::path dir = fs::temp_directory_path() / "genesis_test_lora_base";
  fs::remove_all(dir);
  models::save_hf_model(*tiny(kLlama), dir);
  const std::string base = llama_recipe(dir);
  auto build = [&](const std::string& extra) { return recipe::build_model(parse_recipe(base + extra, "t.toml"), kCPU); };

  // auto: f32 without autocast, bf16 under amp.dtype = bf16; adapters f32 either way.
  for (const auto& [extra, frozen] : {std::pair{std::string("[lora]\nr = 4\n"), DType::f32},
                                      std::pair{std::string("[amp]\ndtype = \"bf16\"\n[lora]\nr = 4\n"), DType::bf16}}) {
    auto model = build(extra);
    CHECK(adapted(*model).size() == 2 * 7);
    for (const NamedTensor& p : model->named_parameters())
      CHECK(p.tensor.dtype() == (p.tensor.requires_grad() ? DType::f32 : frozen));
  }
  auto qv = build("[lora]\nr = 2\nalpha = 4.0\ntargets = [\"q_proj\", \"v_proj\"]\n");
  CHECK(adapted(*qv).size() == 4);

  auto recipe_error = [&](const std::string& extra) {
    return error_of([&] { build(extra); });
  };
  CHECK(recipe_error("[lora]\nr = 4\ntargets = [\"qkv\"]\n").find("lora: LoRA target 'qkv' matches no linear layer") !=
        std::string::npos);
  CHECK(recipe_error("[lora]\nr = 12\n").find("use r <= 8") != std::string::npos);
  CHECK(recipe_error("[lora]\nalpha = 16.0\n").find("lora.r is not") != std::string::npos);
  std::string frozen_too = base;
  frozen_too.replace(frozen_too.find("steps = 1\n"), 10, "steps = 1\nfreeze = [\"embed\"]\n");
  CHECK(error_of([&] { parse_recipe(frozen_too + "[lora]\nr = 4\n", "t.toml"); }).find("training.freeze has no use") !=
        std::string::npos);
  CHECK(error_of([] {
          parse_recipe("[run]\nname = \"t\"\n[model]\nname = \"llama\"\n[optimizer]\nname = \"sgd\"\nlr = 0.1\n"
                       "[training]\nsteps = 1\n[lora]\nr = 4\n",
                       "t.toml");
        }).find("lora.r needs model.init_from") != std::string::npos);
  CHECK(error_of([&] { parse_recipe(base + "[lora]\nr = 4\n", "t.toml").model.adapter; }) == "no error");
  std::string with_adapter = base;
  with_adapter.replace(with_adapter.find("init_from"), 0, "adapter = \"somewhere\"\n");
  CHECK(error_of([&] { parse_recipe(with_adapter + "[lora]\nr = 4\n", "t.toml"); }).find("leave lora.r out") !=
        std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("LoRA: adapters PEFT wrote (tests/fixtures/peft) give PEFT's logits on their bases", "[cpu][lora][peft]") {
  // scripts/reference/make_peft_fixture.py: tiny llama, qwen2 and gpt2 bases, PEFT adapters of
  // r 4 on every linear layer with random non-zero A and B, and the f32 logits of both models.
  for (const std::string type : {"llama", "qwen2", "gpt2"}) {
    fs::path dir;
    for (const char* root : std::initializer_list<const char*>{std::getenv("GENESIS_SOURCE_DIR"), GENESIS_SOURCE_DIR})
      if (root && fs::exists(fs::path(root) / "tests/fixtures/peft" / type)) dir = fs::path(root) / "tests/fixtures/peft" / type;
    REQUIRE_FALSE(dir.empty());
    const nlohmann::json reference = nlohmann::json::parse(io::read_file(dir / "reference.json"));
    const auto ids_rows = reference.at("input_ids").get<std::vector<std::vector<int64_t>>>();
    Tensor ids = empty({static_cast<int64_t>(ids_rows.size()), static_cast<int64_t>(ids_rows[0].size())},
                       {.dtype = DType::i64});
    for (size_t r = 0; r < ids_rows.size(); ++r)
      for (size_t c = 0; c < ids_rows[r].size(); ++c) ids.data<int64_t>()[r * ids_rows[0].size() + c] = ids_rows[r][c];
    auto compare = [&](const Tensor& logits, const char* key) {
      const auto expected = reference.at(key).get<std::vector<std::vector<std::vector<float>>>>();
      const std::vector<float> got = logits.contiguous().to_vector<float>();
      double worst = 0;
      size_t i = 0;
      for (const auto& row : expected)
        for (const auto& position : row)
          for (float v : position) worst = std::max(worst, std::abs(static_cast<double>(got[i++]) - v));
      REQUIRE(i == got.size());
      INFO(type << " " << key << ": largest difference " << worst);
      CHECK(worst < 2e-4);  // f32 through a 2-layer model: transformers and genesis sum in other orders
    };
    auto model = models::load_hf_model(dir / "base");
    model->eval();
    compare(model->forward(ids), "base_logits");
    const io::PeftAdapter adapter = io::read_peft_adapter(dir / "adapter");
    CHECK(io::apply_peft_adapter(*model, adapter).size() == (type == "gpt2" ? 2 * 4 : 2 * 7));
    compare(model->forward(ids), "adapted_logits");
  }
}

TEST_CASE("cuda LoRA: a bf16 base under autocast trains its adapters as the CPU's f32 run does", "[cuda][lora]") {
  if (!testing::cuda_ready()) return;
  constexpr Device kCuda0{DeviceType::cuda, 0};
  // The same tiny Llama with non-zero adapters on both devices: the loss and the adapters'
  // gradients of the CUDA step (bf16 base, bf16 autocast) against the CPU's in f32.
  auto [cpu, gpu] = adapted_pair();
  gpu->to(DType::bf16, nn::Params::frozen);
  gpu->to(kCuda0);
  // bf16 products: the gradients agree to about 1% of their norm.
  check_cuda_step(*cpu, *gpu, 0.03);
  for (const NamedTensor& p : gpu->named_parameters(nn::Params::frozen)) CHECK(!p.tensor.grad().defined());
}

TEST_CASE("QLoRA: an NF4 base computes with its dequantized weights, leaves the state dict and counts as frozen",
          "[cpu][lora][nf4]") {
  for (const char* config : {kLlama, kGpt2}) {
    const bool gpt2 = config == kGpt2;
    auto q = tiny(config);
    nn::add_lora(*q, {.r = 4, .alpha = 8, .targets = {"all-linear"}});
    randomize_b(*q, 4);
    auto ref = tiny(config);
    nn::add_lora(*ref, {.r = 4, .alpha = 8, .targets = {"all-linear"}});
    ref->load_state_dict(q->state_dict());
    const int64_t total = q->num_parameters(), frozen = q->num_parameters(nn::Params::frozen);
    const size_t tensors = q->named_parameters().size();
    const double flops = train::training_flops_per_token(*q, 7);
    quantize_all(*q, kCPU, DType::f32);

    // The reference holds each weight as NF4 gives it back, in the layout the layer keeps.
    const auto targets = nn::lora_targets(*q);
    {
      NoGradGuard no_grad;
      std::map<std::string, Tensor> weights;
      for (const NamedTensor& p : ref->named_parameters()) weights[p.name] = p.tensor;
      for (const auto& [name, target] : targets) {
        REQUIRE(target->nf4() != nullptr);
        const Tensor w = dequantize_nf4(*target->nf4(), DType::f32);
        weights.at(name + ".weight").copy_(gpt2 ? w.t() : w);
      }
    }
    q->eval();
    ref->eval();
    const Tensor ids = ids_for(40);
    const std::vector<float> got = q->forward(ids).to_vector<float>(), want = ref->forward(ids).to_vector<float>();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(want[i]).margin(1e-5));

    // Its tensors leave the parameters and the state dict; the counts (and the FLOPs) stay.
    CHECK(q->named_parameters().size() == tensors - targets.size());
    CHECK(q->state_dict().size() == ref->state_dict().size() - targets.size());
    CHECK(q->num_parameters() == total);
    CHECK(q->num_parameters(nn::Params::frozen) == frozen);
    CHECK(train::training_flops_per_token(*q, 7) == flops);
    int64_t quantized = 0;
    for (const nn::ParameterInfo& p : q->parameter_info()) quantized += p.quantized ? 1 : 0;
    CHECK(quantized == static_cast<int64_t>(targets.size()));
    CHECK(q->summary().find("total parameters: " + std::to_string(total)) != std::string::npos);

    // An NF4 weight cannot train, nor be quantized twice; a trained one cannot be quantized.
    CHECK(error_of([&] { q->set_trainable({gpt2 ? "c_attn" : "q_proj"}, true); }).find("stored in NF4") !=
          std::string::npos);
    CHECK(error_of([&] { targets[0].second->quantize_nf4(kCPU, DType::f32); }).find("already quantized") !=
          std::string::npos);
    nn::Linear trained(8, 4);
    CHECK(error_of([&] { trained.quantize_nf4(kCPU, DType::f32); }).find("freeze it first") != std::string::npos);
  }
}

TEST_CASE("QLoRA: training moves the adapters, the NF4 base stays byte-identical", "[cpu][lora][nf4]") {
  auto model = tiny(kLlama);
  {
    NoGradGuard no_grad;  // a "pretrained" head, as in the LoRA training test above
    for (NamedTensor p : model->named_parameters())
      if (p.name.find("lm_head") != std::string::npos) p.tensor.copy_(mul(p.tensor, 50.0));
  }
  nn::add_lora(*model, {.r = 4, .alpha = 8, .targets = {"all-linear"}});
  quantize_all(*model, kCPU, DType::f32);
  std::vector<std::vector<uint8_t>> codes;
  auto bytes_of = [](const Tensor& t) {
    const auto* p = static_cast<const uint8_t*>(t.data_ptr());
    return std::vector<uint8_t>(p, p + t.numel());
  };
  for (const auto& target : nn::lora_targets(*model)) codes.push_back(bytes_of(target.second->nf4()->codes));
  std::vector<ParamGroup> groups(1);
  groups[0].params = model->named_parameters(nn::Params::trainable);
  groups[0].lr = groups[0].base_lr = 3e-2;
  auto adamw = make_adam(std::move(groups));
  const Tensor ids = ids_for(40);
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    adamw->zero_grad(true);
    const Tensor loss = model->loss(ids, ids, Reduction::mean, Tensor());
    loss.backward();
    adamw->step();
    (step == 0 ? first : last) = loss.item();
  }
  INFO("loss " << first << " -> " << last);
  CHECK(last < 0.7 * first);
  size_t i = 0;
  for (const auto& target : nn::lora_targets(*model)) CHECK(bytes_of(target.second->nf4()->codes) == codes[i++]);
}

TEST_CASE("QLoRA recipes: lora.base_quant = \"nf4\" stores the base's linear layers in NF4 in model.dtype",
          "[cpu][lora][nf4]") {
  const fs::path dir = fs::temp_directory_path() / "genesis_test_qlora_base";
  fs::remove_all(dir);
  models::save_hf_model(*tiny(kLlama), dir);
  const std::string base = llama_recipe(dir);
  auto build = [&](const std::string& extra) { return recipe::build_model(parse_recipe(base + extra, "t.toml"), kCPU); };
  for (const auto& [extra, compute] :
       {std::pair{std::string("[lora]\nr = 4\nbase_quant = \"nf4\"\n"), DType::f32},
        std::pair{std::string("[amp]\ndtype = \"bf16\"\n[lora]\nr = 4\nbase_quant = \"nf4\"\n"), DType::bf16},
        std::pair{std::string("[lora]\nr = 2\ntargets = [\"q_proj\"]\nbase_quant = \"nf4\"\n"), DType::f32}}) {
    auto model = build(extra);
    // Every linear layer of the blocks, adapted or not (bitsandbytes' QLoRA does the same).
    const auto targets = nn::lora_targets(*model);
    REQUIRE(targets.size() == 14);
    for (const auto& target : targets) {
      REQUIRE(target.second->nf4() != nullptr);
      CHECK(target.second->nf4()->compute_dtype == compute);
    }
    // What stays a tensor: embeddings, norms and the head in model.dtype, the adapters in f32.
    for (const NamedTensor& p : model->named_parameters())
      CHECK(p.tensor.dtype() == (p.tensor.requires_grad() ? DType::f32 : compute));
  }
  CHECK(error_of([&] { parse_recipe(base + "[lora]\nbase_quant = \"nf4\"\n", "t.toml"); })
            .find("nothing trains adapters: set lora.r") != std::string::npos);
  CHECK(error_of([&] { parse_recipe(base + "[lora]\nr = 4\nbase_quant = \"int8\"\n", "t.toml"); })
            .find("base_quant") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("cuda QLoRA: an NF4 base quantized on the GPU trains its adapters as the CPU's does", "[cuda][lora][nf4]") {
  if (!testing::cuda_ready()) return;
  constexpr Device kCuda0{DeviceType::cuda, 0};
  // The same tiny Llama, its base in NF4 on each device: from the f32 weights computing in f32 on
  // the CPU, from their bf16 rounding computing in bf16 under autocast on CUDA.
  auto [cpu, gpu] = adapted_pair();
  quantize_all(*cpu, kCPU, DType::f32);
  gpu->to(DType::bf16, nn::Params::frozen);
  // The CPU's NF4 codes of the same bf16 weights: quantization gives the same bits on both devices.
  std::map<std::string, Tensor> bf16_weights;
  for (const NamedTensor& p : gpu->named_parameters(nn::Params::frozen)) bf16_weights[p.name] = p.tensor;
  quantize_all(*gpu, kCuda0, DType::bf16);
  gpu->to(kCuda0);
  for (const auto& [name, target] : nn::lora_targets(*gpu)) {
    INFO(name);
    const Nf4Weight want = quantize_nf4(bf16_weights.at(name + ".weight"));
    const Nf4Weight got = target->nf4()->to(kCPU);
    REQUIRE(got.codes.numel() == want.codes.numel());
    CHECK(std::memcmp(got.codes.data_ptr(), want.codes.data_ptr(), static_cast<size_t>(want.codes.numel())) == 0);
    CHECK(std::memcmp(got.absmax_codes.data_ptr(), want.absmax_codes.data_ptr(),
                      static_cast<size_t>(want.absmax_codes.numel())) == 0);
  }
  // bf16 dequantized weights and products against f32 ones.
  check_cuda_step(*cpu, *gpu, 0.05);
}
