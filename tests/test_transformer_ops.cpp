// rope, swiglu and scaled_dot_product_attention against unfused formulas, plus gradient checks.
#include <cmath>

#include "libgenesis/ops/transformer.h"
#include "tests/testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

// softmax(q k^T * scale + mask) v with K/V heads repeated, from unfused ops.
Tensor reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const int64_t group = q.size(1) / k.size(1), t_len = q.size(2), s_len = k.size(2);
  std::vector<Tensor> k_heads, v_heads;
  for (int64_t h = 0; h < q.size(1); ++h) {
    k_heads.push_back(k.narrow(1, h / group, 1));
    v_heads.push_back(v.narrow(1, h / group, 1));
  }
  Tensor kr = cat(k_heads, 1), vr = cat(v_heads, 1);
  Tensor scores = matmul(q, kr.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(q.size(3))));
  if (causal) {
    Tensor above = triu(ones({t_len, s_len}), s_len - t_len + 1).to(DType::boolean);
    scores = masked_fill(scores, above, -INFINITY);
  }
  return matmul(softmax(scores, -1), vr);
}

}  // namespace

TEST_CASE("rope matches the float64 rotate-half formula", "[cpu][transformer]") {
  const int64_t seq = 5, dim = 8, start = 3;
  const double theta = 10000.0;
  Tensor x = rand_values({2, 3, seq, dim}, DType::f64);
  RopeTables tables = rope_tables(start, seq, dim, theta, {.dtype = DType::f64});
  Tensor y = rope(x, tables.cos, tables.sin);
  std::vector<double> xs = x.to_vector<double>(), expected(xs.size());
  for (size_t row = 0; row < xs.size() / dim; ++row) {
    const int64_t t = static_cast<int64_t>(row) % seq;
    for (int64_t i = 0; i < dim / 2; ++i) {
      const double angle = static_cast<double>(start + t) * std::pow(theta, -2.0 * static_cast<double>(i) / dim);
      const double x1 = xs[row * dim + i], x2 = xs[row * dim + i + dim / 2];
      expected[row * dim + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
      expected[row * dim + i + dim / 2] = x2 * std::cos(angle) + x1 * std::sin(angle);
    }
  }
  require_close(y, from_vector(expected, x.shape(), {.dtype = DType::f64}), 1e-12, 1e-12);
  RopeTables f32 = rope_tables(start, seq, dim, theta);
  require_close(rope(x.to(DType::f32), f32.cos, f32.sin), y, 1e-5, 1e-5);
  require_close(rope(x.to(DType::bf16), f32.cos.to(DType::bf16), f32.sin.to(DType::bf16)), y, 2e-2, 2e-2);
  CHECK_THROWS_AS(rope(x, tables.cos.narrow(0, 0, 4), tables.sin), ShapeError);
  // Tables of another dtype follow the input's (cast inside the op, as Hugging Face does).
  require_close(rope(x, f32.cos, f32.sin), y, 1e-6, 1e-6);
  CHECK_THROWS_AS(rope(x, f32.cos.to(DType::i64), f32.sin), DTypeError);
  CHECK_THROWS_AS(rope(rand_values({4, 3}, DType::f64), tables.cos, tables.sin), ShapeError);
  CHECK_THROWS_AS(rope_tables(0, 4, 7, theta), ValueError);
}

GENESIS_GRADCHECK("rope") {
  Tensor x = rand_leaf({2, 2, 5, 6});
  RopeTables tables = rope_tables(2, 5, 6, 100.0, {.dtype = DType::f64});
  gradcheck([&](const TensorList& in) { return rope(in[0], tables.cos, tables.sin); }, {x});
  Tensor xt = rand_leaf({2, 6, 5});
  gradcheck([&](const TensorList& in) { return rope(in[0].transpose(1, 2), tables.cos, tables.sin); }, {xt});
}

TEST_CASE("swiglu equals silu(gate) * up", "[cpu][transformer]") {
  Tensor gate = rand_values({3, 7}, DType::f32, -4, 4), up = rand_values({3, 7});
  require_close(swiglu(gate, up), mul(silu(gate), up), 1e-6, 1e-6);
  require_close(swiglu(gate.to(DType::bf16), up.to(DType::bf16)), mul(silu(gate), up), 2e-2, 2e-2);
  CHECK_THROWS_AS(swiglu(gate, up.narrow(1, 0, 6)), ShapeError);
  CHECK_THROWS_AS(swiglu(gate, up.to(DType::f64)), DTypeError);
}

GENESIS_GRADCHECK("swiglu") {
  Tensor gate = rand_leaf({4, 5}, -3, 3), up = rand_leaf({4, 5});
  gradcheck([](const TensorList& in) { return swiglu(in[0], in[1]); }, {gate, up});
  gradcheck([](const TensorList& in) { return swiglu(in[0].t(), in[1].t()); }, {gate, up});
}

TEST_CASE("attention with grouped KV heads equals attention with repeated K/V", "[cpu][transformer]") {
  for (bool causal : {false, true}) {
    Tensor q = rand_values({2, 6, 5, 4}, DType::f64, -2, 2);
    Tensor k = rand_values({2, 2, 7, 4}, DType::f64, -2, 2), v = rand_values({2, 2, 7, 4}, DType::f64);
    require_close(scaled_dot_product_attention(q, k, v, causal), reference_attention(q, k, v, causal), 1e-12, 1e-12);
    require_close(scaled_dot_product_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), causal),
                  reference_attention(q, k, v, causal), 1e-5, 1e-5);
  }
  Tensor q = rand_values({1, 2, 3, 4}), k = rand_values({1, 1, 3, 4});
  Tensor halved = scaled_dot_product_attention(q, k, k, true, 0.5);
  require_close(halved, scaled_dot_product_attention(q * (0.5 * 2.0), k, k, true), 1e-6, 1e-6);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, rand_values({1, 3, 3, 4}), rand_values({1, 3, 3, 4})), ShapeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k.narrow(2, 0, 2), k.narrow(2, 0, 2), true), ShapeError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, k.to(DType::f64)), DTypeError);
}

