// Every case of the op-case registry (libgenesis/ops/op_cases.h) through the float64 gradient
// check and the CUDA-vs-CPU comparison, each on contiguous and on strided inputs; the moments of
// every random case's output on both devices; and the registry's coverage of the op table. One
// section per case: `genesis_tests "[opcases]" -c NAME`.
#include <algorithm>
#include <cmath>

#include "libgenesis/ops/op_cases.h"
#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

// The same values in a layout that is not row-major: a transposed copy seen through a
// transpose (rank >= 2), or every second element of a twice-as-long buffer (rank 1).
Tensor strided(const Tensor& t) {
  if (t.dim() >= 2) return t.transpose(-1, -2).contiguous().transpose(-1, -2);
  if (t.dim() == 1 && t.numel() > 1) return t.unsqueeze(1).expand({t.size(0), 2}).contiguous().select(1, 0);
  return t;
}

Fn call(const OpCase& c, const OpArgs& args, bool make_strided, TensorOptions options) {
  return [&c, args, make_strided, options](const TensorList& in) {
    TensorList x;
    for (const Tensor& t : in) x.push_back(make_strided ? strided(t) : t);
    return c.forward(args, x, options);
  };
}

TensorList draw_inputs(const OpCase& c, const OpArgs& args, DType dtype, uint64_t seed, bool leaves) {
  Generator gen(seed);
  TensorList inputs;
  for (const CaseInput& in : case_inputs(c, args)) {
    Tensor t = draw_case_input(in, dtype, kCPU, gen);
    if (leaves && in.differentiable && is_floating(t.dtype())) t.requires_grad_(true);
    inputs.push_back(t);
  }
  return inputs;
}

uint64_t seed_of(const std::string& name) {
  return std::hash<std::string>{}(name) & 0xffffffffu;
}

// The moment check draws a random case at this size (about a million values) instead of its
// test shape: the sample mean then lies within 0.005 standard deviations of the distribution's
// mean and the sample variance within 1% of its variance, each five standard errors or more
// (the widest, dropout's output, has a fourth moment 3 / (1 - p) times its squared variance),
// while a wrong law, scale or rate falls outside (randint's range short by one moves the mean
// 0.017 standard deviations and the variance 2%). Odd extents leave partial vectors and blocks.
const Shape kMomentShape{997, 1009};
constexpr double kMeanTolerance = 0.005;     // in standard deviations of the distribution
constexpr double kVarianceTolerance = 0.01;  // relative

// The case's output at kMomentShape on `device`, in f32 (randint: i64), its inputs drawn on the CPU.
Tensor draw_random_output(const OpCase& c, Device device, bool make_strided) {
  OpArgs args = c.test;
  args.shapes[0] = kMomentShape;
  TensorList inputs;
  for (const Tensor& t : draw_inputs(c, args, DType::f32, seed_of(c.name), false)) inputs.push_back(t.to(device));
  return call(c, args, make_strided, {.dtype = DType::f32, .device = device})(inputs);
}

void check_moments(const OpCase& c, const Tensor& out) {
  const std::vector<double> values = out.to_vector<double>();
  const double n = static_cast<double>(values.size());
  double sum = 0, squares = 0;
  for (double v : values) sum += v;
  const double mean = sum / n;
  for (double v : values) squares += (v - mean) * (v - mean);
  const double variance = squares / (n - 1);
  const auto [lo, hi] = std::ranges::minmax(values);
  const OutputMoments& want = c.moments;
  INFO(c.name << " on " << out.device().str() << ": mean " << mean << " (expected " << want.mean << "), variance "
              << variance << " (expected " << want.variance << "), values in [" << lo << ", " << hi << "] (expected ["
              << want.min << ", " << want.max << "])");
  CHECK(std::abs(mean - want.mean) <= kMeanTolerance * std::sqrt(want.variance));
  CHECK(std::abs(variance - want.variance) <= kVarianceTolerance * want.variance);
  CHECK(lo >= want.min);
  CHECK(hi <= want.max);
}

