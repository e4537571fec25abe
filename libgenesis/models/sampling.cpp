#include "libgenesis/models/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/factory.h"

namespace genesis::models {

void check_sampling_options(const SamplingOptions& o) {
  GENESIS_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, ValueError,
                "sampling: temperature must be >= 0 (0 = greedy), got ", o.temperature);
  GENESIS_CHECK(o.top_k >= 0, ValueError, "sampling: top_k must be >= 0 (0 = all tokens), got ", o.top_k);
  GENESIS_CHECK(o.top_p > 0 && o.top_p <= 1, ValueError, "sampling: top_p must be in (0, 1], got ", o.top_p);
}

std::vector<double> next_token_probabilities(const Tensor& logits, const SamplingOptions& options) {
  check_sampling_options(options);
  GENESIS_CHECK(logits.dim() == 1 && logits.size(0) >= 1, ShapeError, "sampling: logits must be [vocab], got ",
                logits.shape());
  const Tensor host = logits.detach().to(kCPU).to(DType::f64).contiguous();
  const double* z = host.data<double>();
  const auto vocab = static_cast<size_t>(host.size(0));
  const size_t best = static_cast<size_t>(std::max_element(z, z + vocab) - z);
  std::vector<double> p(vocab, 0.0);
  if (options.temperature == 0) {
    p[best] = 1.0;
    return p;
  }
  for (size_t i = 0; i < vocab; ++i) p[i] = std::exp((z[i] - z[best]) / options.temperature);
  // Token ids from most to least probable, ties in id order.
  std::vector<size_t> order(vocab);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  size_t keep = options.top_k > 0 ? std::min(vocab, static_cast<size_t>(options.top_k)) : vocab;
  if (options.top_p < 1) {
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += p[order[i]];
    double mass_before = 0;
    size_t nucleus = 0;
    while (nucleus < keep && (nucleus == 0 || mass_before < options.top_p * total)) mass_before += p[order[nucleus++]];
    keep = nucleus;
  }
  for (size_t i = keep; i < vocab; ++i) p[order[i]] = 0.0;
  const double kept = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& v : p) v /= kept;
  return p;
}

TokenSampler::TokenSampler(SamplingOptions options, uint64_t seed) : options_(options), engine_(seed) {
  check_sampling_options(options);
}

double TokenSampler::uniform() {
  return static_cast<double>(engine_() >> 11) * 0x1.0p-53;
}

int64_t TokenSampler::next(const Tensor& logits) {
  const std::vector<double> p = next_token_probabilities(logits, options_);
  if (options_.temperature == 0) return std::max_element(p.begin(), p.end()) - p.begin();
  const double u = uniform();
  double cumulative = 0;
  int64_t last_possible = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) continue;
    last_possible = static_cast<int64_t>(i);
    cumulative += p[i];
    if (u < cumulative) return last_possible;
  }
  return last_possible;  // u fell beyond the rounded total
}

std::vector<int64_t> generate(CausalLM& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                              TokenSampler& sampler, const std::vector<int64_t>& stop_ids,
                              const std::function<void(int64_t)>& on_token) {
  const auto length = static_cast<int64_t>(prompt.size());
  GENESIS_CHECK(length >= 1, ValueError, "generate: the prompt is empty");
  GENESIS_CHECK(max_new_tokens >= 0, ValueError, "generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  GENESIS_CHECK(length < model.max_positions(), ValueError, "generate: the prompt of ", length,
                " tokens leaves no room in the model's context of ", model.max_positions(), " positions");
  for (int64_t id : prompt)
    GENESIS_CHECK(id >= 0 && id < model.vocab_size(), ValueError, "generate: prompt token id ", id,
                  " is outside the model's vocabulary [0, ", model.vocab_size(), ")");
  const int64_t steps = std::min(max_new_tokens, model.max_positions() - length);
  std::vector<int64_t> generated;
  if (steps == 0) return generated;
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const Device device = model.parameters().front().device();
  KVCache cache = model.make_cache(1, length + steps);
  Tensor input = from_vector(prompt, {1, length}, {.dtype = DType::i64}).to(device);
  for (int64_t i = 0; i < steps; ++i) {
    Tensor logits = model.forward_with_cache(input, &cache);
    const int64_t token = sampler.next(logits.narrow(1, logits.size(1) - 1, 1).reshape({logits.size(2)}));
    generated.push_back(token);
    if (on_token) on_token(token);
    if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) break;
    input = from_vector(std::vector<int64_t>{token}, {1, 1}, {.dtype = DType::i64}).to(device);
  }
  model.train(was_training);
  return generated;
}

std::string Utf8Stream::push(const std::string& bytes) {
  pending_ += bytes;
  const size_t n = pending_.size();
  size_t complete = n;
  // Look back over at most three continuation bytes for the lead byte of the last character.
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(pending_[n - back]);
    if ((c & 0xC0) == 0x80) continue;
    const size_t need = c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xC0 && c < 0xE0 ? 2 : 1;
    if (need > back) complete = n - back;
    break;
  }
  std::string out = pending_.substr(0, complete);
  pending_.erase(0, complete);
  return out;
}

std::string Utf8Stream::finish() {
  return std::exchange(pending_, std::string());
}

}  // namespace genesis::models
