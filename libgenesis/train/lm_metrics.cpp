#include "libgenesis/train/lm_metrics.h"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/core/interrupt.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/loss.h"
#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis::train {

std::vector<uint32_t> token_byte_lengths(const data::Tokenizer& tokenizer) {
  std::vector<uint32_t> lengths(tokenizer.vocab_size());
  for (size_t id = 0; id < lengths.size(); ++id)
    lengths[id] = static_cast<uint32_t>(tokenizer.token_bytes(static_cast<data::TokenId>(id)).size());
  return lengths;
}

std::map<std::string, double> evaluate_lm(models::CausalLM& model, const data::TokenShard& shard, int64_t seq_len,
                                          int64_t batch_size, const std::vector<uint32_t>& token_bytes, Device device,
                                          const EvalShare& share) {
  const int64_t windows = (shard.size() - 1) / seq_len;
  GENESIS_CHECK(windows > 0, ValueError, "evaluate: ", shard.path().string(), " holds ", shard.size(),
                " tokens, fewer than seq_len + 1 = ", seq_len + 1);
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  Tensor loss_sum = scalar_tensor(0.0, {.dtype = DType::f64, .device = device});
  double bytes = 0;
  std::vector<int64_t> window(static_cast<size_t>(seq_len + 1));
  for (int64_t first = 0; first < windows; first += batch_size) {
    if (!share.mine(first / batch_size)) continue;
    check_interrupt("evaluating");
    const int64_t rows = std::min(batch_size, windows - first);
    Tensor inputs = empty({rows, seq_len}, {.dtype = DType::i64});
    Tensor targets = empty({rows, seq_len}, {.dtype = DType::i64});
    for (int64_t r = 0; r < rows; ++r) {
      shard.read((first + r) * seq_len, seq_len + 1, window.data());
      std::copy(window.begin(), window.end() - 1, inputs.data<int64_t>() + r * seq_len);
      std::copy(window.begin() + 1, window.end(), targets.data<int64_t>() + r * seq_len);
      for (size_t t = 1; t < window.size(); ++t) {
        const auto id = static_cast<size_t>(window[t]);
        GENESIS_CHECK(id < token_bytes.size(), IndexError, "evaluate: token ", id, " in ", shard.path().string(),
                      " is outside the tokenizer's vocabulary of ", token_bytes.size());
        bytes += token_bytes[id];
      }
    }
    loss_sum = add(loss_sum, model.loss(inputs.to(device), targets.to(device), Reduction::sum).to(DType::f64));
    share.report(first / batch_size + 1, (windows + batch_size - 1) / batch_size);
  }
  model.train(was_training);
  const double tokens = static_cast<double>(windows * seq_len);
  std::vector<double> sums{loss_sum.item(), bytes};
  share.reduce(sums);
  const double total = sums[0];
  bytes = sums[1];
  const double loss = total / tokens;
  return {{"loss", loss},
          {"perplexity", std::exp(loss)},
          {"bits_per_byte", bytes > 0 ? total / (bytes * std::log(2.0)) : 0.0},
          {"tokens", tokens},
          {"bytes", bytes}};
}

double training_flops_per_token(const models::CausalLM& model, int64_t seq_len) {
  // parameter_info(): an NF4 base's weights count as the frozen matmuls they still are.
  const std::vector<nn::ParameterInfo> parameters = model.parameter_info();
  std::set<std::string> names;
  for (const nn::ParameterInfo& p : parameters) names.insert(p.name);
  // Per matmul weight and token: 2 FLOPs forward, 2 for the input's gradient, 2 for the weight's.
  // A frozen weight has no weight gradient, and no input gradient either while nothing before it
  // (in registration order, which follows the forward here) trains.
  double matmul_flops = 0;
  bool trained_below = false;
  for (const nn::ParameterInfo& p : parameters) {
    const bool lookup_only =
        p.name == "transformer.wpe.weight" || (p.name == "model.embed_tokens.weight" && names.count("lm_head.weight"));
    const double per_weight = p.trainable ? 6.0 : trained_below ? 4.0 : 2.0;
    if (!lookup_only) matmul_flops += per_weight * static_cast<double>(p.numel);
    trained_below |= p.trainable;
  }
  const nlohmann::json config = nlohmann::json::parse(model.hf_config_json());
  double layers = 0, attention_width = 0;
  if (model.model_type() == "gpt2") {
    layers = config.at("n_layer").get<double>();
    attention_width = config.at("n_embd").get<double>();
  } else {
    layers = config.at("num_hidden_layers").get<double>();
    const double heads = config.at("num_attention_heads").get<double>();
    const double head_dim = config.contains("head_dim") && config["head_dim"].is_number()
                                ? config["head_dim"].get<double>()
                                : config.at("hidden_size").get<double>() / heads;
    attention_width = heads * head_dim;
  }
  // Attention's score and value products: 4 L d T forward per token, twice that backward, as long
  // as anything trains below the top layer (always, in practice).
  return matmul_flops + 12.0 * layers * attention_width * static_cast<double>(seq_len);
}

namespace {

double measured_cpu_gemm_flops() {
  constexpr int64_t n = 1024;
  Generator gen(0);  // its own: the default generator's draws (dropout) stay those of the run
  Tensor a = randn({n, n}, {}, &gen), b = randn({n, n}, {}, &gen);
  NoGradGuard no_grad;
  matmul(a, b);  // warm-up: threads started, pages touched
  constexpr int reps = 3;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) matmul(a, b);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return seconds > 0 ? reps * 2.0 * static_cast<double>(n * n * n) / seconds : 0.0;
}

}  // namespace

PeakRate peak_flops(Device device, double requested_tflops) {
  if (requested_tflops > 0) return {requested_tflops * 1e12, "run.peak_tflops"};
  if (device.is_cpu()) return {measured_cpu_gemm_flops(), "measured f32 GEMM (1024^3) on this CPU"};
#if GENESIS_WITH_CUDA
  cudaDeviceProp props{};
  GENESIS_CUDA_CHECK(cudaGetDeviceProperties(&props, device.index));
  const std::string name = props.name;
  struct Known {
    const char* name_part;
    double tflops;
  };
  // Dense bf16 tensor-core peaks from NVIDIA's data sheets; the PCIe H100 is checked first.
  for (const Known& k : {Known{"H100 PCIe", 756}, Known{"H100", 989}, Known{"H200", 989}, Known{"A100", 312}})
    if (name.find(k.name_part) != std::string::npos)
      return {k.tflops * 1e12, name + " dense bf16 peak (" + std::to_string(static_cast<int>(k.tflops)) + " TFLOP/s)"};
  return {0.0, name + ": peak unknown (set run.peak_tflops for MFU)"};
#else
  return {0.0, "no CUDA in this build"};
#endif
}

}  // namespace genesis::train
