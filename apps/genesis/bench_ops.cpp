// The op registry of `genesis bench ops`: inputs, the timed call, the float64 CPU check,
// and the byte / flop floors used for GB/s, TFLOP/s and the percentage of the ceiling.
#include "apps/genesis/bench_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/conv.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/index.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/loss.h"
#include "libgenesis/ops/nn.h"
#include "libgenesis/ops/reduce.h"
#include "libgenesis/ops/transformer.h"
#include "libgenesis/optim/optimizer.h"

namespace genesis::cli::bench {
namespace {

struct InputSpec {
  Shape shape;
  int64_t index_bound = 0;  // > 0: integer indices in [0, index_bound) instead of N(0, 1) data
  bool grad = false;
};

using Inputs = std::vector<Tensor>;

struct OpDef {
  std::string name;
  size_t min_shapes, max_shapes;
  std::function<std::vector<InputSpec>(const BenchCase&)> inputs;
  std::function<Tensor(const BenchCase&, const Inputs&)> forward;
  std::function<Cost(const BenchCase&, double element_bytes)> cost;
  // Inputs whose axis 0 maps to the output's axis 0, so a block of rows can be checked alone.
  std::vector<size_t> row_inputs;
};

double n(const Shape& s) {
  return static_cast<double>(numel_of(s));
}

Shape broadcast(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1, db = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[out.size() - 1 - i] = std::max(da, db);
  }
  return out;
}

std::vector<InputSpec> data_inputs(const BenchCase& c) {
  std::vector<InputSpec> specs;
  for (const Shape& s : c.shapes) specs.push_back({s, 0, c.backward});
  return specs;
}

// One pass in, one pass out; the backward reads the input and the output gradient and writes
// the input gradient.
Cost streaming(const BenchCase& c, double es) {
  double x = n(c.shapes[0]) * es;
  return {c.backward ? 5 * x : 2 * x, 0};
}

Cost reduction(const BenchCase& c, double es, const Axes& axes) {
  const Shape& s = c.shapes[0];
  double reduced = 1;
  if (axes.empty()) reduced = n(s);
  for (int64_t a : axes) reduced *= static_cast<double>(s[static_cast<size_t>(a < 0 ? a + std::ssize(s) : a)]);
  double in = n(s) * es, out = in / reduced;
  return {c.backward ? 2 * (in + out) : in + out, 0};
}

Cost matrix_product(const BenchCase& c, double es) {
  const Shape& a = c.shapes[0];
  const Shape& b = c.shapes[1];
  double m = static_cast<double>(a[a.size() - 2]), k = static_cast<double>(a.back()),
         cols = static_cast<double>(b.back());
  double batch = std::max(n(a) / (m * k), n(b) / (k * cols));
  double flops = 2 * batch * m * k * cols, bytes = (n(a) + n(b) + batch * m * cols) * es;
  return {c.backward ? 3 * bytes : bytes, c.backward ? 3 * flops : flops};
}

Axes logsumexp_axes(const BenchCase& c) {
  return c.axes.empty() ? Axes{c.dim} : c.axes;
}

const std::vector<OpDef>& registry() {
  auto binary = [](Tensor (*fn)(const Tensor&, const Tensor&)) {
    return [fn](const BenchCase&, const Inputs& in) { return fn(in[0], in[1]); };
  };
  auto binary_cost = [](const BenchCase& c, double es) {
    double a = n(c.shapes[0]), b = n(c.shapes[1]), out = n(broadcast(c.shapes[0], c.shapes[1]));
    double fwd = (a + b + out) * es;
    return Cost{c.backward ? 2 * fwd : fwd, 0};
  };
  auto unary = [](Tensor (*fn)(const Tensor&)) {
    return [fn](const BenchCase&, const Inputs& in) { return fn(in[0]); };
  };
  auto norm_inputs = [](int params) {
    return [params](const BenchCase& c) {
      std::vector<InputSpec> specs{{c.shapes[0], 0, c.backward}};
      for (int i = 0; i < params; ++i) specs.push_back({{c.shapes[0].back()}, 0, c.backward});
      return specs;
    };
  };
  auto norm_cost = [](int params) {
    return [params](const BenchCase& c, double es) {
      Cost s = streaming(c, es);
      s.bytes += params * static_cast<double>(c.shapes[0].back()) * es * (c.backward ? 2 : 1);
      return s;
    };
  };
  static const std::vector<OpDef> ops{
      {"add", 2, 2, data_inputs, binary(&add), binary_cost, {}},
      {"mul", 2, 2, data_inputs, binary(&mul), binary_cost, {}},
      {"mul_scalar",
       1,
       1,
       data_inputs,
       [](const BenchCase& c, const Inputs& in) { return mul(in[0], c.scalar); },
       streaming,
       {}},
      {"gelu",
       1,
       1,
       data_inputs,
       [](const BenchCase& c, const Inputs& in) {
         return gelu(in[0], c.variant == "tanh" ? GeluApproximation::tanh : GeluApproximation::none);
       },
       streaming,
       {}},
      {"silu", 1, 1, data_inputs, unary(&silu), streaming, {}},
      {"exp", 1, 1, data_inputs, unary(&exp), streaming, {}},
      {"sum",
       1,
       1,
       data_inputs,
       [](const BenchCase& c, const Inputs& in) { return sum(in[0], c.axes); },
       [](const BenchCase& c, double es) { return reduction(c, es, c.axes); },
       {}},
      {"mean",
       1,
       1,
       data_inputs,
       [](const BenchCase& c, const Inputs& in) { return mean(in[0], c.axes); },
       [](const BenchCase& c, double es) { return reduction(c, es, c.axes); },
       {}},
      {"softmax",
       1,
       1,
       data_inputs,
       [](const BenchCase& c, const Inputs& in) { return softmax(in[0], c.dim); },
       streaming,
       {}},
      {"log_softmax",
       1,
       1,
       data_inputs,
       [](const BenchCase& c, const Inputs& in) { return log_softmax(in[0], c.dim); },
       streaming,
       {}},
      {"logsumexp",
       1,
       1,
       data_inputs,
       [](const BenchCase& c, const Inputs& in) { return logsumexp(in[0], logsumexp_axes(c)); },
       [](const BenchCase& c, double es) { return reduction(c, es, logsumexp_axes(c)); },
       {}},
      {"cat",
       2,
       64,
       data_inputs,
       [](const BenchCase& c, const Inputs& in) { return cat(in, c.dim); },
       [](const BenchCase& c, double es) {
         double total = 0;
         for (const Shape& s : c.shapes) total += n(s) * es;
         return Cost{c.backward ? 4 * total : 2 * total, 0};
       },
       {}},
      {"cast",  // to the dtype the case's variant names
       1,
       1,
       data_inputs,
       [](const BenchCase& c, const Inputs& in) { return in[0].to(*parse_dtype(c.variant)); },
       streaming,
       {}},
      {"transpose_copy",
       1,
       1,
       data_inputs,
       [](const BenchCase&, const Inputs& in) { return in[0].transpose(-2, -1).contiguous(); },
       streaming,
       {}},
      {"layer_norm",
       1,
       1,
       norm_inputs(2),
       [](const BenchCase& c, const Inputs& in) { return layer_norm(in[0], {c.shapes[0].back()}, in[1], in[2]); },
       norm_cost(2),
       {}},
      {"rms_norm",
       1,
       1,
       norm_inputs(1),
       [](const BenchCase& c, const Inputs& in) { return rms_norm(in[0], {c.shapes[0].back()}, in[1]); },
       norm_cost(1),
       {}},
      {"cross_entropy",
       1,
       1,
       [](const BenchCase& c) {
         return std::vector<InputSpec>{{c.shapes[0], 0, c.backward}, {{c.shapes[0][0]}, c.shapes[0][1], false}};
       },
       [](const BenchCase&, const Inputs& in) { return cross_entropy(in[0], in[1]); },
       // Fused floor: the logits are read once and, with backward, their gradient written once.
       [](const BenchCase& c, double es) {
         return Cost{n(c.shapes[0]) * es * (c.backward ? 2 : 1) + 8 * static_cast<double>(c.shapes[0][0]), 0};
       },
       {}},
      {"embedding",
       2,
       2,
       [](const BenchCase& c) {
         return std::vector<InputSpec>{{c.shapes[0], 0, c.backward}, {c.shapes[1], c.shapes[0][0], false}};
       },
       [](const BenchCase&, const Inputs& in) { return embedding(in[1], in[0]); },
       [](const BenchCase& c, double es) {
         double rows = n(c.shapes[1]) * static_cast<double>(c.shapes[0][1]) * es;
         double fwd = 8 * n(c.shapes[1]) + 2 * rows;
         return Cost{c.backward ? fwd + rows + n(c.shapes[0]) * es : fwd, 0};
       },
       {1}},
      {"matmul", 2, 2, data_inputs, binary(&matmul), matrix_product, {0}},
      {"bmm", 2, 2, data_inputs, binary(&bmm), matrix_product, {0, 1}},
      {"linear",
       2,
       3,
       data_inputs,
       [](const BenchCase&, const Inputs& in) { return linear(in[0], in[1], in.size() > 2 ? in[2] : Tensor()); },
       [](const BenchCase& c, double es) {
         BenchCase as_product = c;
         const Shape& w = c.shapes[1];
         as_product.shapes = {{numel_of(c.shapes[0]) / c.shapes[0].back(), c.shapes[0].back()}, {w[1], w[0]}};
         return matrix_product(as_product, es);
       },
       {0}},
      // Causal self-attention, q [B, Hq, T, D] and k, v [B, Hkv, T, D]: the causal half of
      // 4 B Hq T^2 D flops forward, 2.5 times that more backward (flash attention's count).
      {"attention",
       3,
       3,
       data_inputs,
       [](const BenchCase&, const Inputs& in) { return scaled_dot_product_attention(in[0], in[1], in[2], true); },
       [](const BenchCase& c, double es) {
         const Shape& q = c.shapes[0];
         const double flops = 2.0 * n(q) * static_cast<double>(q[2]);
         const double bytes = (n(c.shapes[0]) * 2 + n(c.shapes[1]) + n(c.shapes[2])) * es;
         return Cost{c.backward ? 2.5 * bytes : bytes, c.backward ? 3.5 * flops : flops};
       },
       {0, 1, 2}},
      // x [N, C, H, W], weight [O, C, kH, kW], bias [O]: stride 1, "same" padding (k / 2).
      {"conv2d",
       2,
       3,
       data_inputs,
       [](const BenchCase& c, const Inputs& in) {
         const Shape& w = c.shapes[1];
         return conv2d(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), {.padding = {w[2] / 2, w[3] / 2}});
       },
       [](const BenchCase& c, double es) {
         const Shape &x = c.shapes[0], &w = c.shapes[1];
         const double out = static_cast<double>(x[0] * w[0] * x[2] * x[3]);
         const double flops = 2.0 * out * static_cast<double>(w[1] * w[2] * w[3]);
         const double bytes = (n(x) + n(w) + out) * es;
         return Cost{c.backward ? 3 * bytes : bytes, c.backward ? 3 * flops : flops};
       },
       {0}},
      // 2x2 windows, stride 2, over x [N, C, H, W].
      {"max_pool2d",
       1,
       1,
       data_inputs,
       [](const BenchCase&, const Inputs& in) { return max_pool2d(in[0], {.kernel = {2, 2}}); },
       [](const BenchCase& c, double es) {
         const double x = n(c.shapes[0]) * es;
         return Cost{c.backward ? 2.5 * x : 1.25 * x, 0};
       },
       {0}},
      {"relu", 1, 1, data_inputs, unary(&relu), streaming, {}},
      // A language model's head and loss, x [N, K], weight [V, K], targets in [0, V).
      {"linear_cross_entropy",
       2,
       2,
       [](const BenchCase& c) {
         return std::vector<InputSpec>{
             {c.shapes[0], 0, c.backward}, {c.shapes[1], 0, c.backward}, {{c.shapes[0][0]}, c.shapes[1][0], false}};
       },
       [](const BenchCase&, const Inputs& in) { return linear_cross_entropy(in[0], in[1], in[2]); },
       [](const BenchCase& c, double es) {
         const double flops = 2.0 * n(c.shapes[0]) * static_cast<double>(c.shapes[1][0]);
         const double bytes = (n(c.shapes[0]) + n(c.shapes[1])) * es;
         return Cost{c.backward ? 3 * bytes : bytes, c.backward ? 3 * flops : flops};
       },
       {}},
      // AdamW has its own workload (AdamWWorkload below); listed here for validation and cost.
      {"adamw",
       1,
       64,
       data_inputs,
       nullptr,
       [](const BenchCase& c, double es) {
         double params = 0;
         for (const Shape& s : c.shapes) params += n(s);
         return Cost{7 * params * es, 0};  // read param, grad, exp_avg, exp_avg_sq; write three
       },
       {}},
  };
  return ops;
}

