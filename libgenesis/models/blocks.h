#pragma once
// Building pieces shared by the language models (internal to libgenesis/models).
#include <memory>
#include <string>

#include "libgenesis/nn/module.h"

namespace genesis::models::detail {

// A named node of the parameter tree that computes nothing itself (Hugging Face's
// "transformer", "model", "wte", ...): the owning model reads its tensors.
class Container final : public nn::Module {
 public:
  explicit Container(std::string description) : description_(std::move(description)) {}
  Tensor& add_parameter(std::string name, Tensor value) {
    return register_parameter(std::move(name), std::move(value));
  }
  template <class M>
  std::shared_ptr<M> add_module(std::string name, std::shared_ptr<M> module) {
    return register_module(std::move(name), std::move(module));
  }
  Tensor forward(const Tensor& x) override;  // throws: the owner computes
  std::string describe() const override { return description_; }

 private:
  std::string description_;
};

// Hugging Face's initialization: normal(0, std) for matrices and embeddings, zeros for biases,
// ones for norm weights (every 1-D tensor whose name ends in "norm.weight" or "ln_*.weight").
void init_like_hugging_face(nn::Module& model, double std);

// The dtype and device of a model's parameters.
TensorOptions parameter_options(const nn::Module& model);

}  // namespace genesis::models::detail
