// The fused multi-tensor CUDA optimizer kernels against the fused CPU kernels: every optimizer
// and option, weight decay on and off, more tensors than one launch takes, odd sizes and
// sizes across chunk boundaries, f32, bf16 and f16 gradients, f64 parameters, parameters whose
// step counts differ; and the device-side gradient norm clipping against the CPU's.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "libgenesis/optim/optimizer.h"
#include "tests/cuda_testing.h"

#if GENESIS_WITH_CUDA
#include "kernels/cpu/optim.h"
#include "kernels/cuda/optim.h"
#include "libgenesis/cuda/runtime.h"
#endif

using namespace genesis;
using namespace genesis::testing;

namespace {

// 40 tensors (more than one launch's 36), sizes from 1 to past three 8192-element update chunks.
std::vector<Shape> parameter_shapes() {
  std::vector<Shape> shapes;
  const int64_t sizes[] = {1, 37, 129, 4096, 8193, 9001, 3, 65};
  for (int i = 0; i < 40; ++i) shapes.push_back(i % 3 == 0 ? Shape{sizes[i % 8]} : Shape{sizes[i % 8], 3});
  return shapes;
}

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;

struct Model {
  std::vector<Tensor> params;
  std::unique_ptr<Optimizer> optimizer;
};

// Two groups (with and without weight decay, different learning rates) over copies of `init`.
Model make_model(const std::vector<Tensor>& init, Device device, double weight_decay, const MakeOptimizer& make) {
  Model model;
  ParamGroup decay{.params = {}, .lr = 1e-2, .base_lr = 1e-2, .weight_decay = weight_decay};
  ParamGroup no_decay{.params = {}, .lr = 3e-3, .base_lr = 3e-3, .weight_decay = 0.0};
  for (size_t i = 0; i < init.size(); ++i) {
    Tensor p = init[i].to(device).clone().requires_grad_(true);
    model.params.push_back(p);
    std::string name = "p";
    name += std::to_string(i);
    (i % 4 == 0 ? no_decay : decay).params.push_back({name, p});
  }
  model.optimizer = make({decay, no_decay});
  return model;
}

// Five steps on both devices with the same random gradients of `grad_dtype`; parameter 1 gets
// no gradient on the first step, so its step count lags the others. Parameters and state must
// agree after every step.
void check_optimizer(const MakeOptimizer& make, double weight_decay, DType param_dtype, DType grad_dtype,
                     Tolerance tolerance) {
  std::vector<Tensor> init;
  for (const Shape& shape : parameter_shapes()) init.push_back(random_input(shape, param_dtype));
  Model cpu = make_model(init, kCPU, weight_decay, make);
  Model gpu = make_model(init, kCuda0, weight_decay, make);
  for (int step = 1; step <= 5; ++step) {
    INFO("step " << step);
    for (size_t i = 0; i < init.size(); ++i) {
      if (i == 1 && step == 1) continue;
      Tensor grad = random_input(init[i].shape(), grad_dtype);
      cpu.params[i].set_grad(grad);
      gpu.params[i].set_grad(grad.to(kCuda0));
    }
    cpu.optimizer->step();
    gpu.optimizer->step();
    cpu.optimizer->zero_grad();
    gpu.optimizer->zero_grad();
    for (size_t i = 0; i < init.size(); ++i) {
      INFO("parameter " << i << " of shape " << shape_str(init[i].shape()));
      require_close(gpu.params[i], cpu.params[i], tolerance.rtol, tolerance.atol);
    }
    std::vector<NamedTensor> cpu_state = cpu.optimizer->state(), gpu_state = gpu.optimizer->state();
    REQUIRE(cpu_state.size() == gpu_state.size());
    for (size_t i = 0; i < cpu_state.size(); ++i) {
      INFO("state " << cpu_state[i].name);
      REQUIRE(gpu_state[i].name == cpu_state[i].name);
      require_close(gpu_state[i].tensor, cpu_state[i].tensor, tolerance.rtol, tolerance.atol);
    }
  }
}

constexpr Tolerance kF32{1e-6, 1e-6};
constexpr Tolerance kF64{1e-13, 1e-14};

void check_all_dtypes(const MakeOptimizer& make, double weight_decay) {
  {
    INFO("f32 parameters, f32 gradients");
    check_optimizer(make, weight_decay, DType::f32, DType::f32, kF32);
  }
  {
    INFO("f32 parameters, bf16 gradients");
    check_optimizer(make, weight_decay, DType::f32, DType::bf16, kF32);
  }
  {
    INFO("f32 parameters, f16 gradients");
    check_optimizer(make, weight_decay, DType::f32, DType::f16, kF32);
  }
  {
    INFO("f64 parameters");
    check_optimizer(make, weight_decay, DType::f64, DType::f64, kF64);
  }
}

}  // namespace