const OpDef& find_def(const BenchCase& c) {
  for (const OpDef& d : registry())
    if (d.name == c.op) return d;
  GENESIS_THROW(UsageError, "bench suite ", c.where, ": unknown op '", c.op, "'");
}

Tensor draw(const InputSpec& spec, DType dtype, Device device, Generator& gen) {
  Tensor t = spec.index_bound > 0
                 ? randint(0, spec.index_bound, spec.shape, {.dtype = DType::i64, .device = device}, &gen)
                 : randn(spec.shape, {.dtype = DType::f32, .device = device}, &gen).to(dtype);
  if (spec.grad) t.requires_grad_(true);
  return t;
}

// A host float64 copy (integers keep their dtype) that is a fresh leaf.
Tensor reference_copy(const Tensor& t, bool grad) {
  Tensor c = t.detach().to(kCPU);
  if (is_floating(c.dtype())) c = c.to(DType::f64);
  if (c.shares_storage(t)) c = c.clone();
  if (grad) c.requires_grad_(true);
  return c;
}

class OpWorkload final : public Workload {
 public:
  OpWorkload(const BenchCase& c, DType dtype, Device device, size_t cache_bytes)
      : def_(find_def(c)),
        case_(c),
        dtype_(dtype),
        device_(device),
        specs_(def_.inputs(c)),
        gen_(std::hash<std::string>{}(c.name)) {
    double bytes = 0;
    for (const InputSpec& s : specs_) bytes += n(s.shape) * static_cast<double>(dtype_size(dtype));
    // Several input sets when one fits in the cache, so that rotating among them keeps the
    // cache flush honest even for inputs the flush buffer does not evict.
    int sets = bytes * 4 < static_cast<double>(cache_bytes) ? 4 : 1;
    for (int s = 0; s < sets; ++s) {
      Inputs in;
      for (const InputSpec& spec : specs_) in.push_back(draw(spec, dtype, device, gen_));
      sets_.push_back(std::move(in));
    }
  }

