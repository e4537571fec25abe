// Optimizer offload (Optimizer::offload_to_host): the host update, streamed through small chunks
// so that every tensor spans several and chunks cross tensor ends, against the same optimizer
// updating in place, bit for bit: parameters and state after every step, with a parameter that
// misses a step, a skipped step (skip_if), clipping by a given norm, f32 and f64 parameters
// (and bf16 gradients on CUDA), and a resume from the other kind's state. On the CPU this checks
// the chunking; on CUDA also the pinned copies, the copy streams and the ordering around them.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "libgenesis/optim/optimizer.h"
#include "libgenesis/recipe/build.h"
#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;

// 12 tensors of odd sizes; at 256-byte chunks (64 f32 elements) the largest spans 160 of them,
// more than the exchange's three buffers.
std::vector<Shape> shapes() {
  return {{1}, {37}, {129, 3}, {64}, {65}, {3, 7}, {4099}, {2}, {1021, 10}, {63}, {5, 5, 5}, {127}};
}

struct Model {
  std::vector<Tensor> params;
  std::unique_ptr<Optimizer> optimizer;
};

// Two groups (weight decay on one, other learning rates) over copies of `init` on `device`.
Model make_model(const std::vector<Tensor>& init, Device device, const MakeOptimizer& make, bool offload) {
  Model model;
  ParamGroup decay{.params = {}, .lr = 1e-2, .base_lr = 1e-2, .weight_decay = 0.1};
  ParamGroup no_decay{.params = {}, .lr = 3e-3, .base_lr = 3e-3, .weight_decay = 0.0};
  for (size_t i = 0; i < init.size(); ++i) {
    Tensor p = init[i].to(device).clone().requires_grad_(true);
    model.params.push_back(p);
    std::string name = "p";  // (not "p" + to_string: gcc 12 warns falsely about that -Wrestrict)
    name += std::to_string(i);
    (i % 4 == 0 ? no_decay : decay).params.push_back({name, p});
  }
  model.optimizer = make({decay, no_decay});
  if (offload) model.optimizer->offload_to_host(256);
  return model;
}

// Bit for bit, except f64 on CUDA, whose update kernel rounds differently from the CPU's (as
// test_cuda_optim.cpp's tolerance for it says).
void require_same(const Model& offloaded, const Model& in_place) {
  const bool exact = in_place.params.front().dtype() == DType::f32 || in_place.params.front().device().is_cpu();
  for (size_t i = 0; i < in_place.params.size(); ++i) {
    INFO("parameter " << i);
    if (exact)
      REQUIRE(offloaded.params[i].to(kCPU).to_vector<double>() == in_place.params[i].to(kCPU).to_vector<double>());
    else
      require_close(offloaded.params[i].to(kCPU), in_place.params[i].to(kCPU), 1e-13, 1e-14);
  }
  const std::vector<NamedTensor> a = offloaded.optimizer->state(), b = in_place.optimizer->state();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("state " << b[i].name);
    REQUIRE(a[i].name == b[i].name);
    CHECK(a[i].tensor.device() == kCPU);  // offloaded state lives on the host
    if (exact) REQUIRE(a[i].tensor.to_vector<double>() == b[i].tensor.to(kCPU).to_vector<double>());
    else require_close(a[i].tensor, b[i].tensor.to(kCPU), 1e-13, 1e-14);
  }
}

// Six steps on both optimizers with the same gradients: parameter 1 has none at step 1, step 3 is
// skipped by skip_if, steps 4 and 5 clip by the gradients' norm (max_norm below it, then above).
// After step 6 a third optimizer, offloaded, takes over from the in-place one's state.
void check_offload(Device device, const MakeOptimizer& make, DType param_dtype, DType grad_dtype) {
  std::vector<Tensor> init;
  for (const Shape& shape : shapes()) init.push_back(random_input(shape, param_dtype));
  Model offloaded = make_model(init, device, make, true);
  Model in_place = make_model(init, device, make, false);
  CHECK(offloaded.optimizer->offloaded());
  CHECK_FALSE(in_place.optimizer->offloaded());
  auto step = [&](int t, Model& m, const std::vector<Tensor>& grads) {
    for (size_t i = 0; i < init.size(); ++i)
      if (!(i == 1 && t == 1)) m.params[i].set_grad(grads[i].clone());
    const Tensor skip = full({}, t == 3 ? 1.0 : 0.0, {.dtype = DType::f32, .device = device});
    if (t == 4 || t == 5) {
      const Tensor norm = clip_grad_norm(m.params, 0.0);
      m.optimizer->step(skip, norm, t == 4 ? 0.5 * norm.item() : 2.0 * norm.item());
    } else {
      m.optimizer->step(skip);
    }
    m.optimizer->zero_grad(true);
  };
  // Steps first..last on both, with the same random gradients, compared after each.
  auto steps = [&](int first, int last, Model& offloaded_model) {
    for (int t = first; t <= last; ++t) {
      INFO("step " << t);
      std::vector<Tensor> grads;
      for (const Tensor& p : init) grads.push_back(random_input(p.shape(), grad_dtype, -2, 2).to(device));
      step(t, offloaded_model, grads);
      step(t, in_place, grads);
      require_same(offloaded_model, in_place);
    }
  };
  steps(1, 6, offloaded);
  Model resumed = make_model(init, device, make, true);
  for (size_t i = 0; i < init.size(); ++i) {
    NoGradGuard no_grad;
    resumed.params[i].copy_(in_place.params[i]);
  }
  resumed.optimizer->load_state(in_place.optimizer->state(), in_place.optimizer->step_count());
  INFO("resumed from the in-place optimizer's state");
  steps(7, 8, resumed);
}

