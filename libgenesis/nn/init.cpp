#include "libgenesis/nn/init.h"

#include <cmath>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"

namespace genesis::nn::init {

namespace {

void assign(Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
}

// Inverse of the standard normal CDF (Acklam's rational approximation, refined by one
// Newton step on erfc), used by trunc_normal_.
double normal_quantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01,  -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  double q, x;
  if (p < 0.02425) {
    q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p > 1 - 0.02425) {
    q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else {
    q = p - 0.5;
    double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  double u = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

}  // namespace

Fans compute_fans(const Tensor& t) {
  GENESIS_CHECK(t.dim() >= 2, ValueError, "init: fan-in/fan-out need a tensor of at least 2 dimensions, got shape ",
                t.shape());
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

void zeros_(Tensor& t) { constant_(t, 0.0); }
void ones_(Tensor& t) { constant_(t, 1.0); }
void constant_(Tensor& t, double value) {
  NoGradGuard no_grad;
  t.fill_(value);
}

void uniform_(Tensor& t, double low, double high, Generator* gen) { assign(t, uniform_like(t, low, high, gen)); }

void normal_(Tensor& t, double mean, double std, Generator* gen) {
  NoGradGuard no_grad;
  assign(t, add(mul(randn(t.shape(), {.dtype = t.dtype(), .device = t.device()}, gen), std), mean));
}

void trunc_normal_(Tensor& t, double mean, double std, double low, double high, Generator* gen) {
  GENESIS_CHECK(std > 0 && low < high, ValueError, "trunc_normal_: need std > 0 and low < high");
  // Uniform in [cdf(low), cdf(high)], mapped through the normal quantile function.
  auto cdf = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  double lo = cdf((low - mean) / std), hi = cdf((high - mean) / std);
  Tensor u = uniform_like(empty(t.shape(), {.dtype = DType::f64}), lo, hi, gen);
  std::vector<double> values = u.to_vector<double>();
  for (double& v : values) v = std::clamp(mean + std * normal_quantile(std::clamp(v, 1e-300, 1 - 1e-16)), low, high);
  assign(t, from_vector(values, t.shape()));
}

void xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  Fans f = compute_fans(t);
  double bound = gain * std::sqrt(6.0 / static_cast<double>(f.in + f.out));
  uniform_(t, -bound, bound, gen);
}

void xavier_normal_(Tensor& t, double gain, Generator* gen) {
  Fans f = compute_fans(t);
  normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(f.in + f.out)), gen);
}

void kaiming_uniform_(Tensor& t, double a, bool fan_in, Generator* gen) {
  Fans f = compute_fans(t);
  double gain = std::sqrt(2.0 / (1.0 + a * a));
  double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in ? f.in : f.out));
  uniform_(t, -bound, bound, gen);
}

void kaiming_normal_(Tensor& t, double a, bool fan_in, Generator* gen) {
  Fans f = compute_fans(t);
  double gain = std::sqrt(2.0 / (1.0 + a * a));
  normal_(t, 0.0, gain / std::sqrt(static_cast<double>(fan_in ? f.in : f.out)), gen);
}

}  // namespace genesis::nn::init
