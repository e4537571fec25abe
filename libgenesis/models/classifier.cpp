#include "libgenesis/models/classifier.h"

#include "libgenesis/core/error.h"

namespace genesis::models {

namespace {
void add_activation(nn::Sequential& seq, const std::string& activation, double dropout) {
  seq.append(std::make_shared<nn::Activation>(nn::parse_activation(activation)));
  if (dropout > 0.0) seq.append(std::make_shared<nn::Dropout>(dropout));
}
}  // namespace

Mlp::Mlp(const MlpConfig& c, nn::LayerOptions options) {
  GENESIS_CHECK(!c.input_shape.empty() && c.num_classes > 0, UsageError,
                "mlp: input_shape must be non-empty and num_classes positive");
  layers_ = register_module("layers", std::make_shared<nn::Sequential>());
  layers_->append(std::make_shared<nn::Flatten>());
  int64_t width = numel_of(c.input_shape);
  for (int64_t h : c.hidden) {
    GENESIS_CHECK(h > 0, UsageError, "mlp: hidden sizes must be positive (got ", h, ")");
    layers_->append(std::make_shared<nn::Linear>(width, h, true, options));
    add_activation(*layers_, c.activation, c.dropout);
    width = h;
  }
  layers_->append(std::make_shared<nn::Linear>(width, c.num_classes, true, options));
}

Cnn::Cnn(const CnnConfig& c, nn::LayerOptions options) {
  GENESIS_CHECK(c.input_shape.size() == 3, UsageError, "cnn: input_shape must be [channels, height, width], got ",
                c.input_shape);
  layers_ = register_module("layers", std::make_shared<nn::Sequential>());
  int64_t channels = c.input_shape[0], h = c.input_shape[1], w = c.input_shape[2];
  for (int64_t out : c.channels) {
    GENESIS_CHECK(out > 0, UsageError, "cnn: channel counts must be positive (got ", out, ")");
    GENESIS_CHECK(h >= 2 && w >= 2, UsageError, "cnn: too many conv blocks for a ", c.input_shape, " input");
    layers_->append(std::make_shared<nn::Conv2d>(channels, out, Pair{3, 3},
                                                 Conv2dOptions{.stride = {1, 1}, .padding = {1, 1}}, true, options));
    layers_->append(std::make_shared<nn::Activation>(nn::parse_activation(c.activation)));
    layers_->append(std::make_shared<nn::MaxPool2d>(Pool2dOptions{.kernel = {2, 2}}));
    channels = out;
    h /= 2;
    w /= 2;
  }
  layers_->append(std::make_shared<nn::Flatten>());
  layers_->append(std::make_shared<nn::Linear>(channels * h * w, c.fc, true, options));
  add_activation(*layers_, c.activation, c.dropout);
  layers_->append(std::make_shared<nn::Linear>(c.fc, c.num_classes, true, options));
}

}  // namespace genesis::models
