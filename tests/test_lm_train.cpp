// Language-model measures of the trainer: evaluation on a token shard (loss, perplexity,
// bits per byte), token byte lengths, training FLOPs per token and the MFU peak.
#include <cmath>
#include <filesystem>
#include <numeric>

#include "libgenesis/core/interrupt.h"
#include "libgenesis/data/shards.h"
#include "libgenesis/data/tokenizer.h"
#include "libgenesis/models/hf.h"
#include "libgenesis/train/lm_metrics.h"
#include "tests/testing.h"
#include "tests/generated_docs.h"

using namespace genesis;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<models::CausalLM> tiny(const std::string& config) {
  manual_seed(11);
  return models::causal_lm_from_config(config);
}

const char* kGpt2 = R"({"model_type": "gpt2", "vocab_size": 24, "n_positions": 16, "n_embd": 8, "n_layer": 2,
                       "n_head": 2})";

fs::path temp_shard(const std::string& name, const std::vector<uint32_t>& tokens) {
  const fs::path path = fs::temp_directory_path() / ("genesis_test_lm_" + name + ".bin");
  data::write_token_shard(path, tokens, 24);
  return path;
}

}  // namespace

TEST_CASE("lm eval: loss, perplexity and bits per byte over every window", "[cpu][lm]") {
  auto model = tiny(kGpt2);
  std::vector<uint32_t> tokens(3 * 5 + 3);  // seq_len 5: three windows, two tokens left over
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((i * 7 + 3) % 24);
  const fs::path path = temp_shard("eval", tokens);
  data::TokenShard shard(path);
  std::vector<uint32_t> token_bytes(24);
  for (size_t id = 0; id < token_bytes.size(); ++id) token_bytes[id] = static_cast<uint32_t>(id % 3 + 1);

  auto metrics = train::evaluate_lm(*model, shard, 5, 2, token_bytes, kCPU);
  REQUIRE(metrics.at("tokens") == 15);
  double bytes = 0;
  for (size_t i = 1; i <= 15; ++i) bytes += token_bytes[tokens[i]];  // the targets of the three windows
  REQUIRE(metrics.at("bytes") == bytes);
  REQUIRE(metrics.at("perplexity") == Approx(std::exp(metrics.at("loss"))));
  REQUIRE(metrics.at("bits_per_byte") == Approx(metrics.at("loss") * 15 / (bytes * std::log(2.0))));

  // The loss is the mean next-token cross-entropy of the windows, whatever the batching.
  double expected = 0;
  for (int64_t w = 0; w < 3; ++w) {
    std::vector<int64_t> window(tokens.begin() + w * 5, tokens.begin() + w * 5 + 6);
    Tensor ids = from_vector(window, {1, 6}, {.dtype = DType::i64});
    expected += models::causal_lm_loss((*model)(ids), ids).item() / 3;
  }
  REQUIRE(metrics.at("loss") == Approx(expected).epsilon(1e-6));
  REQUIRE(train::evaluate_lm(*model, shard, 5, 1, token_bytes, kCPU).at("loss") == Approx(expected).epsilon(1e-6));
  REQUIRE(model->is_training());  // evaluation restores the mode

  // A token beyond the tokenizer, a shard shorter than one window.
  REQUIRE_THROWS_AS(train::evaluate_lm(*model, shard, 5, 2, std::vector<uint32_t>(10, 1), kCPU), IndexError);
  REQUIRE_THROWS_AS(train::evaluate_lm(*model, shard, 18, 2, token_bytes, kCPU), ValueError);
  // A stop request (SIGINT/SIGTERM under genesis train) ends an evaluation with Interrupted.
  request_interrupt();
  CHECK_THROWS_AS(train::evaluate_lm(*model, shard, 5, 2, token_bytes, kCPU), Interrupted);
  clear_interrupt();
  fs::remove(path);
}

TEST_CASE("lm eval: token byte lengths add up to the decoded bytes", "[cpu][lm]") {
  const fs::path tokenizer_json = genesis::testing::source_path("tests/fixtures/tokenizer_bpe/tokenizer.json");
  if (!fs::exists(tokenizer_json)) {
    WARN("skipped: tests/fixtures/tokenizer_bpe is missing");
    return;
  }
  const data::Tokenizer tokenizer = data::Tokenizer::load(tokenizer_json);
  const std::vector<uint32_t> lengths = train::token_byte_lengths(tokenizer);
  REQUIRE(lengths.size() == tokenizer.vocab_size());
  const std::string text = "Call me Ishmael. Some years ago \xE2\x80\x94 never mind how long precisely <|endoftext|>";
  size_t bytes = 0;
  for (data::TokenId id : tokenizer.encode(text)) bytes += lengths[id];
  REQUIRE(bytes == text.size());
}

TEST_CASE("lm MFU: training FLOPs per token and the peak rate", "[cpu][lm]") {
  auto gpt2 = tiny(kGpt2);
  // 6 N + 12 L d T, N without the position table (a lookup), with the tied head (wte).
  const double n = static_cast<double>(gpt2->num_parameters()) - 16 * 8;
  REQUIRE(train::training_flops_per_token(*gpt2, 10) == 6 * n + 12.0 * 2 * 8 * 10);

  // An untied decoder: the input embedding is a lookup, the head a matmul; head_dim * heads
  // is the attention width.
  auto llama = tiny(R"({"model_type": "llama", "vocab_size": 30, "hidden_size": 16, "intermediate_size": 24,
                        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 6,
                        "tie_word_embeddings": false})");
  const double untied = static_cast<double>(llama->num_parameters()) - 30 * 16;
  REQUIRE(train::training_flops_per_token(*llama, 7) == 6 * untied + 12.0 * 3 * 24 * 7);

  // Frozen weights have no weight gradient (4 N), and no input gradient below the first trained
  // one (2 N): freeze the embedding, layer 0 and the head; layers 1-2 and the final norm train.
  const double layer = static_cast<double>(llama->num_parameters() - 2 * 30 * 16 - 16) / 3;  // final norm: 16
  llama->set_trainable({"embed", "layers.0.", "lm_head"}, false);
  REQUIRE(train::training_flops_per_token(*llama, 7) ==
          2 * layer + 6 * (2 * layer + 16) + 4 * 30 * 16 + 12.0 * 3 * 24 * 7);

  REQUIRE(train::peak_flops(kCPU, 123.0).flops_per_s == 123e12);
  train::PeakRate cpu = train::peak_flops(kCPU, 0);
  REQUIRE(cpu.flops_per_s > 1e8);
  REQUIRE(cpu.source.find("measured") != std::string::npos);
}
