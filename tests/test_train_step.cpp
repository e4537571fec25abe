// The training step's loss normalization: the loss of an optimizer step is the sum over every
// counted target of all its micro-batches divided by their number, so that gradient
// accumulation equals one larger batch also when the micro-batches count different numbers
// of targets (SFT rows with masked prompts).
#include <cmath>

#include "libgenesis/models/hf.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/reduce.h"
#include "libgenesis/train/step.h"
#include "tests/testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

const char* kDecoder = R"({"model_type": "llama", "vocab_size": 40, "hidden_size": 16, "intermediate_size": 24,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32})";

// Targets of ids [B, T]: the next token, with `masked` leading positions of each row set to the
// ignore index (a prompt), so that rows count different numbers of targets.
data::Batch lm_batch(const Tensor& ids, const std::vector<int64_t>& masked) {
  const int64_t rows = ids.size(0), steps = ids.size(1) - 1;
  Tensor inputs = ids.narrow(1, 0, steps).contiguous(), targets = ids.narrow(1, 1, steps).contiguous().clone();
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    auto* row = targets.data<int64_t>() + r * steps;
    for (int64_t t = 0; t < masked[static_cast<size_t>(r)]; ++t) row[t] = -100;
    counted += steps - masked[static_cast<size_t>(r)];
  }
  return {.inputs = inputs, .targets = targets, .loss_terms = counted, .tokens = rows * steps};
}

// One step with SGD (lr 1) over `batches` as micro-batches: the parameters' change is minus
// the step's gradient.
std::pair<std::vector<Tensor>, double> step_delta(const std::vector<data::Batch>& batches) {
  manual_seed(7);
  auto model = models::causal_lm_from_config(kDecoder);
  std::vector<Tensor> before;
  for (const Tensor& p : model->parameters()) before.push_back(p.detach().clone());
  auto optimizer = make_sgd({ParamGroup{.params = model->named_parameters(), .lr = 1.0, .base_lr = 1.0}});
  train::TrainStep step(*model, *optimizer, nullptr,
                        {.autocast = std::nullopt, .grad_accum_steps = static_cast<int64_t>(batches.size())});
  size_t next = 0;
  const train::StepResult result = step.run(
      {.next = [&] { return batches[next++]; },
       .loss_terms_ahead =
           [&](int64_t count) {
             int64_t terms = 0;
             for (size_t i = next; i < next + static_cast<size_t>(count); ++i) terms += batches[i].counted_targets();
             return terms;
           }},
      Device());
  std::vector<Tensor> delta;
  for (size_t i = 0; i < before.size(); ++i) delta.push_back(sub(model->parameters()[i].detach(), before[i]));
  return {delta, result.loss.item()};
}

}  // namespace

TEST_CASE("train step: accumulated micro-batches with unequal counted targets equal one batch", "[cpu][train]") {
  manual_seed(3);
  const Tensor ids = randint(0, 40, {4, 12});
  // Rows 0-1 count 11 and 2 targets, rows 2-3 count 6 and 9: mean-of-means would weigh the
  // first micro-batch's 13 targets like the second's 15.
  const data::Batch first = lm_batch(ids.narrow(0, 0, 2).contiguous(), {0, 9});
  const data::Batch second = lm_batch(ids.narrow(0, 2, 2).contiguous(), {5, 2});
  const data::Batch whole = lm_batch(ids, {0, 9, 5, 2});
  REQUIRE(first.counted_targets() + second.counted_targets() == whole.counted_targets());

  const auto [accumulated, accumulated_loss] = step_delta({first, second});
  const auto [one_batch, one_batch_loss] = step_delta({whole});
  CHECK(accumulated_loss == Approx(one_batch_loss).epsilon(1e-6));
  // The whole gradient within 1e-6 in relative L2 norm, each parameter's within 1e-5 (two
  // backward passes sum an entry's terms in another order than one does: a small gradient, a
  // norm weight's, shows it most).
  double diff_squares = 0, grad_squares = 0, largest = 0;
  for (size_t i = 0; i < one_batch.size(); ++i) {
    const Tensor expected = one_batch[i].to(DType::f64), diff = sub(accumulated[i].to(DType::f64), expected);
    const double d2 = sum(mul(diff, diff)).item(), g2 = sum(mul(expected, expected)).item();
    INFO("parameter " << i << ": |difference| " << std::sqrt(d2) << ", |gradient| " << std::sqrt(g2));
    CHECK(std::sqrt(d2) <= 1e-5 * std::sqrt(g2));
    diff_squares += d2;
    grad_squares += g2;
    largest = std::max(largest, max(abs(expected)).item());
  }
  CHECK(std::sqrt(diff_squares) <= 1e-6 * std::sqrt(grad_squares));
  CHECK(largest > 1e-3);  // the step did move the weights

  // The loss is the mean over the counted targets (the model's own masked mean on the whole batch).
  manual_seed(7);
  auto model = models::causal_lm_from_config(kDecoder);
  CHECK(one_batch_loss == Approx(model->loss(whole.inputs, whole.targets).item()).epsilon(1e-6));
}

TEST_CASE("train step: a step whose micro-batches count no target has loss 0, not NaN", "[cpu][train]") {
  const Tensor ids = randint(0, 40, {2, 6});
  const auto [delta, loss] = step_delta({lm_batch(ids, {5, 5})});
  CHECK(loss == 0.0);
  for (const Tensor& d : delta) CHECK(max(abs(d)).item() == 0.0);
}