TEST_CASE("cuda optimizer: adam, adamw and amsgrad equal the fused CPU kernels", "[cuda][optim]") {
  if (!cuda_ready()) return;
  for (bool decoupled : {true, false}) {
    for (bool amsgrad : {false, true}) {
      for (double wd : {0.0, 0.1}) {
        INFO("decoupled " << decoupled << ", amsgrad " << amsgrad << ", weight decay " << wd);
        check_all_dtypes(
            [&](std::vector<ParamGroup> groups) {
              return make_adam(
                  std::move(groups),
                  {.beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .amsgrad = amsgrad, .decoupled_weight_decay = decoupled});
            },
            wd);
      }
    }
  }
}

TEST_CASE("cuda optimizer: sgd (momentum, dampening, nesterov) equals the fused CPU kernel", "[cuda][optim]") {
  if (!cuda_ready()) return;
  const SgdOptions variants[] = {
      {}, {.momentum = 0.9}, {.momentum = 0.9, .dampening = 0.3}, {.momentum = 0.9, .nesterov = true}};
  for (const SgdOptions& o : variants) {
    for (double wd : {0.0, 0.01}) {
      INFO("momentum " << o.momentum << ", dampening " << o.dampening << ", nesterov " << o.nesterov
                       << ", weight decay " << wd);
      check_all_dtypes([&](std::vector<ParamGroup> groups) { return make_sgd(std::move(groups), o); }, wd);
    }
  }
}

TEST_CASE("cuda optimizer: lion equals the fused CPU kernel", "[cuda][optim]") {
  if (!cuda_ready()) return;
  for (double wd : {0.0, 0.1}) {
    INFO("weight decay " << wd);
    check_all_dtypes([](std::vector<ParamGroup> groups) { return make_lion(std::move(groups)); }, wd);
  }
}

TEST_CASE("cuda optimizer: parameters of other dtypes are refused with a clear error", "[cuda][optim]") {
  if (!cuda_ready()) return;
  Tensor p = zeros({5}, {.dtype = DType::bf16, .device = kCuda0}).requires_grad_(true);
  p.set_grad(ones({5}, {.dtype = DType::bf16, .device = kCuda0}));
  auto optimizer = make_adam({ParamGroup{.params = {{"w", p}}, .lr = 1e-3, .base_lr = 1e-3, .weight_decay = 0.0}});
  CHECK_THROWS_WITH(optimizer->step(), Catch::Matchers::Contains("adam_step") && Catch::Matchers::Contains("bf16"));
}

TEST_CASE("cuda clip_grad_norm: one device-side norm equals the CPU's", "[cuda][optim]") {
  if (!cuda_ready()) return;
  for (double max_norm : {0.0, 1.0, 1e6}) {
    INFO("max_norm " << max_norm);
    std::vector<Tensor> cpu_params, gpu_params;
    std::vector<Shape> shapes = parameter_shapes();
    for (size_t i = 0; i < shapes.size(); ++i) {
      // A mix of gradient dtypes, as a model with some half-precision parameters has.
      DType dtype = i % 5 == 0 ? DType::bf16 : (i % 7 == 0 ? DType::f64 : DType::f32);
      Tensor grad = random_input(shapes[i], dtype);
      Tensor cpu_p = zeros(shapes[i], {.dtype = dtype}).requires_grad_(true);
      Tensor gpu_p = zeros(shapes[i], {.dtype = dtype, .device = kCuda0}).requires_grad_(true);
      cpu_p.set_grad(grad.clone());
      gpu_p.set_grad(grad.to(kCuda0));
      cpu_params.push_back(cpu_p);
      gpu_params.push_back(gpu_p);
    }
    cpu_params.push_back(zeros({3}).requires_grad_(true));  // no gradient: skipped
    gpu_params.push_back(zeros({3}, {.device = kCuda0}).requires_grad_(true));
    Tensor cpu_norm = clip_grad_norm(cpu_params, max_norm);
    Tensor gpu_norm = clip_grad_norm(gpu_params, max_norm);
    REQUIRE(gpu_norm.device() == kCuda0);
    REQUIRE(gpu_norm.dim() == 0);
    REQUIRE(gpu_norm.dtype() == DType::f32);
    require_close(gpu_norm, cpu_norm, 1e-5, 0.0);
    for (size_t i = 0; i + 1 < cpu_params.size(); ++i) {
      INFO("gradient " << i);
      Tolerance t = cpu_params[i].dtype() == DType::bf16 ? Tolerance{1e-2, 1e-3} : Tolerance{1e-5, 1e-7};
      require_close(gpu_params[i].grad(), cpu_params[i].grad(), t.rtol, t.atol);
    }
  }
  // No gradients at all: a zero norm.
  Tensor lone = zeros({3}, {.device = kCuda0}).requires_grad_(true);
  CHECK(clip_grad_norm({lone}, 1.0).item() == 0.0);
}