  double check() override {
    Inputs& in = sets_[0];
    if (case_.check_rows > 0 && !def_.row_inputs.empty()) return check_rows();
    if (case_.backward) {
      Tensor probe;
      {
        NoGradGuard no_grad;
        probe = def_.forward(case_, in);
      }
      if (probe.dim() > 0) grad_out_ = randn(probe.shape(), {.dtype = DType::f32, .device = device_}, &gen_).to(dtype_);
    }
    std::vector<Tensor> got = outputs(in, grad_out_);
    Inputs ref_in;
    for (size_t i = 0; i < in.size(); ++i) ref_in.push_back(reference_copy(in[i], specs_[i].grad));
    Tensor ref_grad_out = grad_out_.defined() ? reference_copy(grad_out_, false) : Tensor();
    std::vector<Tensor> ref = outputs(ref_in, ref_grad_out);
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      double err = relative_error(got[i].to(kCPU), ref[i]);
      if (std::isnan(err)) return err;
      worst = std::max(worst, err);
    }
    return worst;
  }

  void run(int rep) override { outputs(sets_[static_cast<size_t>(rep) % sets_.size()], grad_out_); }

 private:
  std::vector<Tensor> outputs(Inputs& in, const Tensor& grad_out) {
    if (!case_.backward) {
      NoGradGuard no_grad;
      return {def_.forward(case_, in)};
    }
    for (Tensor& t : in)
      if (t.requires_grad()) t.set_grad(Tensor());
    Tensor out = def_.forward(case_, in);
    out.backward(grad_out);
    std::vector<Tensor> result{out.detach()};
    for (Tensor& t : in)
      if (t.requires_grad()) result.push_back(t.grad());
    return result;
  }

  // Large products: the first and last rows of the output against a reference computed on
  // those rows only (the full float64 product would take minutes on the host).
  double check_rows() {
    const Inputs& in = sets_[0];
    Tensor out;
    {
      NoGradGuard no_grad;
      out = def_.forward(case_, in);
    }
    int64_t rows = out.size(0), half = std::max<int64_t>(1, case_.check_rows / 2);
    std::vector<std::pair<int64_t, int64_t>> blocks{{0, std::min(rows, half)}};
    if (rows > 2 * half)
      blocks.push_back({rows - half, half});
    else if (rows > half)
      blocks[0].second = rows;
    double worst = 0;
    for (auto [start, count] : blocks) {
      Inputs ref_in;
      for (size_t i = 0; i < in.size(); ++i) {
        bool is_row = std::find(def_.row_inputs.begin(), def_.row_inputs.end(), i) != def_.row_inputs.end();
        ref_in.push_back(reference_copy(is_row ? in[i].narrow(0, start, count) : in[i], false));
      }
      NoGradGuard no_grad;
      double err = relative_error(out.narrow(0, start, count).to(kCPU), def_.forward(case_, ref_in));
      if (std::isnan(err)) return err;
      worst = std::max(worst, err);
    }
    return worst;
  }

  const OpDef& def_;
  BenchCase case_;
  DType dtype_;
  Device device_;
  std::vector<InputSpec> specs_;
  Generator gen_;
  std::vector<Inputs> sets_;
  Tensor grad_out_;
};

