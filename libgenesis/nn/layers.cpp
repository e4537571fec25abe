#include "libgenesis/nn/layers.h"

#include <cmath>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/nn/init.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/nn.h"

namespace genesis::nn {

namespace {
TensorOptions opts(const LayerOptions& o) { return {.dtype = o.dtype, .device = o.device}; }
std::string pair_str(Pair p) { return std::to_string(p[0]) + "x" + std::to_string(p[1]); }
}  // namespace

namespace {

// A Linear's weight [out, in], Kaiming-uniform (a = sqrt(5)) as PyTorch initializes it.
Tensor linear_weight(int64_t in, int64_t out, LayerOptions o) {
  GENESIS_CHECK(in > 0 && out > 0, ValueError, "Linear: sizes must be positive (got ", in, " -> ", out, ")");
  Tensor w = empty({out, in}, opts(o));
  init::kaiming_uniform_(w, std::sqrt(5.0));
  return w;
}

// Its bias [out], uniform in +-1/sqrt(in).
Tensor linear_bias(int64_t in, int64_t out, LayerOptions o) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  Tensor b = empty({out}, opts(o));
  init::uniform_(b, -bound, bound);
  return b;
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, LayerOptions o)
    : LoraTarget(linear_weight(in_features, out_features, o),
                 bias ? linear_bias(in_features, out_features, o) : Tensor(), /*transposed=*/false) {}

std::string Linear::describe() const {
  return "Linear(" + std::to_string(in_features()) + " -> " + std::to_string(out_features()) +
         (bias() ? ")" : ", no bias)");
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, std::optional<int64_t> padding_idx, LayerOptions o)
    : num_(num_embeddings), dim_(dim), padding_idx_(padding_idx) {
  weight_ = &register_parameter("weight", empty({num_embeddings, dim}, opts(o)));
  init::normal_(*weight_, 0.0, 1.0);
  if (padding_idx) {
    NoGradGuard g;
    weight_->select(0, *padding_idx).fill_(0.0);
  }
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(indices, *weight_, padding_idx_); }
std::string Embedding::describe() const {
  return "Embedding(" + std::to_string(num_) + ", " + std::to_string(dim_) + ")";
}

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool affine, LayerOptions o)
    : shape_(std::move(normalized_shape)), eps_(eps) {
  if (affine) {
    weight_ = &register_parameter("weight", ones(shape_, opts(o)));
    bias_ = &register_parameter("bias", zeros(shape_, opts(o)));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, shape_, weight_ ? *weight_ : Tensor(), bias_ ? *bias_ : Tensor(), eps_);
}
std::string LayerNorm::describe() const { return "LayerNorm(" + shape_str(shape_) + ")"; }

RMSNorm::RMSNorm(Shape normalized_shape, double eps, LayerOptions o) : shape_(std::move(normalized_shape)), eps_(eps) {
  weight_ = &register_parameter("weight", ones(shape_, opts(o)));
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, shape_, *weight_, eps_); }
std::string RMSNorm::describe() const { return "RMSNorm(" + shape_str(shape_) + ")"; }

Dropout::Dropout(double p) : p_(p) {
  GENESIS_CHECK(p >= 0.0 && p < 1.0, UsageError, "Dropout: p must be in [0, 1) (got ", p, ")");
}
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training()); }
std::string Dropout::describe() const { return "Dropout(p=" + std::to_string(p_) + ")"; }

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel, Conv2dOptions conv, bool bias, LayerOptions o)
    : in_(in_channels), out_(out_channels), kernel_(kernel), conv_(conv) {
  GENESIS_CHECK(conv.groups >= 1 && in_channels % conv.groups == 0 && out_channels % conv.groups == 0, ValueError,
                "Conv2d: channels (", in_channels, " -> ", out_channels, ") must be divisible by groups (", conv.groups,
                ")");
  weight_ = &register_parameter("weight", empty({out_channels, in_channels / conv.groups, kernel[0], kernel[1]}, opts(o)));
  init::kaiming_uniform_(*weight_, std::sqrt(5.0));
  if (bias) {
    double bound = 1.0 / std::sqrt(static_cast<double>(init::compute_fans(*weight_).in));
    bias_ = &register_parameter("bias", empty({out_channels}, opts(o)));
    init::uniform_(*bias_, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, *weight_, bias_ ? *bias_ : Tensor(), conv_); }
std::string Conv2d::describe() const {
  return "Conv2d(" + std::to_string(in_) + " -> " + std::to_string(out_) + ", kernel " + pair_str(kernel_) +
         ", stride " + pair_str(conv_.stride) + ", padding " + pair_str(conv_.padding) + ")";
}

Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, options_); }
std::string MaxPool2d::describe() const { return "MaxPool2d(" + pair_str(options_.kernel) + ")"; }
Tensor AvgPool2d::forward(const Tensor& x) { return avg_pool2d(x, options_); }
std::string AvgPool2d::describe() const { return "AvgPool2d(" + pair_str(options_.kernel) + ")"; }

ActivationKind parse_activation(const std::string& name) {
  if (name == "relu") return ActivationKind::relu;
  if (name == "gelu") return ActivationKind::gelu;
  if (name == "gelu_tanh") return ActivationKind::gelu_tanh;
  if (name == "silu") return ActivationKind::silu;
  if (name == "tanh") return ActivationKind::tanh;
  if (name == "sigmoid") return ActivationKind::sigmoid;
  GENESIS_THROW(UsageError, "unknown activation '", name, "' (valid: relu, gelu, gelu_tanh, silu, tanh, sigmoid)");
}

Tensor Activation::forward(const Tensor& x) {
  switch (kind_) {
    case ActivationKind::relu: return relu(x);
    case ActivationKind::gelu: return gelu(x);
    case ActivationKind::gelu_tanh: return gelu(x, GeluApproximation::tanh);
    case ActivationKind::silu: return silu(x);
    case ActivationKind::tanh: return tanh(x);
    case ActivationKind::sigmoid: return sigmoid(x);
  }
  return x;
}

std::string Activation::describe() const {
  static const char* names[] = {"ReLU", "GELU", "GELU(tanh)", "SiLU", "Tanh", "Sigmoid"};
  return names[static_cast<int>(kind_)];
}

Sequential::Sequential(std::vector<ModulePtr> modules) {
  for (ModulePtr& m : modules) append(std::move(m));
}

void Sequential::append(ModulePtr module) {
  layers_.push_back(register_module(std::to_string(layers_.size()), std::move(module)));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (ModulePtr& m : layers_) h = (*m)(h);
  return h;
}

void ModuleList::append(ModulePtr module) {
  items_.push_back(register_module(std::to_string(items_.size()), std::move(module)));
}

Tensor ModuleList::forward(const Tensor&) {
  GENESIS_THROW(NotImplementedError, "ModuleList has no forward: iterate over its modules");
}

}  // namespace genesis::nn
