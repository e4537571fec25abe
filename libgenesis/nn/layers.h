#pragma once
// Standard layers. Initialization follows PyTorch's defaults so that recipes and
// reference scripts start from the same distribution.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "libgenesis/nn/lora.h"
#include "libgenesis/nn/module.h"
#include "libgenesis/ops/conv.h"

namespace genesis::nn {

struct LayerOptions {
  DType dtype = DType::f32;
  Device device = kCPU;
};

// y = x W^T + b with W [out, in], plus its LoRA adapter's update once one is attached
// (nn/lora.h).
class Linear final : public LoraTarget {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, LayerOptions options = {});
  std::string describe() const override;
};

class Embedding final : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, std::optional<int64_t> padding_idx = std::nullopt,
            LayerOptions options = {});
  Tensor forward(const Tensor& indices) override;
  std::string describe() const override;

 private:
  int64_t num_, dim_;
  std::optional<int64_t> padding_idx_;
  Tensor* weight_;
};

class LayerNorm final : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool affine = true, LayerOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  Shape shape_;
  double eps_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
};

class RMSNorm final : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, double eps = 1e-6, LayerOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  Shape shape_;
  double eps_;
  Tensor* weight_;
};

class Dropout final : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  double p_;
};

class Conv2d final : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel, Conv2dOptions conv = {}, bool bias = true,
         LayerOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  int64_t in_, out_;
  Pair kernel_;
  Conv2dOptions conv_;
  Tensor* weight_;
  Tensor* bias_ = nullptr;
};

class MaxPool2d final : public Module {
 public:
  explicit MaxPool2d(Pool2dOptions options) : options_(options) {}
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  Pool2dOptions options_;
};

class AvgPool2d final : public Module {
 public:
  explicit AvgPool2d(Pool2dOptions options) : options_(options) {}
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  Pool2dOptions options_;
};

// Flattens dimensions [start, end] (default: all but the batch dimension).
class Flatten final : public Module {
 public:
  explicit Flatten(int64_t start = 1, int64_t end = -1) : start_(start), end_(end) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }
  std::string describe() const override { return "Flatten"; }

 private:
  int64_t start_, end_;
};

enum class ActivationKind { relu, gelu, gelu_tanh, silu, tanh, sigmoid };
// Parses "relu", "gelu", "gelu_tanh", "silu", "tanh", "sigmoid"; UsageError otherwise.
ActivationKind parse_activation(const std::string& name);

class Activation final : public Module {
 public:
  explicit Activation(ActivationKind kind) : kind_(kind) {}
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  ActivationKind kind_;
};

// Children named "0", "1", ... (PyTorch's nn.Sequential naming); forward chains them.
class Sequential final : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<ModulePtr> modules);
  void append(ModulePtr module);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "Sequential"; }
  size_t size() const { return layers_.size(); }
  Module& operator[](size_t i) { return *layers_.at(i); }

 private:
  std::vector<ModulePtr> layers_;
};

// A list of modules named "0", "1", ... that does not define forward (the owner iterates).
class ModuleList final : public Module {
 public:
  void append(ModulePtr module);
  Tensor forward(const Tensor& x) override;  // throws: a ModuleList is not callable
  std::string describe() const override { return "ModuleList"; }
  size_t size() const { return items_.size(); }
  Module& operator[](size_t i) { return *items_.at(i); }

 private:
  std::vector<ModulePtr> items_;
};

}  // namespace genesis::nn
