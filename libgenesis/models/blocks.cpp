#include "libgenesis/models/blocks.h"

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/nn/init.h"

namespace genesis::models::detail {

Tensor Container::forward(const Tensor&) {
  GENESIS_THROW(NotImplementedError, description_, " holds weights only; call the model that owns it");
}

void init_like_hugging_face(nn::Module& model, double std) {
  NoGradGuard no_grad;
  for (NamedTensor& p : model.named_parameters()) {
    const std::string& name = p.name;
    const bool is_norm = name.find("norm.weight") != std::string::npos || name.find(".ln_") != std::string::npos ||
                         name.find("ln_f.") != std::string::npos;
    if (is_norm && name.ends_with(".weight")) {
      nn::init::ones_(p.tensor);
    } else if (p.tensor.dim() == 1) {
      nn::init::zeros_(p.tensor);
    } else {
      nn::init::normal_(p.tensor, 0.0, std);
    }
  }
}

TensorOptions parameter_options(const nn::Module& model) {
  const Tensor first = model.parameters().front();
  return {.dtype = first.dtype(), .device = first.device()};
}

}  // namespace genesis::models::detail
