#pragma once
// Image classifiers for the training toolkit: an MLP and a small CNN, built from nn layers.
// Parameter names are Sequential-style ("layers.0.weight"), stable across runs.
#include <memory>
#include <string>
#include <vector>

#include "libgenesis/nn/layers.h"

namespace genesis::models {

struct MlpConfig {
  Shape input_shape{1, 28, 28};     // per example (C, H, W); flattened on entry
  std::vector<int64_t> hidden{256, 128};
  int64_t num_classes = 10;
  std::string activation = "relu";
  double dropout = 0.0;
  bool operator==(const MlpConfig&) const = default;
};

struct CnnConfig {
  Shape input_shape{1, 28, 28};     // (C, H, W)
  std::vector<int64_t> channels{32, 64};  // one 3x3 conv (padding 1) + ReLU + 2x2 max-pool per entry
  int64_t fc = 128;                 // hidden fully connected width
  int64_t num_classes = 10;
  std::string activation = "relu";
  double dropout = 0.0;
  bool operator==(const CnnConfig&) const = default;
};

// Flatten -> [Linear -> activation (-> Dropout)]* -> Linear.
class Mlp final : public nn::Module {
 public:
  explicit Mlp(const MlpConfig& config, nn::LayerOptions options = {});
  Tensor forward(const Tensor& x) override { return layers_->forward(x); }
  std::string describe() const override { return "MLP"; }

 private:
  std::shared_ptr<nn::Sequential> layers_;
};

// [Conv3x3 -> activation -> MaxPool2]* -> Flatten -> Linear(fc) -> activation (-> Dropout) -> Linear.
class Cnn final : public nn::Module {
 public:
  explicit Cnn(const CnnConfig& config, nn::LayerOptions options = {});
  Tensor forward(const Tensor& x) override { return layers_->forward(x); }
  std::string describe() const override { return "CNN"; }

 private:
  std::shared_ptr<nn::Sequential> layers_;
};

}  // namespace genesis::models
