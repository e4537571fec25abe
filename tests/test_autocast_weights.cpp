// Autocast's kept parameter copies (autograd/autocast_weights.h): a registered parameter's cast
// is reused while the parameter is unchanged, through views too, with the gradient of the cast;
// a change casts again; the optimizer's refresh keeps a written copy current; and on CUDA a
// fused AdamW run under bf16 autocast trains bit for bit as without the copies.
#include <memory>
#include <vector>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/autograd/autocast_weights.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/storage.h"
#include "libgenesis/models/hf.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/ops/reduce.h"
#include "libgenesis/optim/optimizer.h"
#include "tests/testing.h"

using namespace genesis;

TEST_CASE("autocast copies: kept while the parameter is unchanged, cast again after a change", "[cpu][autocast]") {
  manual_seed(5);
  Tensor w = testing::rand_values({6, 4}).requires_grad_(true);
  const Tensor plain = w.to(DType::bf16);
  CHECK(autocast_weights::cast(w, DType::bf16).storage() != plain.storage());  // nothing registered: a cast
  autocast_weights::Registration registration({w});
  const Tensor first = autocast_weights::cast(w, DType::bf16);
  const Tensor again = autocast_weights::cast(w, DType::bf16);
  CHECK(again.storage() == first.storage());  // the kept copy
  CHECK(again.to_vector<float>() == plain.to_vector<float>());
  // A permuted view of the parameter (GPT-2's Conv1D) reads the same copy, as a view.
  const Tensor transposed = autocast_weights::cast(w.t(), DType::bf16);
  CHECK(transposed.storage() == first.storage());
  CHECK(transposed.to_vector<float>() == plain.t().to_vector<float>());
  // The gradient flows back through the copy as through the cast, in the parameter's dtype.
  const Tensor g = testing::rand_values({4, 6});
  sum(mul(transposed.to(DType::f32), g)).backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::f32);
  CHECK(w.grad().to_vector<float>() == g.t().to(DType::bf16).to(DType::f32).to_vector<float>());
  // A change of the parameter (its storage version moves) is cast again.
  {
    NoGradGuard no_grad;
    mul_(w, 2.0);
  }
  const Tensor changed = autocast_weights::cast(w, DType::bf16);
  CHECK(changed.storage() != first.storage());
  CHECK(changed.to_vector<float>() == w.to(DType::bf16).to_vector<float>());
  // A part of the parameter reads its part of the copy; another dtype is another cast.
  const Tensor part = autocast_weights::cast(w.narrow(0, 1, 2), DType::bf16);
  CHECK(part.storage() == changed.storage());
  CHECK(part.to_vector<float>() == w.narrow(0, 1, 2).to(DType::bf16).to_vector<float>());
  CHECK(autocast_weights::cast(w, DType::f16).storage() != changed.storage());
  // Parameters sharing one storage (a flat buffer) are never kept: one version covers them all.
  Tensor flat = testing::rand_values({10});
  autocast_weights::Registration shared({flat.narrow(0, 0, 5), flat.narrow(0, 5, 5)});
  const Tensor half = flat.narrow(0, 0, 5);
  CHECK(autocast_weights::cast(half, DType::bf16).storage() != autocast_weights::cast(half, DType::bf16).storage());
}

TEST_CASE("autocast copies: an optimizer's refresh keeps the copy it writes current", "[cpu][autocast]") {
  manual_seed(6);
  Tensor w = testing::rand_values({5, 3}).requires_grad_(true);
  autocast_weights::Registration registration({w});
  const Tensor copy = autocast_weights::cast(w, DType::bf16);
  // What the fused AdamW step does: take the copy, rewrite the parameter (version bumped) and
  // the copy with it, then mark it written.
  const autocast_weights::Refresh refresh = autocast_weights::refresh(w);
  REQUIRE(refresh.data == copy.data_ptr());
  {
    NoGradGuard no_grad;
    mul_(w, 3.0);
    Tensor(copy).detach().copy_(w.to(DType::bf16));
  }
  const uint64_t copy_version = copy.storage()->version();
  refresh.mark_written();
  CHECK(copy.storage()->version() > copy_version);  // graphs that saved the old copy are stale
  const Tensor reused = autocast_weights::cast(w, DType::bf16);
  CHECK(reused.storage() == copy.storage());
  CHECK(reused.to_vector<float>() == w.to(DType::bf16).to_vector<float>());
  // Without a refresh, an update leaves the copy stale; the next refresh drops it.
  {
    NoGradGuard no_grad;
    mul_(w, 0.5);
  }
  CHECK(autocast_weights::refresh(w).data == nullptr);
  CHECK(autocast_weights::cast(w, DType::bf16).storage() != copy.storage());
}

#if GENESIS_WITH_CUDA
TEST_CASE("cuda autocast copies: fused AdamW under bf16 autocast trains bit for bit as without them",
          "[cuda][autocast]") {
  if (!testing::cuda_ready()) return;
  constexpr Device kCuda0{DeviceType::cuda, 0};
  const char* config = R"({"model_type": "llama", "vocab_size": 50, "hidden_size": 32, "intermediate_size": 72,
                          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2})";
  auto run = [&](bool copies) {
    manual_seed(11);
    std::shared_ptr<models::CausalLM> model = models::causal_lm_from_config(config);
    model->to(kCuda0);
    std::vector<NamedTensor> params = model->named_parameters();
    std::unique_ptr<Optimizer> adamw = make_adam({ParamGroup{.params = params, .lr = 1e-2, .base_lr = 1e-2}});
    std::optional<autocast_weights::Registration> registration;
    if (copies) registration.emplace(model->parameters());
    Tensor ids = empty({2, 9}, {.dtype = DType::i64});
    for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 7 + 3) % 50;
    ids = ids.to(kCuda0);
    std::vector<float> values;
    for (int step = 0; step < 4; ++step) {
      adamw->zero_grad(true);
      Tensor loss;
      {
        AutocastGuard autocast(DType::bf16);
        loss = model->loss(ids, ids);
      }
      loss.backward();
      adamw->step();
      values.push_back(loss.to(kCPU).item<float>());
    }
    for (const Tensor& p : model->parameters()) {
      const std::vector<float> v = p.to(kCPU).to_vector<float>();
      values.insert(values.end(), v.begin(), v.end());
    }
    return values;
  };
  CHECK(run(true) == run(false));
}
#endif  // GENESIS_WITH_CUDA