TEST_CASE("causal attention: a later key does not change earlier outputs", "[cpu][transformer]") {
  Tensor q = rand_values({1, 2, 6, 4}), k = rand_values({1, 2, 6, 4}), v = rand_values({1, 2, 6, 4});
  Tensor changed_v = v.clone();
  changed_v.narrow(2, 5, 1).fill_(9.0);
  Tensor a = scaled_dot_product_attention(q, k, v), b = scaled_dot_product_attention(q, k, changed_v);
  require_close(a.narrow(2, 0, 5), b.narrow(2, 0, 5), 0, 0);
  CHECK_FALSE(allclose(a.narrow(2, 5, 1), b.narrow(2, 5, 1)));
}

// Attention dropout draws dropout()'s mask for the contiguous probabilities: with V the identity
// (S = D) the output is the dropped probabilities themselves, so the reference is the same
// generator state's dropout of softmax(q k^T * scale).
TEST_CASE("attention dropout drops dropout()'s entries of the probabilities", "[cpu][transformer]") {
  const int64_t heads = 3, steps = 24;
  Tensor q = rand_values({2, heads, steps, steps}, DType::f64, -1, 1), k = rand_values({2, 1, steps, steps}, DType::f64);
  Tensor v = eye(steps, -1, {.dtype = DType::f64}).reshape({1, 1, steps, steps}).expand({2, 1, steps, steps});
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    Generator gen(41), reference_gen(41);
    Tensor dropped = scaled_dot_product_attention(q, k, v, causal, std::nullopt, 0.25, &gen);
    Tensor expected = dropout(reference_attention(q, k, v, causal), 0.25, true, &reference_gen);
    require_close(dropped, expected, 1e-12, 1e-12);
    CHECK(gen.state() == reference_gen.state());  // ceil(B Hq T S / 4) counters
    CHECK(gen.state().offset == static_cast<uint64_t>(2 * heads * steps * steps / 4));
    // About a quarter of the visible probabilities are dropped (5 standard deviations).
    Tensor visible = gt(reference_attention(q, k, v, causal), 0.0).to(DType::f64);
    const double seen = sum(visible).item();
    const double zeros = sum(mul(visible, eq(dropped, 0.0).to(DType::f64))).item();
    CHECK(std::abs(zeros - 0.25 * seen) < 5.0 * std::sqrt(seen * 0.25 * 0.75));
    // The next call draws a different mask.
    CHECK_FALSE(allclose(scaled_dot_product_attention(q, k, v, causal, std::nullopt, 0.25, &gen), dropped));
  }
  // f32 the same way; p = 0 is plain attention and p outside [0, 1) is refused.
  Generator gen(5), reference_gen(5);
  require_close(scaled_dot_product_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), true,
                                             std::nullopt, 0.5, &gen),
                dropout(reference_attention(q, k, v, true), 0.5, true, &reference_gen), 1e-5, 1e-5);
  require_close(scaled_dot_product_attention(q, k, v, true, std::nullopt, 0.0), reference_attention(q, k, v, true),
                1e-12, 1e-12);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, v, true, std::nullopt, 1.0), ValueError);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, v, true, std::nullopt, -0.1), ValueError);
}

GENESIS_GRADCHECK("scaled_dot_product_attention") {
  Tensor q = rand_leaf({1, 4, 3, 4}), k = rand_leaf({1, 2, 5, 4}), v = rand_leaf({1, 2, 5, 4});
  gradcheck([](const TensorList& in) { return scaled_dot_product_attention(in[0], in[1], in[2], true); }, {q, k, v});
  gradcheck([](const TensorList& in) { return scaled_dot_product_attention(in[0], in[1], in[2], false, 0.7); },
            {q, k, v});
  // With dropout: each evaluation draws from a fresh generator of one seed, so the same mask.
  for (bool causal : {false, true}) {
    gradcheck(
        [causal](const TensorList& in) {
          Generator gen(7);
          return scaled_dot_product_attention(in[0], in[1], in[2], causal, std::nullopt, 0.3, &gen);
        },
        {q, k, v});
  }
  Tensor qt = rand_leaf({1, 2, 4, 3}), kt = rand_leaf({1, 2, 4, 3});
  gradcheck(
      [](const TensorList& in) {
        return scaled_dot_product_attention(in[0].transpose(2, 3), in[1].transpose(2, 3), in[1].transpose(2, 3));
      },
      {qt, kt});
}