// One AdamW step over the case's parameter shapes (GPT-2 small's in the default suite).
class AdamWWorkload final : public Workload {
 public:
  AdamWWorkload(const BenchCase& c, DType dtype, Device device) : gen_(std::hash<std::string>{}(c.name)) {
    NoGradGuard no_grad;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      Tensor p = mul(randn(c.shapes[i], {.dtype = DType::f32, .device = device}, &gen_), 0.02).to(dtype);
      p.requires_grad_(true);
      p.set_grad(randn(c.shapes[i], {.dtype = DType::f32, .device = device}, &gen_).to(dtype));
      params_.push_back({detail::concat("param", i), p});
    }
    optimizer_ = make_adam({group(params_)}, {});
  }

  // Compares the first update (parameter after minus before) with the same step in float64.
  double check() override {
    NoGradGuard no_grad;
    std::vector<Tensor> before;
    std::vector<NamedTensor> ref_params;
    for (const NamedTensor& p : params_) {
      before.push_back(reference_copy(p.tensor, false));
      Tensor r = before.back().clone();
      r.requires_grad_(true);
      r.set_grad(reference_copy(p.tensor.grad(), false));
      ref_params.push_back({p.name, r});
    }
    auto reference = make_adam({group(ref_params)}, {});
    reference->step();
    optimizer_->step();
    double worst = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor got = sub(reference_copy(params_[i].tensor, false), before[i]);
      double err = relative_error(got, sub(ref_params[i].tensor.detach(), before[i]));
      if (std::isnan(err)) return err;
      worst = std::max(worst, err);
    }
    return worst;
  }

  void run(int) override { optimizer_->step(); }

 private:
  static ParamGroup group(const std::vector<NamedTensor>& params) {
    return ParamGroup{.params = params, .lr = 1e-3, .base_lr = 1e-3, .weight_decay = 0.1};
  }

  Generator gen_;
  std::vector<NamedTensor> params_;
  std::unique_ptr<Optimizer> optimizer_;
};

}  // namespace

