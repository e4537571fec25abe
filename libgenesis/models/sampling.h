#pragma once
// Sampling the next token of a causal language model (temperature, top-k, top-p, seeded),
// the generation loop over the KV cache that `genesis generate` streams from, and a UTF-8
// splitter that releases decoded bytes only once their characters are complete.
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "libgenesis/models/causal_lm.h"

namespace genesis::models {

struct SamplingOptions {
  double temperature = 1.0;  // logits are divided by it; 0 = greedy (argmax)
  int64_t top_k = 0;         // keep the k most probable tokens; 0 = all
  double top_p = 1.0;        // keep the smallest most-probable set of at least this mass; 1 = all
};

// Throws ValueError for a negative temperature or top_k, or top_p outside (0, 1].
void check_sampling_options(const SamplingOptions& options);

// The distribution the next token is drawn from, as transformers builds it: logits [V] (any
// float dtype and device) / temperature, softmax, the top_k most probable kept (ties to the
// lower id), then the most probable tokens whose mass before each is below top_p kept (at least
// one), renormalized. Greedy (temperature 0) gives a one-hot at the first maximal logit.
std::vector<double> next_token_probabilities(const Tensor& logits, const SamplingOptions& options);

// Draws tokens from next_token_probabilities with its own seeded generator: the same seed and
// logits give the same tokens on every machine (mt19937_64, whose sequence the standard fixes).
class TokenSampler {
 public:
  TokenSampler(SamplingOptions options, uint64_t seed);
  int64_t next(const Tensor& logits);
  // A uniform draw in [0, 1): the top 53 bits of the generator's next value.
  double uniform();

 private:
  SamplingOptions options_;
  std::mt19937_64 engine_;
};

// Continues `prompt` (one sequence) with up to max_new_tokens sampled tokens, encoding the prompt
// once and then feeding one token a step through a KV cache. Each new token goes to on_token as
// it is chosen; generation stops after a token in stop_ids (it is included) or at the model's
// context. Returns the new tokens. Throws ValueError for an empty prompt, a prompt that fills the
// context, or ids outside the vocabulary.
std::vector<int64_t> generate(CausalLM& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                              TokenSampler& sampler, const std::vector<int64_t>& stop_ids,
                              const std::function<void(int64_t)>& on_token = {});

// Splits a byte stream at UTF-8 character boundaries: push() returns the bytes whose characters
// are complete and holds back the start of a multi-byte character that the next bytes may
// finish; finish() returns what is held. Invalid bytes pass through unchanged.
class Utf8Stream {
 public:
  std::string push(const std::string& bytes);
  std::string finish();

 private:
  std::string pending_;
};

}  // namespace genesis::models
