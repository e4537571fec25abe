#include "libgenesis/models/sequence_classifier.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/models/blocks.h"
#include "libgenesis/nn/init.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/index.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/reduce.h"

namespace genesis::models {

std::optional<Pooling> parse_pooling(const std::string& name) {
  if (name == "last") return Pooling::last;
  if (name == "mean") return Pooling::mean;
  return std::nullopt;
}

SequenceClassifier::SequenceClassifier(std::shared_ptr<CausalLM> backbone, int64_t num_classes, Pooling pooling)
    : backbone_(std::move(backbone)), num_classes_(num_classes), pooling_(pooling) {
  GENESIS_CHECK(backbone_ != nullptr && num_classes >= 1, ValueError,
                "SequenceClassifier: a backbone and at least one class are needed");
  // Registered without a name of its own: its parameters keep the names transformers' *ForSequenceClassification
  // gives them ("model.layers.0...").
  register_module("", backbone_);
  backbone_->set_trainable({"lm_head"}, false);
  const nlohmann::json config = nlohmann::json::parse(backbone_->hf_config_json(), nullptr, false);
  const double spread =
      config.is_object() && config.contains("initializer_range") && config["initializer_range"].is_number()
          ? config["initializer_range"].get<double>()
          : 0.02;
  const Tensor& embedding = backbone_->head_weight();
  Tensor weight = empty({num_classes, embedding.size(1)});
  {
    NoGradGuard no_grad;
    nn::init::normal_(weight, 0.0, spread);
  }
  auto head = register_module("score", std::make_shared<detail::Container>("Linear (no bias)"));
  score_ = &head->add_parameter("weight", weight.to(embedding.device()).requires_grad_());
}

std::string SequenceClassifier::describe() const {
  return backbone_->describe() + " with a " + std::to_string(num_classes_) + "-class head (" +
         (pooling_ == Pooling::last ? "last token" : "mean") + " pooling)";
}

Tensor SequenceClassifier::forward(const Tensor& ids) {
  GENESIS_CHECK(ids.dim() == 2 && (ids.dtype() == DType::i32 || ids.dtype() == DType::i64), ShapeError,
                "SequenceClassifier: ids must be i32 or i64 [batch, length], got ", dtype_name(ids.dtype()), " ",
                ids.shape());
  const Tensor host = ids.to(kCPU).to(DType::i64).contiguous();
  const int64_t rows = host.size(0), width = host.size(1);
  const int64_t* v = host.data<int64_t>();
  std::vector<int64_t> lengths(static_cast<size_t>(rows));
  int64_t longest = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* row = v + r * width;
    int64_t n = 0;
    while (n < width && row[n] != kPad) ++n;
    for (int64_t t = n; t < width; ++t)
      GENESIS_CHECK(row[t] == kPad, ValueError, "SequenceClassifier: row ", r, " has a token after its padding");
    GENESIS_CHECK(n > 0, ValueError, "SequenceClassifier: row ", r, " has no token");
    lengths[static_cast<size_t>(r)] = n;
    longest = std::max(longest, n);
  }
  // The rows cut to the longest, padding replaced by token 0: causal attention keeps it from the
  // real tokens, and pooling leaves it out.
  std::vector<int32_t> clean(static_cast<size_t>(rows * longest), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < lengths[static_cast<size_t>(r)]; ++t)
      clean[static_cast<size_t>(r * longest + t)] = static_cast<int32_t>(v[r * width + t]);
  const Device device = ids.device();
  const Tensor hidden = backbone_->hidden_states(from_vector(clean, {rows, longest}, {.device = device}), nullptr);
  const int64_t size = hidden.size(2);
  Tensor pooled;
  if (pooling_ == Pooling::last) {
    std::vector<int64_t> last(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) last[static_cast<size_t>(r)] = r * longest + lengths[static_cast<size_t>(r)] - 1;
    pooled = index_select(hidden.reshape({rows * longest, size}), 0, from_vector(last, {rows}, {.device = device}));
  } else {
    std::vector<float> weights(static_cast<size_t>(rows * longest), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0; t < lengths[static_cast<size_t>(r)]; ++t)
        weights[static_cast<size_t>(r * longest + t)] = 1.0f / static_cast<float>(lengths[static_cast<size_t>(r)]);
    pooled = sum(mul(hidden.to(DType::f32), from_vector(weights, {rows, longest, 1}, {.device = device})), {1});
  }
  return linear(pooled, *score_);
}

}  // namespace genesis::models