void check_every_optimizer(Device device, DType param_dtype, DType grad_dtype) {
  const std::pair<const char*, MakeOptimizer> makers[] = {
      {"adamw", [](std::vector<ParamGroup> g) { return make_adam(std::move(g), {.beta1 = 0.8, .beta2 = 0.95}); }},
      {"adam, amsgrad",
       [](std::vector<ParamGroup> g) {
         return make_adam(std::move(g), {.amsgrad = true, .decoupled_weight_decay = false});
       }},
      {"sgd, nesterov",
       [](std::vector<ParamGroup> g) { return make_sgd(std::move(g), {.momentum = 0.9, .nesterov = true}); }},
      {"lion", [](std::vector<ParamGroup> g) { return make_lion(std::move(g)); }}};
  for (const auto& [name, make] : makers) {
    INFO(name << " on " << device.str() << ", " << dtype_name(param_dtype) << " parameters, "
              << dtype_name(grad_dtype) << " gradients");
    check_offload(device, make, param_dtype, grad_dtype);
  }
}

}  // namespace

TEST_CASE("optimizer offload: the chunked host update equals the in-place one bit for bit", "[cpu][optim]") {
  check_every_optimizer(kCPU, DType::f32, DType::f32);
  check_every_optimizer(kCPU, DType::f64, DType::f64);
}

TEST_CASE("optimizer offload: a late call and parameters the host cannot update are refused", "[cpu][optim]") {
  Tensor p = full({5}, 0.5, {.requires_grad = true});
  auto late = make_adam({ParamGroup{.params = {{"w", p}}}});
  p.set_grad(full({5}, 1.0));
  late->step();
  CHECK_THROWS_AS(late->offload_to_host(), ValueError);
  CHECK_THROWS_AS(make_sgd({})->offload_to_host(100), ValueError);  // not a multiple of 64 bytes
  Tensor half = full({5}, 0.5, {.dtype = DType::bf16, .requires_grad = true});
  auto narrow = make_sgd({ParamGroup{.params = {{"h", half}}}});
  narrow->offload_to_host();
  half.set_grad(full({5}, 1.0, {.dtype = DType::bf16}));
  CHECK_THROWS_WITH(narrow->step(), Catch::Contains("parameter 'h' is bf16"));
}

TEST_CASE("optimizer offload: a recipe asks for it, and a CPU run is told to leave it out", "[cpu][recipe]") {
  RecipeSpec spec = parse_recipe(R"([run]
name = "offload"
device = "auto"
[model]
name = "mlp"
[data]
name = "fashion_mnist"
[optimizer]
name = "adamw"
lr = 1e-3
[training]
steps = 1
[dist]
offload_optimizer = true
)",
                                 "offload.toml");
  ParamGroup group{.params = {{"w", full({3}, 1.0, {.requires_grad = true})}}};
  CHECK_THROWS_WITH(recipe::build_optimizer(spec, {group}),
                    Catch::Contains("dist.offload_optimizer moves the optimizer state from a GPU") &&
                        Catch::Contains("parameters are on cpu"));
  spec.dist.offload_optimizer = false;
  CHECK_FALSE(recipe::build_optimizer(spec, {group})->offloaded());
  if (!cuda_ready()) return;
  spec.dist.offload_optimizer = true;
  group.params[0].tensor = full({3}, 1.0, {.device = kCuda0, .requires_grad = true});
  CHECK(recipe::build_optimizer(spec, {group})->offloaded());
}

TEST_CASE("cuda optimizer offload: pinned chunks through the copy streams equal the device update", "[cuda][optim]") {
  if (!cuda_ready()) return;
  check_every_optimizer(kCuda0, DType::f32, DType::f32);
  check_every_optimizer(kCuda0, DType::f32, DType::bf16);
  check_every_optimizer(kCuda0, DType::f64, DType::f64);
}