std::vector<std::string> bench_op_names() {
  std::vector<std::string> names;
  for (const OpDef& d : registry()) names.push_back(d.name);
  return names;
}

void validate_case(const BenchCase& c) {
  const OpDef& d = find_def(c);
  auto fail = [&](const std::string& why) {
    GENESIS_THROW(UsageError, "bench suite ", c.where, ": case '", c.name, "' (", c.op, "): ", why);
  };
  if (c.shapes.size() < d.min_shapes || c.shapes.size() > d.max_shapes)
    fail(d.min_shapes == d.max_shapes
             ? detail::concat("expects ", d.min_shapes, " shapes, got ", c.shapes.size())
             : detail::concat("expects ", d.min_shapes, " to ", d.max_shapes, " shapes, got ", c.shapes.size()));
  auto rank = [&](size_t i) { return c.shapes[i].size(); };
  if ((c.op == "matmul" || c.op == "linear") && (rank(0) < 2 || rank(1) < 2)) fail("operands must have rank >= 2");
  if (c.op == "bmm" && (rank(0) != 3 || rank(1) != 3)) fail("bmm operands are [B, M, K] and [B, K, N]");
  if ((c.op == "cross_entropy" || c.op == "transpose_copy") && rank(0) != 2) fail("the input must be 2-D");
  if (c.op == "embedding" && rank(0) != 2) fail("the first shape is the [num, dim] table");
  if (c.op == "cast" && !(c.variant == "f32" || c.variant == "f64" || c.variant == "bf16" || c.variant == "f16"))
    fail(detail::concat("cast needs variant = the target dtype (f32, f64, bf16 or f16), got '", c.variant, "'"));
  if (!c.variant.empty() && c.op != "cast" && !(c.op == "gelu" && (c.variant == "tanh" || c.variant == "none")))
    fail(detail::concat("variant '", c.variant,
                        "' is not known (gelu takes variant = \"tanh\" or \"none\", cast the target dtype)"));
  if (c.check_rows > 0 && d.row_inputs.empty())
    fail("check_rows is supported by matmul, bmm, linear and embedding only");
  if (c.backward && c.op == "adamw") fail("an optimizer step has no backward");
}