// Gradients of sum(f(x) * w) for w random, on the CPU and on cuda:0, for the case's
// differentiable inputs.
void check_gradient_parity(const OpCase& c, const Fn& fn, const TensorList& inputs, Tolerance tolerance) {
  const std::vector<CaseInput> specs = case_inputs(c, c.test);
  TensorList cpu, gpu;
  for (size_t i = 0; i < inputs.size(); ++i) {
    bool leaf = specs[i].differentiable && is_floating(inputs[i].dtype());
    cpu.push_back(leaf ? inputs[i].detach().clone().requires_grad_(true) : inputs[i]);
    gpu.push_back(leaf ? inputs[i].detach().to(kCuda0).requires_grad_(true) : inputs[i].to(kCuda0));
  }
  Tensor cpu_out = fn(cpu);
  Tensor weight = rand_values(cpu_out.shape(), cpu_out.dtype(), 0.5, 1.5);
  sum(mul(cpu_out, weight)).backward();
  Tensor gpu_out = fn(gpu);
  sum(mul(gpu_out, weight.to(kCuda0))).backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!cpu[i].requires_grad()) continue;
    INFO("gradient of input " << i << " (shape " << shape_str(inputs[i].shape()) << ")");
    REQUIRE(cpu[i].grad().defined() == gpu[i].grad().defined());
    if (cpu[i].grad().defined()) require_close(gpu[i].grad(), cpu[i].grad(), tolerance.rtol, tolerance.atol);
  }
}

}  // namespace

TEST_CASE("every op of the table has an op case", "[cpu][optable][opcases]") {
  for (const OpInfo& op : op_table()) {
    bool found = false;
    for (const OpCase& c : op_cases()) found = found || c.op == op_id(op);
    INFO("op '" << op.name << "' has no case in libgenesis/ops/op_cases_*.cpp");
    CHECK(found);
  }
}

TEST_CASE("op cases are complete and their test arguments valid", "[cpu][opcases]") {
  for (const OpCase& c : op_cases()) {
    INFO("op case '" << c.name << "'");
    CHECK(c.forward != nullptr);
    CHECK_FALSE(c.torch.empty());
    CHECK(check_case_args(c, c.test).empty());
    CHECK(check_case_args(c, c.bench).empty());
    OpCost cost = case_cost(c, c.bench, false, 4.0);
    CHECK(cost.bytes >= 0);
    CHECK(std::isfinite(cost.bytes + cost.flops));
    if (c.random) CHECK(c.moments.variance > 0);  // a random case states the moments it is checked against
  }
}

TEST_CASE("op cases: float64 gradient checks", "[cpu][gradcheck][opcases]") {
  for (const OpCase& c : op_cases()) {
    if (!gradient_checked(c)) continue;
    for (bool make_strided : {false, true}) {
      if (make_strided && !c.strided_inputs) continue;
      DYNAMIC_SECTION(c.name << (make_strided ? " strided" : "")) {
        TensorList inputs = draw_inputs(c, c.test, DType::f64, seed_of(c.name), true);
        gradcheck(call(c, c.test, make_strided, {.dtype = DType::f64}), inputs);
      }
    }
  }
}

TEST_CASE("op cases: moments of random outputs", "[cpu][opcases]") {
  for (const OpCase& c : op_cases()) {
    if (!c.random) continue;
    DYNAMIC_SECTION(c.name) {
      check_moments(c, draw_random_output(c, kCPU, false));
    }
  }
}

TEST_CASE("op cases: CUDA against the CPU", "[cuda][opcases]") {
  if (!cuda_ready()) return;
  for (const OpCase& c : op_cases()) {
    const Tolerance tolerance{std::max(1e-5, c.parity_rtol), 1e-5};
    for (bool make_strided : {false, true}) {
      if (make_strided && !c.strided_inputs) continue;
      DYNAMIC_SECTION(c.name << (make_strided ? " strided" : "")) {
        TensorList inputs = draw_inputs(c, c.test, DType::f32, seed_of(c.name), false);
        Fn on_cpu = call(c, c.test, make_strided, {.dtype = DType::f32, .device = kCPU});
        Fn on_gpu = call(c, c.test, make_strided, {.dtype = DType::f32, .device = kCuda0});
        if (c.random) {
          TensorList gpu_inputs;
          for (const Tensor& t : inputs) gpu_inputs.push_back(t.to(kCuda0));
          Tensor want = on_cpu(inputs), got = on_gpu(gpu_inputs);
          CHECK(got.device() == kCuda0);
          CHECK(got.shape() == want.shape());
          CHECK(got.dtype() == want.dtype());
          check_moments(c, draw_random_output(c, kCuda0, make_strided));
          continue;
        }
        // check_parity moves the inputs to cuda:0 itself; the options tell input-less ops where to run.
        Fn either = [&](const TensorList& in) {
          return (in[0].device().is_cuda() ? on_gpu : on_cpu)(in);
        };
        if (inputs.empty()) {
          Tensor want = on_cpu({}), got = on_gpu({});
          REQUIRE(got.device() == kCuda0);
          require_close(got, want, tolerance.rtol, tolerance.atol);
          continue;
        }
        check_parity(either, inputs, tolerance);
        if (gradient_checked(c)) check_gradient_parity(c, either, inputs, tolerance);
      }
    }
  }
}
