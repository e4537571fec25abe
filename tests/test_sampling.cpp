// Next-token sampling (temperature, top-k, top-p masks, seeded draws), the KV-cache generation
// loop, and the UTF-8 splitter that `genesis generate` streams through.
#include <algorithm>
#include <cmath>
#include <map>

#include "libgenesis/models/hf.h"
#include "libgenesis/models/sampling.h"
#include "tests/testing.h"

using namespace genesis;
using models::SamplingOptions;

namespace {

Tensor logits_of(const std::vector<double>& values) {
  return from_vector(values, {static_cast<int64_t>(values.size())}, {.dtype = DType::f64});
}

std::vector<double> softmax_of(const std::vector<double>& z, double temperature) {
  std::vector<double> p;
  double total = 0;
  for (double v : z) total += std::exp(v / temperature);
  for (double v : z) p.push_back(std::exp(v / temperature) / total);
  return p;
}

std::shared_ptr<models::CausalLM> tiny_gpt2() {
  manual_seed(3);
  return models::causal_lm_from_config(
      R"({"model_type": "gpt2", "vocab_size": 40, "n_positions": 16, "n_embd": 16, "n_layer": 1, "n_head": 2})");
}

}  // namespace

TEST_CASE("sampling: temperature scales the softmax, 0 is a one-hot at the first maximum", "[cpu][sampling]") {
  const std::vector<double> z = {1.0, 3.0, -2.0, 3.0, 0.5};
  for (double temperature : {0.5, 1.0, 2.0}) {
    std::vector<double> p = models::next_token_probabilities(logits_of(z), {.temperature = temperature});
    std::vector<double> expected = softmax_of(z, temperature);
    for (size_t i = 0; i < z.size(); ++i) REQUIRE(p[i] == Approx(expected[i]).margin(1e-12));
  }
  std::vector<double> greedy = models::next_token_probabilities(logits_of(z), {.temperature = 0});
  REQUIRE(greedy == std::vector<double>{0, 1, 0, 0, 0});
  // f32 logits on any layout give the same distribution.
  Tensor f32 = logits_of(z).to(DType::f32);
  REQUIRE(models::next_token_probabilities(f32, {})[1] == Approx(softmax_of(z, 1.0)[1]).epsilon(1e-6));
}

TEST_CASE("sampling: top-k keeps the k most probable, ties to the lower id", "[cpu][sampling]") {
  const std::vector<double> z = {0.0, 2.0, 1.0, 2.0, -1.0};
  std::vector<double> p = models::next_token_probabilities(logits_of(z), {.top_k = 2});
  REQUIRE(p[0] == 0);
  REQUIRE(p[2] == 0);
  REQUIRE(p[4] == 0);
  REQUIRE(p[1] == Approx(0.5));
  REQUIRE(p[3] == Approx(0.5));
  p = models::next_token_probabilities(logits_of(z), {.top_k = 3});
  REQUIRE(p[2] > 0);
  REQUIRE(p[0] == 0);
  // top_k beyond the vocabulary keeps everything.
  p = models::next_token_probabilities(logits_of(z), {.top_k = 100});
  for (double v : p) REQUIRE(v > 0);
}

TEST_CASE("sampling: top-p keeps the smallest most-probable set of at least p", "[cpu][sampling]") {
  // Probabilities 0.5, 0.25, 0.125, 0.125 (ids 2, 0, 1, 3).
  const std::vector<double> z = {std::log(0.25), std::log(0.125), std::log(0.5), std::log(0.125)};
  auto kept = [&](double top_p) {
    std::vector<double> p = models::next_token_probabilities(logits_of(z), {.top_p = top_p});
    std::vector<int> ids;
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i] > 0) ids.push_back(static_cast<int>(i));
    return ids;
  };
  REQUIRE(kept(0.3) == std::vector<int>{2});
  REQUIRE(kept(0.5) == std::vector<int>{2});
  REQUIRE(kept(0.6) == std::vector<int>{0, 2});
  REQUIRE(kept(0.8) == std::vector<int>{0, 1, 2});  // ties: the lower id first
  REQUIRE(kept(1.0) == std::vector<int>{0, 1, 2, 3});
  std::vector<double> p = models::next_token_probabilities(logits_of(z), {.top_p = 0.6});
  REQUIRE(p[2] == Approx(2.0 / 3.0));
  // top-k applies before top-p: of {2, 0}, p = 0.9 keeps both.
  p = models::next_token_probabilities(logits_of(z), {.top_k = 2, .top_p = 0.9});
  REQUIRE((p[0] > 0 && p[2] > 0 && p[1] == 0 && p[3] == 0));
}