Cost case_cost(const BenchCase& c, DType dtype) {
  return find_def(c).cost(c, static_cast<double>(dtype_size(dtype)));
}

std::unique_ptr<Workload> make_workload(const BenchCase& c, DType dtype, Device device, size_t cache_bytes) {
  if (c.op == "adamw") return std::make_unique<AdamWWorkload>(c, dtype, device);
  return std::make_unique<OpWorkload>(c, dtype, device, cache_bytes);
}

double relative_error(const Tensor& out, const Tensor& ref) {
  GENESIS_CHECK(out.shape() == ref.shape(), ShapeError, "bench check: the result has shape ", out.shape(),
                " but the reference has shape ", ref.shape());
  Tensor a = out.contiguous().reshape({out.numel()}), b = ref.contiguous().reshape({ref.numel()});
  constexpr int64_t kChunk = int64_t{1} << 22;
  double diff = 0, norm = 0;
  for (int64_t start = 0; start < a.numel(); start += kChunk) {
    int64_t count = std::min(kChunk, a.numel() - start);
    std::vector<double> x = a.narrow(0, start, count).to_vector<double>();
    std::vector<double> y = b.narrow(0, start, count).to_vector<double>();
    for (size_t i = 0; i < x.size(); ++i) {
      diff += (x[i] - y[i]) * (x[i] - y[i]);
      norm += y[i] * y[i];
    }
  }
  if (std::isnan(diff) || std::isnan(norm)) return std::nan("");
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

}  // namespace genesis::cli::bench
