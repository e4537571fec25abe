// `genesis bench ops` over the op-case registry (libgenesis/ops/op_cases.h): the cases' inputs
// drawn on the device, the timed call, the float64 CPU check and the cost model; AdamW, which is
// not a table op, has a workload of its own.
#include "apps/genesis/bench_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/op_cases.h"
#include "libgenesis/optim/optimizer.h"

namespace genesis::cli::bench {
namespace {

using Inputs = std::vector<Tensor>;

OpArgs args_of(const BenchCase& c) {
  return {.shapes = c.shapes, .axes = c.axes, .dim = c.dim, .scalar = c.scalar, .variant = c.variant};
}

const OpCase& find_case(const BenchCase& c) {
  const OpCase* found = find_op_case(c.op);
  GENESIS_CHECK(found != nullptr, UsageError, "bench suite ", c.where, ": unknown op '", c.op, "'");
  return *found;
}

// An input the timed backward differentiates.
bool takes_grad(const CaseInput& in, bool backward) {
  return backward && takes_gradient(in);
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
      : def_(find_case(c)),
        case_(c),
        args_(args_of(c)),
        dtype_(dtype),
        device_(device),
        specs_(case_inputs(def_, args_)),
        gen_(std::hash<std::string>{}(c.name)) {
    double bytes = 0;
    for (const CaseInput& s : specs_) bytes += static_cast<double>(numel_of(s.shape) * dtype_size(dtype));
    // Several input sets when one fits in the cache, so that rotating among them keeps the
    // cache flush honest even for inputs the flush buffer does not evict.
    int sets = bytes * 4 < static_cast<double>(cache_bytes) ? 4 : 1;
    for (int s = 0; s < sets; ++s) {
      Inputs in;
      for (const CaseInput& spec : specs_) {
        in.push_back(draw_case_input(spec, dtype, device, gen_));
        if (takes_grad(spec, c.backward)) in.back().requires_grad_(true);
      }
      sets_.push_back(std::move(in));
    }
  }

  double check() override {
    Inputs& in = sets_[0];
    if (case_.backward) {  // the output gradient of the timed backward
      Tensor probe;
      {
        NoGradGuard no_grad;
        probe = forward(in);
      }
      if (probe.dim() > 0) grad_out_ = randn(probe.shape(), {.dtype = DType::f32, .device = device_}, &gen_).to(dtype_);
    }
    if (def_.random) return check_shapes();
    // Row checks compare the forward only (a backward's reference would need every row).
    if (case_.check_rows > 0 && !def_.row_inputs.empty()) return check_rows();
    std::vector<Tensor> got = outputs(in, grad_out_);
    Inputs ref_in;
    for (size_t i = 0; i < in.size(); ++i) ref_in.push_back(reference_copy(in[i], takes_grad(specs_[i], case_.backward)));
    Tensor ref_grad_out = grad_out_.defined() ? reference_copy(grad_out_, false) : Tensor();
    std::vector<Tensor> ref = outputs(ref_in, ref_grad_out, true);
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
  // The call; the options name the dtype and device of cases without inputs (factories):
  // the case's on the bench device, float64 on the CPU for the reference.
  Tensor forward(const Inputs& in, bool reference = false) const {
    return def_.forward(args_, in, reference ? TensorOptions{.dtype = DType::f64} : TensorOptions{.dtype = dtype_, .device = device_});
  }

  std::vector<Tensor> outputs(Inputs& in, const Tensor& grad_out, bool reference = false) {
    if (!case_.backward) {
      NoGradGuard no_grad;
      return {forward(in, reference)};
    }
    for (Tensor& t : in)
      if (t.requires_grad()) t.set_grad(Tensor());
    Tensor out = forward(in, reference);
    out.backward(grad_out);
    std::vector<Tensor> result{out.detach()};
    for (Tensor& t : in)
      if (t.requires_grad()) result.push_back(t.grad());
    return result;
  }

  // Random outputs (dropout, rand) differ between devices: the shape and dtype are the check.
  double check_shapes() {
    NoGradGuard no_grad;
    Tensor out = forward(sets_[0]);
    Inputs ref_in;
    for (const Tensor& t : sets_[0]) ref_in.push_back(reference_copy(t, false));
    Tensor ref = forward(ref_in, true);
    return out.shape() == ref.shape() ? 0.0 : std::nan("");
  }

  // Large products: the first and last rows of the output against a reference computed on
  // those rows only (the full float64 product would take minutes on the host).
  double check_rows() {
    const Inputs& in = sets_[0];
    Tensor out;
    {
      NoGradGuard no_grad;
      out = forward(in);
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
      double err = relative_error(out.narrow(0, start, count).to(kCPU), forward(ref_in, true));
      if (std::isnan(err)) return err;
      worst = std::max(worst, err);
    }
    return worst;
  }

  const OpCase& def_;
  BenchCase case_;
  OpArgs args_;
  DType dtype_;
  Device device_;
  std::vector<CaseInput> specs_;
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
  for (const OpCase& c : op_cases()) names.push_back(c.name);
  names.push_back("adamw");
  return names;
}

void validate_case(const BenchCase& c) {
  auto fail = [&](const std::string& why) {
    GENESIS_THROW(UsageError, "bench suite ", c.where, ": case '", c.name, "' (", c.op, "): ", why);
  };
  if (c.op == "adamw") {
    if (c.shapes.empty()) fail("expects at least one parameter shape");
    if (c.backward) fail("an optimizer step has no backward");
    return;
  }
  const OpCase& d = find_case(c);
  if (std::string why = check_case_args(d, args_of(c)); !why.empty()) fail(why);
  if (c.check_rows > 0 && d.row_inputs.empty()) fail("check_rows needs a row-separable op (one that lists row inputs)");
  if (c.backward && !op_info(d.op).backward) fail("the op has no backward");
}

Cost case_cost(const BenchCase& c, DType dtype) {
  const double es = static_cast<double>(dtype_size(dtype));
  if (c.op == "adamw") {
    double params = 0;
    for (const Shape& s : c.shapes) params += static_cast<double>(numel_of(s));
    return {7 * params * es, 0};  // read param, grad, exp_avg, exp_avg_sq; write three
  }
  return genesis::case_cost(find_case(c), args_of(c), c.backward, es);
}

std::vector<BenchCase> registry_suite(bool test_sizes) {
  std::vector<BenchCase> suite;
  for (const OpCase& c : op_cases()) {
    const OpArgs& args = test_sizes ? c.test : c.bench;
    const bool differentiable = has_gradient_input(c, args);
    for (bool backward : {false, true}) {
      if (backward && !(op_info(c.op).backward && differentiable)) continue;
      BenchCase b{.name = detail::concat(c.name, " ", shape_text(args.shapes), backward ? " fwd+bwd" : ""),
                  .op = c.name,
                  .shapes = args.shapes,
                  .dtypes = {DType::f32, DType::bf16},
                  .backward = backward,
                  .axes = args.axes,
                  .dim = args.dim,
                  .scalar = args.scalar,
                  .variant = args.variant,
                  .check_rows = c.row_inputs.empty() ? 0 : 64,
                  .where = "the op-case registry (libgenesis/ops/op_cases_*.cpp)"};
      suite.push_back(std::move(b));
    }
  }
  return suite;
}

nlohmann::json describe_case(const BenchCase& c) {
  nlohmann::json out{{"name", c.name},         {"op", c.op},       {"shapes", c.shapes},
                     {"backward", c.backward}, {"axes", c.axes},   {"dim", c.dim},
                     {"scalar", c.scalar},     {"variant", c.variant}, {"check_rows", c.check_rows},
                     {"tolerance", c.tolerance}, {"where", c.where}};
  nlohmann::json dtypes = nlohmann::json::array(), cost = nlohmann::json::object();
  for (DType d : c.dtypes) {
    dtypes.push_back(std::string(dtype_name(d)));
    Cost k = case_cost(c, d);
    cost[std::string(dtype_name(d))] = {{"bytes", k.bytes}, {"flops", k.flops}};
  }
  out["dtypes"] = dtypes;
  out["cost"] = cost;
  if (c.op == "adamw") {
    out["table_op"] = nullptr;
    out["torch"] = nullptr;
    out["inputs"] = nlohmann::json::array();
    out["row_inputs"] = nlohmann::json::array();
    out["random"] = false;
    return out;
  }
  const OpCase& d = find_case(c);
  nlohmann::json inputs = nlohmann::json::array();
  for (const CaseInput& in : case_inputs(d, args_of(c)))
    inputs.push_back({{"shape", in.shape},
                      {"kind", std::string(input_kind_name(in.kind))},
                      {"bound", in.bound},
                      {"grad", takes_grad(in, c.backward)}});
  out["table_op"] = std::string(op_info(d.op).name);
  out["torch"] = d.torch;
  out["inputs"] = inputs;
  out["row_inputs"] = d.row_inputs;
  out["random"] = d.random;
  return out;
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
