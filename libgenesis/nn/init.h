#pragma once
// Parameter initializers (in place, under NoGradGuard), with PyTorch's definitions of
// fan-in/fan-out and gains. Draws come from `gen` (default_generator() when null).
#include "libgenesis/core/generator.h"
#include "libgenesis/core/tensor.h"

namespace genesis::nn::init {

struct Fans {
  int64_t in;
  int64_t out;
};
// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (PyTorch's rule).
Fans compute_fans(const Tensor& t);

void zeros_(Tensor& t);
void ones_(Tensor& t);
void constant_(Tensor& t, double value);
void uniform_(Tensor& t, double low, double high, Generator* gen = nullptr);
void normal_(Tensor& t, double mean, double std, Generator* gen = nullptr);
// Normal(mean, std) resampled until inside [low, high] (by inverse-CDF, no loop).
void trunc_normal_(Tensor& t, double mean, double std, double low, double high, Generator* gen = nullptr);
void xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
void xavier_normal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// Kaiming/He with leaky-ReLU slope `a` (a = sqrt(5) gives PyTorch's Linear/Conv default).
void kaiming_uniform_(Tensor& t, double a = 0.0, bool fan_in = true, Generator* gen = nullptr);
void kaiming_normal_(Tensor& t, double a = 0.0, bool fan_in = true, Generator* gen = nullptr);

}  // namespace genesis::nn::init