#if GENESIS_WITH_CUDA
TEST_CASE("cuda optimizer kernels: packed and unaligned buffers give the CPU kernels' bits", "[cuda][optim]") {
  if (!cuda_ready()) return;
  // offset 0: 16-byte aligned buffers take the packed path; offset 1 (4 bytes) the element path.
  // 20003 elements: two full 8192-element chunks and a ragged one ending mid-pack.
  const int64_t n = 20003;
  for (int64_t offset : {0, 1}) {
    INFO("offset " << offset << " elements");
    std::vector<Tensor> cpu;
    for (int i = 0; i < 5; ++i) cpu.push_back(random_input({n + offset}, DType::f32, i == 3 ? 0.0 : -1.0, 1.0));
    std::vector<Tensor> gpu;
    for (const Tensor& t : cpu) gpu.push_back(t.to(kCuda0));
    auto at = [&](const Tensor& t) { return static_cast<float*>(t.data_ptr()) + offset; };
    kernels::AdamStep adam{
        .lr = 1e-2, .weight_decay = 0.1, .amsgrad = true, .bias_correction1 = 0.19, .bias_correction2 = 0.0199};
    kernels::cpu::adam_step(DType::f32, n, at(cpu[0]), at(cpu[1]), at(cpu[2]), at(cpu[3]), at(cpu[4]), adam);
    kernels::SgdStep sgd{.lr = 1e-2, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01, .first_step = false};
    kernels::cpu::sgd_step(DType::f32, n, at(cpu[0]), at(cpu[1]), at(cpu[2]), sgd);
    kernels::LionStep lion{.lr = 1e-3, .weight_decay = 0.1};
    kernels::cpu::lion_step(DType::f32, n, at(cpu[0]), at(cpu[1]), at(cpu[3]), lion);

    const kernels::cuda::OptimTensor adam_tensor{at(gpu[0]), at(gpu[1]), {at(gpu[2]), at(gpu[3]), at(gpu[4])}, n};
    kernels::cuda::adam_step(DType::f32, DType::f32, {&adam_tensor, 1}, adam, cuda::current_stream());
    const kernels::cuda::OptimTensor sgd_tensor{at(gpu[0]), at(gpu[1]), {at(gpu[2]), nullptr, nullptr}, n};
    kernels::cuda::sgd_step(DType::f32, DType::f32, {&sgd_tensor, 1}, sgd, cuda::current_stream());
    const kernels::cuda::OptimTensor lion_tensor{at(gpu[0]), at(gpu[1]), {at(gpu[3]), nullptr, nullptr}, n};
    kernels::cuda::lion_step(DType::f32, DType::f32, {&lion_tensor, 1}, lion, cuda::current_stream());
    for (int i = 0; i < 5; ++i) {
      INFO("buffer " << i);
      require_close(gpu[i], cpu[i], 0.0, 0.0);
    }
  }
}
#endif

// optimizer.step(skip_if, norm, max_norm) folds norm clipping into the update kernels (CUDA,
// gradients of the parameters' dtype) or scales the gradients first (bf16 gradients of f32
// parameters, the CPU): either way the parameters take the bits of clip_grad_norm + step().
TEST_CASE("clipping inside the optimizer step equals clip_grad_norm then step", "[cuda][optim]") {
  const MakeOptimizer makers[] = {
      [](std::vector<ParamGroup> g) { return make_adam(std::move(g), {.decoupled_weight_decay = true}); },
      [](std::vector<ParamGroup> g) { return make_sgd(std::move(g), {.momentum = 0.9}); },
      [](std::vector<ParamGroup> g) { return make_lion(std::move(g)); }};
  std::vector<Device> devices = {kCPU};
  if (cuda_ready()) devices.push_back(kCuda0);
  for (Device device : devices) {
    for (DType param_dtype : {DType::f32, DType::f64}) {
      for (DType grad_dtype : {param_dtype, DType::bf16}) {
        if (grad_dtype == DType::bf16 && (param_dtype != DType::f32 || device.is_cpu())) continue;
        for (double max_norm : {0.5, 1e6}) {  // clipping, and a factor of 1
          for (size_t m = 0; m < std::size(makers); ++m) {
            INFO(device.str() << ", " << dtype_name(param_dtype) << " parameters, " << dtype_name(grad_dtype)
                              << " gradients, max_norm " << max_norm << ", optimizer " << m);
            std::vector<Tensor> init;
            for (const Shape& shape : parameter_shapes()) init.push_back(random_input(shape, param_dtype));
            Model separate = make_model(init, device, 0.1, makers[m]);
            Model folded = make_model(init, device, 0.1, makers[m]);
            for (int step = 0; step < 3; ++step) {
              for (size_t i = 0; i < init.size(); ++i) {
                Tensor grad = random_input(init[i].shape(), grad_dtype, -3, 3).to(device);
                separate.params[i].set_grad(grad.clone());
                folded.params[i].set_grad(grad.clone());
              }
              const Tensor norm_separate = clip_grad_norm(separate.params, max_norm);
              separate.optimizer->step();
              const Tensor norm = clip_grad_norm(folded.params, 0.0);
              folded.optimizer->step(Tensor(), norm, max_norm);
              CHECK(norm.item() == norm_separate.item());
              for (size_t i = 0; i < init.size(); ++i) {
                INFO("step " << step << ", parameter " << i);
                REQUIRE(folded.params[i].to(kCPU).to_vector<double>() ==
                        separate.params[i].to(kCPU).to_vector<double>());
              }
            }
          }
        }
      }
    }
  }
}
