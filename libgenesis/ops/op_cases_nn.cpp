// Op cases: matrix products, neural-network functions, losses, convolution and pooling, and the
// transformer ops (libgenesis/ops/op_cases.h).
#include <algorithm>

#include "libgenesis/ops/conv.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/loss.h"
#include "libgenesis/ops/nn.h"
#include "libgenesis/ops/op_cases_family.h"
#include "libgenesis/ops/transformer.h"

namespace genesis::cases {
namespace {

using X = std::vector<Tensor>;

// Tolerance of f32 products and accumulating kernels against the CPU's.
constexpr double kProductRtol = 1e-4;

// a [..., M, K] times b [..., K, N]: 2 M K N flops per batch; inputs and output moved once.
OpCost matrix_product(const Shape& a, const Shape& b, bool backward, double es) {
  double m = static_cast<double>(a[a.size() - 2]), k = static_cast<double>(a.back()),
         cols = static_cast<double>(b.back());
  double batch = std::max(numel_d(a) / (m * k), numel_d(b) / (k * cols));
  double flops = 2 * batch * m * k * cols, bytes = (numel_d(a) + numel_d(b) + batch * m * cols) * es;
  return {backward ? 3 * bytes : bytes, backward ? 3 * flops : flops};
}

OpCost linear_cost(const OpArgs& a, bool backward, double es) {
  const Shape& w = a.shapes[1];
  return matrix_product({numel_of(a.shapes[0]) / a.shapes[0].back(), a.shapes[0].back()}, {w[1], w[0]}, backward, es);
}

std::string rank_at_least(const OpArgs& a, size_t rank) {
  for (const Shape& s : a.shapes)
    if (s.size() < rank) return detail::concat("operands must have rank >= ", rank);
  return "";
}

std::string exactly_2d(const OpArgs& a) {
  return a.shapes[0].size() == 2 ? "" : "the input must be 2-D";
}

// x over its last axis with `params` vectors of that length (weight, bias).
CaseInputs norm_inputs(int params) {
  return [params](const OpArgs& a) {
    std::vector<CaseInput> in{{a.shapes[0]}};
    for (int i = 0; i < params; ++i) in.push_back({{a.shapes[0].back()}});
    return in;
  };
}

CaseCost norm_cost(int params) {
  return [params](const OpArgs& a, bool backward, double es) {
    OpCost s = streaming_cost(a, backward, es);
    s.bytes += params * static_cast<double>(a.shapes[0].back()) * es * (backward ? 2 : 1);
    return s;
  };
}

// logits [N, C] and class targets [N].
std::vector<CaseInput> logits_and_targets(const OpArgs& a) {
  return {{a.shapes[0]}, {{a.shapes[0][0]}, InputKind::index, a.shapes[0][1], false}};
}

// Reads the logits once (and writes their gradient once); 8 bytes of target a row.
OpCost fused_loss_cost(const OpArgs& a, bool backward, double es) {
  return {numel_d(a.shapes[0]) * es * (backward ? 2 : 1) + 8 * static_cast<double>(a.shapes[0][0]), 0};
}

// Two inputs of one shape, a scalar out: both read once (and both gradients written).
OpCost pairwise_loss_cost(const OpArgs& a, bool backward, double es) {
  double x = numel_d(a.shapes[0]) * es;
  return {backward ? 5 * x : 2 * x, 0};
}

OpCost pool_cost(const OpArgs& a, bool backward, double es) {
  const double x = numel_d(a.shapes[0]) * es;
  return {backward ? 2.5 * x : 1.25 * x, 0};
}

std::string four_d(const OpArgs& a) {
  return a.shapes[0].size() == 4 ? "" : "the input is [N, C, H, W]";
}

}  // namespace

void append_nn_cases(std::vector<OpCase>& cases) {
  // --- matrix products ---------------------------------------------------------------
  cases.push_back({.name = "matmul",
                   .op = OpId::matmul,
                   .test = {.shapes = {{2, 3, 4}, {4, 5}}},
                   .bench = {.shapes = {{4096, 4096}, {4096, 4096}}},
                   .min_shapes = 2,
                   .max_shapes = 2,
                   .forward = binary(&matmul),
                   .cost = [](const OpArgs& a, bool bw,
                              double es) { return matrix_product(a.shapes[0], a.shapes[1], bw, es); },
                   .torch = "x[0] @ x[1]",
                   .check_args = [](const OpArgs& a) { return rank_at_least(a, 2); },
                   .row_inputs = {0},
                   .parity_rtol = kProductRtol});
  cases.push_back({.name = "bmm",
                   .op = OpId::bmm,
                   .test = {.shapes = {{2, 3, 4}, {2, 4, 5}}},
                   .bench = {.shapes = {{32, 1024, 64}, {32, 64, 1024}}},
                   .min_shapes = 2,
                   .max_shapes = 2,
                   .forward = binary(&bmm),
                   .cost = [](const OpArgs& a, bool bw,
                              double es) { return matrix_product(a.shapes[0], a.shapes[1], bw, es); },
                   .torch = "torch.bmm(x[0], x[1])",
                   .check_args =
                       [](const OpArgs& a) {
                         return a.shapes[0].size() == 3 && a.shapes[1].size() == 3
                                    ? std::string()
                                    : std::string("bmm operands are [B, M, K] and [B, K, N]");
                       },
                   .row_inputs = {0, 1},
                   .parity_rtol = kProductRtol});
  // x [..., K], weight [N, K], bias [N] (optional third shape); linear_gelu adds GELU (tanh).
  for (bool gelu : {false, true}) {
    cases.push_back(
        {.name = gelu ? "linear_gelu" : "linear",
         .op = gelu ? OpId::linear_gelu : OpId::linear,
         .test = {.shapes = {{2, 3, 4}, {5, 4}, {5}}},
         .bench = {.shapes = {{8192, 768}, {3072, 768}, {3072}}},
         .min_shapes = 2,
         .max_shapes = 3,
         .forward =
             [gelu](const OpArgs&, const X& x, const TensorOptions&) {
               Tensor bias = x.size() > 2 ? x[2] : Tensor();
               return gelu ? linear_gelu(x[0], x[1], bias) : linear(x[0], x[1], bias);
             },
         .cost = linear_cost,
         .torch = gelu ? "F.gelu(F.linear(x[0], x[1], x[2] if len(x) > 2 else None), approximate='tanh')"
                       : "F.linear(x[0], x[1], x[2] if len(x) > 2 else None)",
         .check_args = [](const OpArgs& a) { return rank_at_least(a, a.shapes.size() > 2 ? 1 : 2); },
         .row_inputs = {0},
         .parity_rtol = kProductRtol});
  }

  // x [..., K], weight [N, K], lora_a [r, K], lora_b [N, r], bias [N] (optional fifth shape);
  // scale 2.
  cases.push_back(
      {.name = "lora_linear",
       .op = OpId::lora_linear,
       .test = {.shapes = {{2, 3, 6}, {5, 6}, {3, 6}, {5, 3}, {5}}},
       .bench = {.shapes = {{8192, 1536}, {1536, 1536}, {16, 1536}, {1536, 16}, {1536}}},
       .min_shapes = 4,
       .max_shapes = 5,
       .forward = [](const OpArgs&, const X& x,
                     const TensorOptions&) { return lora_linear(x[0], x[1], x.size() > 4 ? x[4] : Tensor(), x[2], x[3], 2.0); },
       .cost =
           [](const OpArgs& a, bool backward, double es) {
             const Shape& w = a.shapes[1];
             const int64_t rows = numel_of(a.shapes[0]) / a.shapes[0].back(), r = a.shapes[2][0];
             OpCost base = matrix_product({rows, w[1]}, {w[1], w[0]}, backward, es);
             const OpCost down = matrix_product({rows, w[1]}, {w[1], r}, backward, es);
             const OpCost up = matrix_product({rows, r}, {r, w[0]}, backward, es);
             return OpCost{base.bytes + down.bytes, base.flops + down.flops + up.flops};
           },
       .torch = "F.linear(x[0], x[1], x[4] if len(x) > 4 else None) + 2.0 * F.linear(F.linear(x[0], x[2]), x[3])",
       .check_args =
           [](const OpArgs& a) {
             const Shape &x = a.shapes[0], &w = a.shapes[1], &la = a.shapes[2], &lb = a.shapes[3];
             return x.size() >= 2 && w.size() == 2 && la.size() == 2 && lb.size() == 2 && la[1] == x.back() &&
                            lb[0] == w[0] && lb[1] == la[0]
                        ? std::string()
                        : std::string("lora_linear operands are x [..., K], weight [N, K], lora_a [r, K], lora_b [N, r]");
           },
       .row_inputs = {0},
       .parity_rtol = kProductRtol});

  // gate and up [..., K], weight [N, K]; then lora_a [r, K] and lora_b [N, r] (an adapter, scale
  // 2) and bias [N]; with four shapes the fourth is the bias of a plain down projection.
  cases.push_back(
      {.name = "swiglu_linear",
       .op = OpId::swiglu_linear,
       .test = {.shapes = {{2, 3, 6}, {2, 3, 6}, {5, 6}, {3, 6}, {5, 3}, {5}}},
       .bench = {.shapes = {{8192, 8960}, {8192, 8960}, {1536, 8960}, {16, 8960}, {1536, 16}}},
       .min_shapes = 3,
       .max_shapes = 6,
       .forward =
           [](const OpArgs&, const X& x, const TensorOptions&) {
             if (x.size() < 5) return swiglu_linear(x[0], x[1], x[2], x.size() > 3 ? x[3] : Tensor());
             return swiglu_linear(x[0], x[1], x[2], x.size() > 5 ? x[5] : Tensor(), x[3], x[4], 2.0);
           },
       .cost =
           [](const OpArgs& a, bool backward, double es) {
             const Shape& w = a.shapes[2];
             const int64_t rows = numel_of(a.shapes[0]) / a.shapes[0].back();
             OpCost cost = matrix_product({rows, w[1]}, {w[1], w[0]}, backward, es);
             // SwiGLU: gate and up read, h written (the backward: gate, up and dh read, their
             // gradients and h written).
             cost.bytes += (backward ? 6.0 : 3.0) * static_cast<double>(rows * w[1]) * es;
             if (a.shapes.size() >= 5) {
               const int64_t r = a.shapes[3][0];
               const OpCost down = matrix_product({rows, w[1]}, {w[1], r}, backward, es);
               const OpCost up = matrix_product({rows, r}, {r, w[0]}, backward, es);
               cost.bytes += down.bytes;
               cost.flops += down.flops + up.flops;
             }
             return cost;
           },
       .torch = "(lambda h: F.linear(h, x[2], x[5] if len(x) > 5 else (x[3] if len(x) == 4 else None)) + "
                "(2.0 * F.linear(F.linear(h, x[3]), x[4]) if len(x) >= 5 else 0))(F.silu(x[0]) * x[1])",
       .check_args =
           [](const OpArgs& a) {
             const std::vector<Shape>& s = a.shapes;
             const bool base = s[0].size() >= 2 && s[0] == s[1] && s[2].size() == 2 && s[2][1] == s[0].back();
             const bool bias = s.size() == 4 || s.size() == 6;
             const bool adapter = s.size() < 5 || (s[3].size() == 2 && s[4].size() == 2 && s[3][1] == s[0].back() &&
                                                   s[4][0] == s[2][0] && s[4][1] == s[3][0]);
             const bool bias_fits = !bias || s.back() == Shape{s[2][0]};
             return base && adapter && bias_fits
                        ? std::string()
                        : std::string("swiglu_linear operands are gate and up [..., K], weight [N, K], then lora_a "
                                      "[r, K] and lora_b [N, r], then bias [N]");
           },
       .row_inputs = {0, 1},
       .parity_rtol = kProductRtol});

  // --- softmax family and normalization ----------------------------------------------
  cases.push_back({.name = "softmax",
                   .op = OpId::softmax,
                   .test = {.shapes = {{3, 4, 5}}, .dim = 1},
                   .bench = {.shapes = {{4096, 4096}}},
                   .forward = [](const OpArgs& a, const X& x, const TensorOptions&) { return softmax(x[0], a.dim); },
                   .torch = "torch.softmax(x[0], a['dim'])",
                   .check_args = check_dim,
                   .parity_rtol = 1e-5});
  cases.push_back({.name = "log_softmax",
                   .op = OpId::log_softmax,
                   .test = {.shapes = {{3, 4, 5}}, .dim = 1},
                   .bench = {.shapes = {{4096, 4096}}},
                   .forward = [](const OpArgs& a, const X& x, const TensorOptions&) { return log_softmax(x[0], a.dim); },
                   .torch = "torch.log_softmax(x[0], a['dim'])",
                   .check_args = check_dim,
                   .parity_rtol = 1e-5});
  cases.push_back({.name = "layer_norm",
                   .op = OpId::layer_norm,
                   .test = {.shapes = {{3, 2, 7}}},
                   .bench = {.shapes = {{8192, 768}}},
                   .inputs = norm_inputs(2),
                   .forward = [](const OpArgs& a, const X& x,
                                 const TensorOptions&) { return layer_norm(x[0], {a.shapes[0].back()}, x[1], x[2]); },
                   .cost = norm_cost(2),
                   .torch = "F.layer_norm(x[0], (a['shapes'][0][-1],), x[1], x[2], 1e-5)",
                   .parity_rtol = 1e-5});
  cases.push_back({.name = "rms_norm",
                   .op = OpId::rms_norm,
                   .test = {.shapes = {{3, 2, 7}}},
                   .bench = {.shapes = {{8192, 896}}},
                   .inputs = norm_inputs(1),
                   .forward = [](const OpArgs& a, const X& x,
                                 const TensorOptions&) { return rms_norm(x[0], {a.shapes[0].back()}, x[1]); },
                   .cost = norm_cost(1),
                   .torch = "F.rms_norm(x[0], (a['shapes'][0][-1],), x[1], 1e-6)",
                   .parity_rtol = 1e-5});

  // --- embedding, dropout, one_hot ---------------------------------------------------
  // weight [num, dim] (shapes[0]) looked up by indices of shapes[1].
  cases.push_back(
      {.name = "embedding",
       .op = OpId::embedding,
       .test = {.shapes = {{7, 3}, {2, 5}}},
       .bench = {.shapes = {{50304, 768}, {8, 1024}}},
       .min_shapes = 2,
       .max_shapes = 2,
       .inputs = [](const OpArgs& a) -> std::vector<CaseInput> {
         return {{a.shapes[0]}, {a.shapes[1], InputKind::index, a.shapes[0][0], false}};
       },
       .forward = [](const OpArgs&, const X& x, const TensorOptions&) { return embedding(x[1], x[0]); },
       .cost =
           [](const OpArgs& a, bool backward, double es) {
             double rows = numel_d(a.shapes[1]) * static_cast<double>(a.shapes[0][1]) * es;
             double fwd = 8 * numel_d(a.shapes[1]) + 2 * rows;
             return OpCost{backward ? fwd + rows + numel_d(a.shapes[0]) * es : fwd, 0};
           },
       .torch = "F.embedding(x[1], x[0])",
       .check_args = [](const OpArgs& a) { return a.shapes[0].size() == 2 ? "" : "the first shape is the [num, dim] table"; },
       .row_inputs = {1}});
  // Probability args.scalar (0.1 when the suite leaves the default); a fixed generator makes
  // repeated calls equal, so the gradient check sees one mask. At the test's p = 0.3, N(0, 1)
  // inputs kept with probability 0.7 and scaled by 1/0.7 give mean 0 and variance 1/0.7.
  cases.push_back({.name = "dropout",
                   .op = OpId::dropout,
                   .test = {.shapes = {{3, 4, 5}}, .scalar = 0.3},
                   .bench = {.shapes = {{8, 1024, 768}}, .scalar = 0.1},
                   .forward =
                       [](const OpArgs& a, const X& x, const TensorOptions&) {
                         Generator gen(1234);
                         return dropout(x[0], a.scalar, true, &gen);
                       },
                   .torch = "F.dropout(x[0], a['scalar'], True)",
                   .check_args = [](const OpArgs& a) { return a.scalar >= 0 && a.scalar < 1 ? "" : "dropout needs scalar = p in [0, 1)"; },
                   .random = true,
                   .moments = {.mean = 0, .variance = 1 / 0.7}});
  // Class indices of shapes[0] in [0, args.dim) (args.dim classes; 10 when the suite leaves -1).
  cases.push_back(
      {.name = "one_hot",
       .op = OpId::one_hot,
       .test = {.shapes = {{3, 5}}, .dim = 7},
       .bench = {.shapes = {{8192}}, .dim = 1024},
       .inputs = [](const OpArgs& a) -> std::vector<CaseInput> {
         return {{a.shapes[0], InputKind::index, a.dim > 0 ? a.dim : 10, false}};
       },
       .forward = [](const OpArgs& a, const X& x, const TensorOptions&) { return one_hot(x[0], a.dim > 0 ? a.dim : 10); },
       .cost = [](const OpArgs& a, bool, double) {
         return OpCost{8 * numel_d(a.shapes[0]) * (1 + static_cast<double>(a.dim > 0 ? a.dim : 10)), 0};
       },
       .torch = "F.one_hot(x[0], a['dim'] if a['dim'] > 0 else 10)"});

  // --- losses ------------------------------------------------------------------------
  cases.push_back({.name = "cross_entropy",
                   .op = OpId::cross_entropy,
                   .test = {.shapes = {{5, 7}}},
                   .bench = {.shapes = {{8192, 50304}}},
                   .inputs = logits_and_targets,
                   .forward = [](const OpArgs&, const X& x, const TensorOptions&) { return cross_entropy(x[0], x[1]); },
                   .cost = fused_loss_cost,
                   .torch = "F.cross_entropy(x[0], x[1])",
                   .check_args = exactly_2d,
                   .parity_rtol = 1e-5});
  cases.push_back({.name = "nll_loss",
                   .op = OpId::nll_loss,
                   .test = {.shapes = {{5, 7}}},
                   .bench = {.shapes = {{8192, 50304}}},
                   .inputs = logits_and_targets,
                   .forward = [](const OpArgs&, const X& x, const TensorOptions&) { return nll_loss(x[0], x[1]); },
                   .cost = [](const OpArgs& a, bool backward,
                              double es) { return OpCost{16 * static_cast<double>(a.shapes[0][0]) + (backward ? numel_d(a.shapes[0]) * es : 0), 0}; },
                   .torch = "F.nll_loss(x[0], x[1])",
                   .check_args = exactly_2d});
  // A language model's head and loss: x [N, K], weight [V, K], targets in [0, V).
  cases.push_back(
      {.name = "linear_cross_entropy",
       .op = OpId::linear_cross_entropy,
       .test = {.shapes = {{5, 4}, {7, 4}}},
       .bench = {.shapes = {{8192, 768}, {50304, 768}}},
       .min_shapes = 2,
       .max_shapes = 2,
       .inputs = [](const OpArgs& a) -> std::vector<CaseInput> {
         return {{a.shapes[0]}, {a.shapes[1]}, {{a.shapes[0][0]}, InputKind::index, a.shapes[1][0], false}};
       },
       .forward = [](const OpArgs&, const X& x,
                     const TensorOptions&) { return linear_cross_entropy(x[0], x[1], x[2]); },
       .cost =
           [](const OpArgs& a, bool backward, double es) {
             const double flops = 2.0 * numel_d(a.shapes[0]) * static_cast<double>(a.shapes[1][0]);
             const double bytes = (numel_d(a.shapes[0]) + numel_d(a.shapes[1])) * es;
             return OpCost{backward ? 3 * bytes : bytes, backward ? 3 * flops : flops};
           },
       // As PyTorch eager computes it: logits in the input dtype, the loss in f32.
       .torch = "F.cross_entropy(F.linear(x[0], x[1]).float(), x[2])",
       .check_args = [](const OpArgs& a) { return a.shapes[0].size() == 2 && a.shapes[1].size() == 2 ? "" : "x is [N, K] and weight [V, K]"; },
       .parity_rtol = kProductRtol});
  cases.push_back({.name = "mse_loss",
                   .op = OpId::mse_loss,
                   .test = {.shapes = {{3, 5}, {3, 5}}},
                   .bench = {.shapes = {{2048, 2048}, {2048, 2048}}},
                   .min_shapes = 2,
                   .max_shapes = 2,
                   .forward = binary([](const Tensor& a, const Tensor& b) { return mse_loss(a, b); }),
                   .cost = pairwise_loss_cost,
                   .torch = "F.mse_loss(x[0], x[1])",
                   .parity_rtol = 1e-5});
  cases.push_back({.name = "l1_loss",
                   .op = OpId::l1_loss,
                   .test = {.shapes = {{3, 5}, {3, 5}}},
                   .bench = {.shapes = {{2048, 2048}, {2048, 2048}}},
                   .min_shapes = 2,
                   .max_shapes = 2,
                   .forward = binary([](const Tensor& a, const Tensor& b) { return l1_loss(a, b); }),
                   .cost = pairwise_loss_cost,
                   .torch = "F.l1_loss(x[0], x[1])",
                   .parity_rtol = 1e-5});
  cases.push_back(
      {.name = "binary_cross_entropy_with_logits",
       .op = OpId::binary_cross_entropy_with_logits,
       .test = {.shapes = {{3, 5}}},
       .bench = {.shapes = {{2048, 2048}}},
       .inputs = [](const OpArgs& a) -> std::vector<CaseInput> {
         return {{a.shapes[0]}, {a.shapes[0], InputKind::probability}};
       },
       .forward = binary([](const Tensor& a, const Tensor& b) { return binary_cross_entropy_with_logits(a, b); }),
       .cost = pairwise_loss_cost,
       .torch = "F.binary_cross_entropy_with_logits(x[0], x[1])",
       .parity_rtol = 1e-5});

  // --- convolution and pooling ---------------------------------------------------------
  // x [N, C, H, W], weight [O, C, kH, kW], bias [O]: stride 1, "same" padding (k / 2).
  cases.push_back(
      {.name = "conv2d",
       .op = OpId::conv2d,
       .test = {.shapes = {{2, 3, 5, 6}, {4, 3, 3, 3}, {4}}},
       .bench = {.shapes = {{32, 64, 56, 56}, {64, 64, 3, 3}, {64}}},
       .min_shapes = 2,
       .max_shapes = 3,
       .forward =
           [](const OpArgs& a, const X& x, const TensorOptions&) {
             const Shape& w = a.shapes[1];
             return conv2d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), {.padding = {w[2] / 2, w[3] / 2}});
           },
       .cost =
           [](const OpArgs& a, bool backward, double es) {
             const Shape &x = a.shapes[0], &w = a.shapes[1];
             const double out = static_cast<double>(x[0] * w[0] * x[2] * x[3]);
             const double flops = 2.0 * out * static_cast<double>(w[1] * w[2] * w[3]);
             const double bytes = (numel_d(x) + numel_d(w) + out) * es;
             return OpCost{backward ? 3 * bytes : bytes, backward ? 3 * flops : flops};
           },
       .torch = "F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None, padding=(a['shapes'][1][2] // 2, a['shapes'][1][3] // 2))",
       .check_args =
           [](const OpArgs& a) {
             return a.shapes[0].size() == 4 && a.shapes[1].size() == 4 && a.shapes[0][1] == a.shapes[1][1]
                        ? std::string()
                        : std::string("x is [N, C, H, W] and weight [O, C, kH, kW]");
           },
       .row_inputs = {0},
       .parity_rtol = kProductRtol});
  // 2x2 windows, stride 2.
  cases.push_back({.name = "max_pool2d",
                   .op = OpId::max_pool2d,
                   .test = {.shapes = {{2, 3, 4, 6}}},
                   .bench = {.shapes = {{32, 64, 112, 112}}},
                   .forward = [](const OpArgs&, const X& x,
                                 const TensorOptions&) { return max_pool2d(x[0], {.kernel = {2, 2}}); },
                   .cost = pool_cost,
                   .torch = "F.max_pool2d(x[0], 2)",
                   .check_args = four_d,
                   .row_inputs = {0}});
  cases.push_back({.name = "avg_pool2d",
                   .op = OpId::avg_pool2d,
                   .test = {.shapes = {{2, 3, 4, 6}}},
                   .bench = {.shapes = {{32, 64, 112, 112}}},
                   .forward = [](const OpArgs&, const X& x,
                                 const TensorOptions&) { return avg_pool2d(x[0], {.kernel = {2, 2}}); },
                   .cost = pool_cost,
                   .torch = "F.avg_pool2d(x[0], 2)",
                   .check_args = four_d,
                   .row_inputs = {0}});

  // --- transformer ops -------------------------------------------------------------------
  // x [B, H, T, D] rotated by tables cos, sin [T, D / 2] (any values: the op is linear in x).
  cases.push_back(
      {.name = "rope",
       .op = OpId::rope,
       .test = {.shapes = {{2, 3, 5, 4}}},
       .bench = {.shapes = {{8, 12, 1024, 64}}},
       .inputs = [](const OpArgs& a) -> std::vector<CaseInput> {
         const Shape& x = a.shapes[0];
         Shape table{x[x.size() - 2], x.back() / 2};
         return {{x}, {table, InputKind::normal, 0, false}, {table, InputKind::normal, 0, false}};
       },
       .forward = [](const OpArgs&, const X& x, const TensorOptions&) { return rope(x[0], x[1], x[2]); },
       .torch = "torch.cat([x[0][..., :x[0].shape[-1] // 2] * x[1] - x[0][..., x[0].shape[-1] // 2:] * x[2], "
                "x[0][..., x[0].shape[-1] // 2:] * x[1] + x[0][..., :x[0].shape[-1] // 2] * x[2]], -1)",
       .check_args = [](const OpArgs& a) {
         return a.shapes[0].size() >= 2 && a.shapes[0].back() % 2 == 0 ? "" : "x is [..., T, D] with D even";
       }});
  cases.push_back({.name = "swiglu",
                   .op = OpId::swiglu,
                   .test = {.shapes = {{3, 5}, {3, 5}}},
                   .bench = {.shapes = {{8192, 4864}, {8192, 4864}}},
                   .min_shapes = 2,
                   .max_shapes = 2,
                   .forward = binary(&swiglu),
                   .cost = [](const OpArgs& a, bool backward, double es) {
                     double x = numel_d(a.shapes[0]) * es;
                     return OpCost{backward ? 7 * x : 3 * x, 0};
                   },
                   .torch = "F.silu(x[0]) * x[1]",
                   .check_args = [](const OpArgs& a) { return a.shapes[0] == a.shapes[1] ? "" : "gate and up have one shape"; }});
  // Causal self-attention, q [B, Hq, T, D] and k, v [B, Hkv, T, D]: the causal half of
  // 4 B Hq T^2 D flops forward, 2.5 times that more backward (flash attention's count).
  cases.push_back(
      {.name = "attention",
       .op = OpId::scaled_dot_product_attention,
       .test = {.shapes = {{1, 4, 5, 8}, {1, 2, 5, 8}, {1, 2, 5, 8}}},
       .bench = {.shapes = {{8, 12, 1024, 64}, {8, 12, 1024, 64}, {8, 12, 1024, 64}}},
       .min_shapes = 3,
       .max_shapes = 3,
       .forward = [](const OpArgs&, const X& x,
                     const TensorOptions&) { return scaled_dot_product_attention(x[0], x[1], x[2], true); },
       .cost =
           [](const OpArgs& a, bool backward, double es) {
             const Shape& q = a.shapes[0];
             const double flops = 2.0 * numel_d(q) * static_cast<double>(q[2]);
             const double bytes = (numel_d(a.shapes[0]) * 2 + numel_d(a.shapes[1]) + numel_d(a.shapes[2])) * es;
             return OpCost{backward ? 2.5 * bytes : bytes, backward ? 3.5 * flops : flops};
           },
       .torch = "F.scaled_dot_product_attention(x[0], x[1], x[2], is_causal=True, enable_gqa=x[0].size(1) != x[1].size(1))",
       .check_args =
           [](const OpArgs& a) {
             const Shape &q = a.shapes[0], &k = a.shapes[1];
             return q.size() == 4 && k.size() == 4 && k[1] > 0 && q[1] % k[1] == 0 ? std::string()
                                                                                    : std::string("q is [B, Hq, T, D], k and v [B, Hkv, T, D] with Hq a multiple of Hkv");
           },
       .row_inputs = {0, 1, 2},
       .parity_rtol = kProductRtol});
}

}  // namespace genesis::cases
