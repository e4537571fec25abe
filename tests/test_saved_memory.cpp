// What the autograd graph keeps alive: each op saves only what its backward reads, split's
// backward writes one buffer, and .grad storage persists across zero_grad().
#include "libgenesis/models/gpt2.h"
#include "libgenesis/optim/optimizer.h"
#include "tests/testing.h"

using namespace genesis;

namespace {

// The storages `t`'s node noted as saved (empty for a leaf).
std::vector<const Storage*> saved_storages(const Tensor& t) {
  std::vector<const Storage*> out;
  const auto* node = dynamic_cast<const FunctionNode*>(t.grad_fn().get());
  if (node == nullptr) return out;
  for (const FunctionNode::SavedVersion& s : node->saved_versions) out.push_back(s.storage.lock().get());
  return out;
}

bool saves(const Tensor& out, const Tensor& t) {
  for (const Storage* s : saved_storages(out))
    if (s == t.storage().get()) return true;
  return false;
}

}  // namespace

TEST_CASE("add and sub keep no tensor, mul, div and linear keep only what their backward reads", "[cpu][autograd]") {
  Tensor a = ones({4, 3}, {.requires_grad = true});
  Tensor b = ones({3}, {.requires_grad = true});
  for (const Tensor& out : {add(a, b), sub(a, b), add(a, 2.0), sub(1.0, a), a.t(), a.reshape({12}), a.slice(0, 1, 3),
                            a.to(DType::f64), a.clone()}) {
    CHECK(saved_storages(out).empty());
    CHECK(saved_storage_bytes(out) == 0);
  }
  Tensor product = mul(a, b);
  CHECK(saved_storages(product).size() == 2);
  CHECK(!saves(product, product));
  // An operand is kept only for the other's gradient.
  Tensor constant = full({3}, 2.0);
  Tensor scaled = mul(a, constant);
  CHECK(saves(scaled, constant));
  CHECK(!saves(scaled, a));
  // div keeps its divisor, and its output only when the divisor needs a gradient.
  Tensor q = div(a, b);
  CHECK(saves(q, b));
  CHECK(saves(q, q));
  CHECK(!saves(q, a));
  Tensor q_const = div(a, constant);
  CHECK(saved_storages(q_const).size() == 1);
  // linear keeps its input and weight, never its output; a frozen weight frees the input.
  Tensor w = ones({5, 3}, {.requires_grad = true});
  Tensor y = linear(a, w, zeros({5}, {.requires_grad = true}));
  CHECK(saves(y, a));
  CHECK(saves(y, w));
  CHECK(!saves(y, y));
  Tensor frozen = linear(a, ones({5, 3}));
  CHECK(saved_storages(frozen).size() == 1);
  CHECK(!saves(frozen, a));
  // Activations keep their input only.
  Tensor g = gelu(a);
  CHECK(saved_storages(g).size() == 1);
  CHECK(saves(g, a));
}

TEST_CASE("split and chunk backward write one gradient buffer", "[cpu][autograd]") {
  Tensor x = ones({2, 6}, {.dtype = DType::f64, .requires_grad = true});
  std::vector<Tensor> pieces = split(x, std::vector<int64_t>{1, 2, 3}, 1);
  REQUIRE(pieces.size() == 3);
  // One node for every piece, so the engine adds no input-sized buffers.
  CHECK(pieces[0].grad_fn() == pieces[2].grad_fn());
  CHECK(saved_storage_bytes(pieces[0]) == 0);
  // The middle piece gets no gradient: zeros there.
  add(sum(mul(pieces[0], 2.0)), sum(pieces[2])).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 0, 0, 1, 1, 1, 2, 0, 0, 1, 1, 1});

  Tensor z = arange(0, 6, 1, {.dtype = DType::f64}).reshape({3, 2});
  z.requires_grad_(true);
  std::vector<Tensor> rows = chunk(z, 3, 0);
  sum(mul(cat({rows[2], rows[0]}, 0), 3.0)).backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{3, 3, 0, 0, 3, 3});
}