TEST_CASE("sampling: bad options and logits are rejected", "[cpu][sampling]") {
  const Tensor z = logits_of({1, 2});
  REQUIRE_THROWS_AS(models::next_token_probabilities(z, {.temperature = -1}), ValueError);
  REQUIRE_THROWS_AS(models::next_token_probabilities(z, {.top_k = -1}), ValueError);
  REQUIRE_THROWS_AS(models::next_token_probabilities(z, {.top_p = 0}), ValueError);
  REQUIRE_THROWS_AS(models::next_token_probabilities(z, {.top_p = 1.5}), ValueError);
  REQUIRE_THROWS_AS(models::next_token_probabilities(zeros({2, 2}), {}), ShapeError);
}

TEST_CASE("sampling: seeded draws repeat and follow the distribution", "[cpu][sampling]") {
  const std::vector<double> z = {0.0, std::log(3.0), -100.0};  // 0.25, 0.75, ~0
  models::TokenSampler a({}, 42), b({}, 42), c({}, 43);
  std::vector<int64_t> first, second, third;
  for (int i = 0; i < 64; ++i) {
    first.push_back(a.next(logits_of(z)));
    second.push_back(b.next(logits_of(z)));
    third.push_back(c.next(logits_of(z)));
  }
  REQUIRE(first == second);
  REQUIRE(first != third);
  models::TokenSampler sampler({}, 1);
  std::map<int64_t, int> counts;
  constexpr int draws = 4000;
  for (int i = 0; i < draws; ++i) ++counts[sampler.next(logits_of(z))];
  REQUIRE(counts[2] == 0);
  REQUIRE(static_cast<double>(counts[1]) / draws == Approx(0.75).margin(0.03));
  // Greedy ignores the generator.
  models::TokenSampler greedy({.temperature = 0}, 5);
  REQUIRE(greedy.next(logits_of(z)) == 1);
  REQUIRE_THROWS_AS(models::TokenSampler({.temperature = -0.5}, 0), ValueError);
}

TEST_CASE("sampling: generate with the KV cache equals greedy decoding without it", "[cpu][sampling]") {
  auto model = tiny_gpt2();
  const std::vector<int64_t> prompt = {3, 14, 15, 9};
  models::TokenSampler greedy({.temperature = 0}, 0);
  std::vector<int64_t> streamed;
  std::vector<int64_t> out = models::generate(*model, prompt, 8, greedy, {}, [&](int64_t t) { streamed.push_back(t); });
  REQUIRE(out == streamed);
  Tensor reference = models::greedy_generate(*model, from_vector(prompt, {1, 4}, {.dtype = DType::i64}), 8, false);
  REQUIRE(out == std::vector<int64_t>(reference.data<int64_t>(), reference.data<int64_t>() + 8));
  // A stop id ends generation after it; the context caps the length.
  models::TokenSampler again({.temperature = 0}, 0);
  const auto first_stop = std::find(out.begin(), out.end(), out[2]) + 1;
  REQUIRE(models::generate(*model, prompt, 8, again, {out[2]}) == std::vector<int64_t>(out.begin(), first_stop));
  models::TokenSampler capped({.temperature = 0}, 0);
  REQUIRE(models::generate(*model, prompt, 100, capped, {}).size() == 12);
}

TEST_CASE("sampling: generate rejects empty, too long and out-of-vocabulary prompts", "[cpu][sampling]") {
  auto model = tiny_gpt2();
  models::TokenSampler s({}, 0);
  REQUIRE_THROWS_AS(models::generate(*model, {}, 4, s, {}), ValueError);
  REQUIRE_THROWS_AS(models::generate(*model, std::vector<int64_t>(16, 1), 4, s, {}), ValueError);
  REQUIRE_THROWS_AS(models::generate(*model, {1, 40}, 4, s, {}), ValueError);
  REQUIRE_THROWS_AS(models::generate(*model, {-1}, 4, s, {}), ValueError);
}

TEST_CASE("sampling: Utf8Stream releases bytes once characters are complete", "[cpu][sampling]") {
  models::Utf8Stream stream;
  const std::string smile = "\xF0\x9F\x98\x80";
  REQUIRE(stream.push("a\xE2") == "a");
  REQUIRE(stream.push("\x82").empty());
  REQUIRE(stream.push("\xAC"
                      "b") ==
          "\xE2\x82\xAC"
          "b");
  REQUIRE(stream.push(smile.substr(0, 3)).empty());
  REQUIRE(stream.push(smile.substr(3)) == smile);
  REQUIRE(stream.push("\xC3").empty());
  REQUIRE(stream.push("\xA9") == "\xC3\xA9");
  // Invalid bytes pass; an unfinished character comes out at the end.
  REQUIRE(stream.push("\x80\xFF") == "\x80\xFF");
  REQUIRE(stream.push("x\xE2\x82") == "x");
  REQUIRE(stream.finish() == "\xE2\x82");
  REQUIRE(stream.finish().empty());
}
