#pragma once
// A sequence classifier: a causal language model's final hidden states pooled over each row's
// tokens and mapped to class logits by a linear head without bias, as transformers'
// LlamaForSequenceClassification / Qwen2ForSequenceClassification / GPT2ForSequenceClassification
// compute it (the head is `score`). Parameter names are those classes' names: the backbone's own
// ("model.layers.0...", "transformer.h.0...") and "score.weight".
//
// Rows are right-padded with kPad: a row's tokens come first, then kPad to the end. Attention is
// causal, so padding never reaches a real token; pooling excludes it, and the batch is cut to its
// longest row before the backbone runs.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "libgenesis/models/causal_lm.h"

namespace genesis::models {

// How a row's hidden states become one vector: the last real token's (transformers' choice for
// decoder models), or the mean over the real tokens.
enum class Pooling { last, mean };
std::optional<Pooling> parse_pooling(const std::string& name);

class SequenceClassifier final : public nn::Module {
 public:
  static constexpr int32_t kPad = -1;
  // The head is new: normal(0, std) with std = the backbone's config.json initializer_range
  // (0.02 when absent), as transformers initializes it. The backbone's untied output head
  // (lm_head) takes no part and is frozen.
  SequenceClassifier(std::shared_ptr<CausalLM> backbone, int64_t num_classes, Pooling pooling);
  // ids [B, T] (i32 or i64), right-padded with kPad -> logits [B, num_classes]. ValueError for a
  // row without a token or with a token after its padding.
  Tensor forward(const Tensor& ids) override;
  std::string describe() const override;
  CausalLM& backbone() { return *backbone_; }
  const CausalLM& backbone() const { return *backbone_; }
  int64_t num_classes() const { return num_classes_; }

 private:
  std::shared_ptr<CausalLM> backbone_;
  Tensor* score_;  // [num_classes, hidden]
  int64_t num_classes_;
  Pooling pooling_;
};

}  // namespace genesis::models
