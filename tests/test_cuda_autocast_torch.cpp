// Autocast parity with PyTorch on the GPU: each op of scripts/reference/torch_autocast_ops.py,
// run on cuda:0 under bf16 and fp16 autocast with the inputs PyTorch used, against the outputs
// and f32 input gradients of torch.autocast("cuda"). The reference is made on the GPU host in
// the same call (GENESIS_TORCH_AUTOCAST_REFERENCE=FILE); without it the test is skipped.
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/io/safetensors.h"
#include "libgenesis/ops/conv.h"
#include "libgenesis/ops/transformer.h"
#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

struct TorchCase {
  std::function<Tensor(const TensorList&)> op;
  // Where genesis's policy deliberately differs from PyTorch's in the result dtype (norms write
  // the autocast dtype: their outputs feed matrix products), only the values are compared.
  bool same_dtype = true;
};

const std::map<std::string, TorchCase>& torch_cases() {
  static const std::map<std::string, TorchCase> cases{
      {"matmul", {[](const TensorList& x) { return matmul(x[0], x[1]); }}},
      {"bmm", {[](const TensorList& x) { return bmm(x[0], x[1]); }}},
      {"linear", {[](const TensorList& x) { return linear(x[0], x[1], x[2]); }}},
      {"conv2d", {[](const TensorList& x) { return conv2d(x[0], x[1], x[2], {.padding = {1, 1}}); }}},
      {"attention", {[](const TensorList& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }}},
      {"attention_gqa_d128",
       {[](const TensorList& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }}},
      {"layer_norm", {[](const TensorList& x) { return layer_norm(x[0], {96}, x[1], x[2], 1e-5); }, false}},
      {"rms_norm", {[](const TensorList& x) { return rms_norm(x[0], {96}, x[1], 1e-6); }, false}},
      {"softmax", {[](const TensorList& x) { return softmax(x[0], -1); }}},
      {"log_softmax", {[](const TensorList& x) { return log_softmax(x[0], -1); }}},
      {"cross_entropy", {[](const TensorList& x) { return cross_entropy(x[0], x[1]); }}},
      {"linear_cross_entropy", {[](const TensorList& x) { return linear_cross_entropy(x[0], x[1], x[2]); }}},
      {"add_f32_low",
       {[](const TensorList& x) {
         return add(x[0], linear(x[1], eye(96, -1, {.dtype = DType::f32, .device = x[1].device()})));
       }}},
      {"gelu_tanh", {[](const TensorList& x) { return gelu(x[0], GeluApproximation::tanh); }}},
      {"silu", {[](const TensorList& x) { return silu(x[0]); }}},
      {"exp", {[](const TensorList& x) { return exp(x[0]); }}},
      {"sum", {[](const TensorList& x) { return sum(x[0], {-1}); }}},
      {"embedding", {[](const TensorList& x) { return embedding(x[1], x[0]); }}},
  };
  return cases;
}

// max |actual - expected| relative to max |expected|.
double relative_error(const Tensor& actual, const Tensor& expected) {
  const Tensor a = actual.to(kCPU).to(DType::f64), e = expected.to(kCPU).to(DType::f64);
  const double scale = std::max(max(abs(e)).item(), 1e-6);
  return max(abs(sub(a, e))).item() / scale;
}

}  // namespace

TEST_CASE("cuda autocast matches PyTorch's torch.autocast op by op", "[cuda][autocast]") {
  if (!cuda_ready()) return;
  const char* path = std::getenv("GENESIS_TORCH_AUTOCAST_REFERENCE");
  if (!path || !*path) {
    WARN("skipped: GENESIS_TORCH_AUTOCAST_REFERENCE is not set (scripts/reference/torch_autocast_ops.py makes it)");
    return;
  }
  const io::SafetensorsFile reference(path);
  for (const auto& [name, c] : torch_cases()) {
    TensorList inputs;
    for (int i = 0; reference.contains(name + ".in" + std::to_string(i)); ++i)
      inputs.push_back(reference.tensor(name + ".in" + std::to_string(i)).to(kCuda0));
    REQUIRE(!inputs.empty());
    const Tensor weight = reference.load(name + ".weight", DType::f32, kCuda0);
    for (const auto& [label, low] : {std::pair<std::string, DType>{"bf16", DType::bf16}, {"f16", DType::f16}}) {
      INFO("op " << name << " under autocast " << label);
      // 16-bit rounding at the same points on both sides; the gradients also sum rounded terms.
      const double out_tolerance = low == DType::bf16 ? 2e-2 : 4e-3;
      const double grad_tolerance = low == DType::bf16 ? 4e-2 : 1e-2;
      TensorList leaves;
      for (const Tensor& t : inputs)
        leaves.push_back(is_floating(t.dtype()) ? t.detach().clone().requires_grad_(true) : t);
      Tensor out;
      {
        AutocastGuard autocast(low);
        out = c.op(leaves);
      }
      const Tensor expected = reference.tensor(name + "." + label + ".out");
      if (c.same_dtype) CHECK(dtype_name(out.dtype()) == dtype_name(expected.dtype()));
      REQUIRE(out.shape() == expected.shape());
      CHECK(relative_error(out, expected) <= out_tolerance);
      sum(mul(out.to(DType::f32), weight)).backward();
      for (size_t i = 0; i < leaves.size(); ++i) {
        const std::string key = name + "." + label + ".grad" + std::to_string(i);
        if (!reference.contains(key)) continue;
        INFO("gradient of input " << i);
        REQUIRE(leaves[i].grad().defined());
        CHECK(relative_error(leaves[i].grad(), reference.tensor(key)) <= grad_tolerance);
      }
    }
  }
}
