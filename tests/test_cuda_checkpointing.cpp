// Activation checkpointing on CUDA: full and selective train a Llama decoder and GPT-2 as without
// checkpointing (bf16 autocast, dropout replayed from the generator's saved state, odd sizes:
// head_dim 12 takes the composed attention, test_activation_checkpointing.cpp's head_dim 32 the
// flash kernels), with a LoRA adapter on an NF4 base too, and keep less memory at the step's
// peak.
#if GENESIS_WITH_CUDA
#include <cmath>
#include <optional>
#include <vector>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/cuda/caching_allocator.h"
#include "libgenesis/cuda/runtime.h"
#include "libgenesis/models/hf.h"
#include "libgenesis/nn/lora.h"
#include "libgenesis/optim/optimizer.h"
#include "tests/testing.h"

using namespace genesis;
using models::ActivationCheckpointing;

namespace {

constexpr Device kCuda0{DeviceType::cuda, 0};

// Odd sizes: 5 heads of 12, an intermediate width of 100, rows of 37 tokens.
const char* kLlama = R"({"model_type": "llama", "vocab_size": 97, "hidden_size": 60, "intermediate_size": 100,
                         "num_hidden_layers": 3, "num_attention_heads": 5, "num_key_value_heads": 1,
                         "tie_word_embeddings": false})";
const char* kGpt2 = R"({"model_type": "gpt2", "vocab_size": 97, "n_positions": 64, "n_embd": 48, "n_layer": 3,
                        "n_head": 4})";

struct Trace {
  std::vector<float> losses;
  std::vector<std::vector<float>> parameters;  // the trained ones after the last step
  int64_t peak_bytes = 0;                      // the allocator's peak over the steps
};

// Five AdamW steps of a model on cuda:0 under bf16 autocast, on fixed random tokens.
Trace train(const char* config, ActivationCheckpointing mode, bool qlora) {
  manual_seed(11);
  std::shared_ptr<models::CausalLM> model = models::causal_lm_from_config(config);
  if (qlora) {
    nn::add_lora(*model, {.r = 4, .alpha = 8, .dropout = 0.1, .targets = {"all-linear"}});
    model->to(DType::bf16, nn::Params::frozen);
    for (const auto& target : nn::lora_targets(*model)) target.second->quantize_nf4(kCuda0, DType::bf16);
  }
  model->set_dropout(qlora ? 0.0 : 0.1);
  model->set_activation_checkpointing(mode, 1);
  model->to(kCuda0);
  model->train();
  Generator gen(3);
  const Tensor ids = randint(0, 97, {3, 37}, {.dtype = DType::i64}, &gen).to(kCuda0);
  std::vector<ParamGroup> groups(1);
  groups[0].params = model->named_parameters(nn::Params::trainable);
  groups[0].lr = groups[0].base_lr = 1e-2;
  auto adamw = make_adam(std::move(groups));
  cuda::synchronize();
  cuda::reset_peak_stats(0);
  Trace trace;
  for (int step = 0; step < 5; ++step) {
    adamw->zero_grad(true);
    Tensor loss;
    {
      AutocastGuard autocast(DType::bf16);
      loss = model->loss(ids, ids, Reduction::mean, Tensor());
    }
    loss.backward();
    adamw->step();
    trace.losses.push_back(loss.item<float>());
  }
  trace.peak_bytes = static_cast<int64_t>(cuda::memory_stats(0).peak_allocated);
  for (const Tensor& p : model->parameters(nn::Params::trainable))
    trace.parameters.push_back(p.to(kCPU).to(DType::f32).to_vector<float>());
  return trace;
}

void check_same_training(const char* config, bool qlora) {
  const Trace none = train(config, ActivationCheckpointing::none, qlora);
  for (ActivationCheckpointing mode : {ActivationCheckpointing::full, ActivationCheckpointing::selective}) {
    const Trace t = train(config, mode, qlora);
    INFO("mode " << static_cast<int>(mode) << ", peak bytes " << t.peak_bytes << " against " << none.peak_bytes);
    REQUIRE(t.losses.size() == none.losses.size());
    // The recomputation runs the same kernels on the same shapes: equal up to GEMM reordering
    // (cuBLASLt's choices are per shape, so in practice bit for bit), dropout masks included.
    for (size_t i = 0; i < none.losses.size(); ++i) CHECK(t.losses[i] == Approx(none.losses[i]).epsilon(1e-5));
    REQUIRE(t.parameters.size() == none.parameters.size());
    for (size_t i = 0; i < none.parameters.size(); ++i) {
      double worst = 0;
      for (size_t k = 0; k < none.parameters[i].size(); ++k)
        worst = std::max(worst, static_cast<double>(std::abs(t.parameters[i][k] - none.parameters[i][k])));
      CHECK(worst <= 1e-5);
    }
    if (mode == ActivationCheckpointing::full) CHECK(t.peak_bytes < none.peak_bytes);
  }
}

}  // namespace

TEST_CASE("cuda activation checkpointing: full and selective train as without (bf16, dropout, odd sizes)",
          "[cuda][checkpoint]") {
  if (!testing::cuda_ready()) return;
  for (const char* config : {kLlama, kGpt2}) {
    INFO(config);
    check_same_training(config, false);
  }
}

TEST_CASE("cuda activation checkpointing: a LoRA adapter on an NF4 base trains as without", "[cuda][checkpoint][nf4]") {
  if (!testing::cuda_ready()) return;
  check_same_training(kLlama, true);
}

#endif  // GENESIS_WITH_CUDA