TEST_CASE("zero_grad zeroes .grad in place, backward accumulates into the same storage", "[cpu][optim][autograd]") {
  Tensor p = full({4}, 0.5, {.requires_grad = true});
  ParamGroup group{.params = {{"p", p}}, .lr = 0.1, .base_lr = 0.1};
  auto optimizer = make_sgd({group});
  sum(mul(p, 2.0)).backward();
  REQUIRE(p.grad().defined());
  const void* storage = p.grad().data_ptr();
  for (int step = 0; step < 3; ++step) {
    optimizer->step();
    optimizer->zero_grad();
    REQUIRE(p.grad().defined());
    CHECK(p.grad().data_ptr() == storage);
    CHECK(p.grad().to_vector<float>() == std::vector<float>{0, 0, 0, 0});
    sum(mul(p, 2.0)).backward();
    CHECK(p.grad().data_ptr() == storage);
    CHECK(p.grad().to_vector<float>() == std::vector<float>{2, 2, 2, 2});
  }
  optimizer->zero_grad(/*set_to_none=*/true);
  CHECK(!p.grad().defined());
}

TEST_CASE("a 16-bit gradient accumulates into an f32 .grad of its own", "[cpu][autograd]") {
  Tensor p = ones({3}, {.requires_grad = true});
  p.register_hook([](const Tensor& g) { return g.to(DType::bf16); });
  sum(mul(p, 3.0)).backward();
  REQUIRE(p.grad().dtype() == DType::f32);
  const void* storage = p.grad().data_ptr();
  sum(mul(p, 3.0)).backward();
  CHECK(p.grad().data_ptr() == storage);
  CHECK(p.grad().to_vector<float>() == std::vector<float>{6, 6, 6});
}

TEST_CASE("a GPT-2 block's graph keeps only the tensors its backward reads", "[cpu][autograd]") {
  constexpr int64_t B = 2, T = 8, C = 32, H = 4, V = 64;
  models::Gpt2Config config{.vocab_size = V, .n_positions = 16, .n_embd = C, .n_layer = 1, .n_head = H};
  models::Gpt2LM model(config);
  Tensor ids = from_vector(std::vector<int64_t>(B * T, 3), {B, T});
  Tensor targets = from_vector(std::vector<int64_t>(B * T, 5), {B * T});
  Tensor loss = cross_entropy(model(ids).reshape({B * T, V}), targets);
  const size_t measured = saved_storage_bytes(loss, model.parameters());

  // f32 activations (4 bytes), i64 indices (8 bytes); BT = 16 rows of C = 32 features.
  constexpr size_t f32 = 4, i64 = 8, rows = B * T, activation = rows * C * f32;  // 2048
  const size_t budget = rows * i64 + T * i64      // token ids (wte) and positions (wpe) for the embeddings' backward
                        + 3 * 2 * rows * f32      // mean and rstd of ln_1, ln_2, ln_f
                        + 10 * activation         // the inputs of ln_1, c_attn, ln_2, c_fc, ln_f and the head;
                                                  // q, k, v (contiguous copies) and the input of attn.c_proj
                        + B * H * T * T * f32     // attention probabilities
                        + 2 * rows * 4 * C * f32  // c_fc's pre-activation (GELU's derivative) and mlp.c_proj's input
                        + rows * V * f32 + rows * i64 + rows * f32;  // cross-entropy: logits, targets, log-sum-exp
  // = 128 + 64 + 384 + 20480 + 2048 + 16384 + 4096 + 128 + 64 = 43776 bytes. Nothing else: the
  // residual adds, the qkv split and the reshapes keep nothing, so the qkv projection [B, T, 3C],
  // the embeddings' outputs and the projections' outputs are freed after the forward (saving
  // add's operands and output, as before, kept 7168 bytes more).
  INFO("saved bytes: " << measured << ", budget " << budget);
  CHECK(budget == 43776);
  CHECK(measured <= budget);
  CHECK(measured >= budget - 2 * activation);  // the walk sees the graph (not a vacuous bound)

  loss.backward();
  CHECK(saved_storage_bytes(loss) == 0);  // backward frees what it saved
  for (const Tensor& p : model.parameters()) CHECK(p.grad().defined());
}
