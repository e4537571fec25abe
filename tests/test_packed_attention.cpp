// Packed sequences on the CPU: attention with doc_start equals each document run alone (outputs
// and gradients of q, k, v), rope by per-row positions equals rope of each document from
// position 0, and the argument checks.
#include <cstdint>
#include <vector>

#include "libgenesis/ops/transformer.h"
#include "tests/testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

// Two rows of 17 tokens packing documents of odd lengths in different orders.
const std::vector<std::vector<int64_t>> kDocuments = {{5, 1, 9, 2}, {2, 9, 1, 5}};
constexpr int64_t kLen = 17, kQueryHeads = 4, kKvHeads = 2, kHeadDim = 16;

// The first position of each token's document, i32 [rows, sum of lengths].
Tensor doc_starts(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int32_t> starts;
  for (const auto& lengths : rows) {
    int32_t start = 0;
    for (const int64_t length : lengths) {
      starts.insert(starts.end(), static_cast<size_t>(length), start);
      start += static_cast<int32_t>(length);
    }
  }
  const auto columns = static_cast<int64_t>(starts.size() / rows.size());
  return from_vector(starts, {static_cast<int64_t>(rows.size()), columns});
}

Tensor packed_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_start) {
  return scaled_dot_product_attention(q, k, v, true, std::nullopt, 0.0, nullptr, doc_start);
}

// Leaves of f64 or f32 q [2, 4, 17, 16] and k, v [2, 2, 17, 16].
TensorList attention_leaves(DType dtype) {
  return {rand_values({2, kQueryHeads, kLen, kHeadDim}, dtype, -2, 2).requires_grad_(true),
          rand_values({2, kKvHeads, kLen, kHeadDim}, dtype, -2, 2).requires_grad_(true),
          rand_values({2, kKvHeads, kLen, kHeadDim}, dtype).requires_grad_(true)};
}

// The packed call and each document alone from fresh leaves: outputs and gradients of
// sum(out * weight) agree on every document's rows.
void check_documents_alone(DType dtype, double tolerance) {
  const TensorList leaves = attention_leaves(dtype);
  Tensor out = packed_attention(leaves[0], leaves[1], leaves[2], doc_starts(kDocuments));
  const Tensor weight = rand_values(out.shape(), dtype, 0.5, 1.5);
  sum(mul(out, weight)).backward();
  for (int64_t b = 0; b < 2; ++b) {
    int64_t start = 0;
    for (const int64_t length : kDocuments[static_cast<size_t>(b)]) {
      INFO("row " << b << ", document [" << start << ", " << start + length << ")");
      auto part = [&](const Tensor& t) { return t.narrow(0, b, 1).narrow(2, start, length); };
      TensorList alone;
      for (const Tensor& leaf : leaves) alone.push_back(part(leaf).detach().clone().requires_grad_(true));
      Tensor expected = scaled_dot_product_attention(alone[0], alone[1], alone[2], true);
      sum(mul(expected, part(weight))).backward();
      require_close(part(out), expected, tolerance, tolerance);
      for (size_t i = 0; i < leaves.size(); ++i) {
        INFO("gradient of input " << i);
        require_close(part(leaves[i].grad()), alone[i].grad(), tolerance, tolerance);
      }
      start += length;
    }
  }
}

}  // namespace

TEST_CASE("packed attention equals each document alone", "[cpu][transformer]") {
  check_documents_alone(DType::f64, 1e-12);
  check_documents_alone(DType::f32, 1e-6);
}

TEST_CASE("packed attention of one document per row is causal attention", "[cpu][transformer]") {
  const TensorList leaves = attention_leaves(DType::f32);
  const Tensor zeros = doc_starts({{kLen}, {kLen}});
  require_close(packed_attention(leaves[0], leaves[1], leaves[2], zeros),
                scaled_dot_product_attention(leaves[0], leaves[1], leaves[2], true), 0.0, 0.0);
}

TEST_CASE("packed attention reads strided q, k and v", "[cpu][transformer]") {
  // [B, H, T, D] views of [B, T, H, D] projections, and k, v narrowed from longer head dims.
  const Tensor q = rand_values({2, kLen, kQueryHeads, kHeadDim}, DType::f64, -2, 2).transpose(1, 2);
  const Tensor k =
      rand_values({2, kLen, kKvHeads, kHeadDim + 3}, DType::f64, -2, 2).transpose(1, 2).narrow(3, 1, kHeadDim);
  const Tensor v = rand_values({2, kKvHeads, kLen, 2 * kHeadDim}, DType::f64).narrow(3, kHeadDim, kHeadDim);
  const Tensor starts = doc_starts(kDocuments);
  require_close(packed_attention(q, k, v, starts),
                packed_attention(q.contiguous(), k.contiguous(), v.contiguous(), starts), 1e-14, 1e-14);
  // doc_start itself as a strided view (every other element of a wider tensor).
  const Tensor strided = stack({starts, starts}, 2).select(2, 1);
  require_close(packed_attention(q, k, v, strided), packed_attention(q, k, v, starts), 0.0, 0.0);
}

TEST_CASE("gradcheck packed attention", "[cpu][gradcheck]") {
  const Tensor starts = doc_starts({{3, 1, 4}, {8}});
  gradcheck([starts](const TensorList& x) { return packed_attention(x[0], x[1], x[2], starts); },
            {rand_leaf({2, 4, 8, 4}), rand_leaf({2, 2, 8, 4}), rand_leaf({2, 2, 8, 4})});
}

TEST_CASE("packed attention refuses what it cannot do", "[cpu][transformer]") {
  const TensorList x = attention_leaves(DType::f32);
  const Tensor starts = doc_starts(kDocuments);
  const Tensor &q = x[0], &k = x[1], &v = x[2];
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, false, std::nullopt, 0.0, nullptr, starts),
                    Catch::Contains("needs causal attention"));
  CHECK_THROWS_AS(packed_attention(q, k, v, starts.narrow(1, 0, kLen - 1)), ShapeError);
  CHECK_THROWS_AS(packed_attention(q, k, v, starts.narrow(0, 0, 1)), ShapeError);
  CHECK_THROWS_AS(packed_attention(q, k, v, starts.to(DType::i64)), DTypeError);
  // A KV cache: more keys than queries.
  const Tensor longer = rand_values({2, kKvHeads, kLen + 3, kHeadDim}, DType::f32);
  CHECK_THROWS_WITH(packed_attention(q, longer, longer, starts), Catch::Contains("no KV cache"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, true, std::nullopt, 0.1, nullptr, starts),
                    Catch::Contains("dropout with doc_start is not supported"));
  // Values that are not document starts: past the position, decreasing, negative.
  auto with_value = [&](int64_t t, int32_t value) {
    std::vector<int32_t> values = starts.to_vector<int32_t>();
    values[static_cast<size_t>(t)] = value;
    return from_vector(values, starts.shape());
  };
  CHECK_THROWS_WITH(packed_attention(q, k, v, with_value(3, 4)), Catch::Contains("is not a document start"));
  CHECK_THROWS_WITH(packed_attention(q, k, v, with_value(7, 5)), Catch::Contains("doc_start[0, 7] = 5"));
  CHECK_THROWS_AS(packed_attention(q, k, v, with_value(0, -1)), ValueError);
}

TEST_CASE("rope by positions equals rope of each document from position 0", "[cpu][transformer]") {
  const Tensor starts = doc_starts(kDocuments);
  const Tensor positions = sub(arange(kLen, {.dtype = DType::i32}).unsqueeze(0), starts);
  const RopeTables tables = rope_tables(0, kLen, kHeadDim, 10000.0, {.dtype = DType::f64});
  const RopeTables gathered = gather_rope_tables(tables, positions);
  REQUIRE(gathered.cos.shape() == Shape({2, kLen, kHeadDim / 2}));
  // x [B, H, T, D] as the view of a [B, T, H, D] projection, a leaf for the gradients.
  const Tensor stored = rand_values({2, kLen, 3, kHeadDim}, DType::f64, -2, 2).requires_grad_(true);
  const Tensor y = rope(stored.transpose(1, 2), gathered.cos, gathered.sin);
  const Tensor weight = rand_values(y.shape(), DType::f64, 0.5, 1.5);
  sum(mul(y, weight)).backward();
  for (int64_t b = 0; b < 2; ++b) {
    int64_t start = 0;
    for (const int64_t length : kDocuments[static_cast<size_t>(b)]) {
      INFO("row " << b << ", document [" << start << ", " << start + length << ")");
      const RopeTables own = rope_tables(0, length, kHeadDim, 10000.0, {.dtype = DType::f64});
      const Tensor x = stored.narrow(0, b, 1).narrow(1, start, length).detach().clone().requires_grad_(true);
      const Tensor expected = rope(x.transpose(1, 2), own.cos, own.sin);
      sum(mul(expected, weight.narrow(0, b, 1).narrow(2, start, length))).backward();
      require_close(y.narrow(0, b, 1).narrow(2, start, length), expected, 1e-14, 1e-14);
      require_close(stored.grad().narrow(0, b, 1).narrow(1, start, length), x.grad(), 1e-14, 1e-14);
      start += length;
    }
  }
  // f32 tables meet a bf16 input as shared tables do; a 3-D input [B, T, D]; wrong batch.
  const RopeTables f32 = gather_rope_tables(rope_tables(0, kLen, kHeadDim, 10000.0), positions);
  require_close(rope(y.detach().to(DType::bf16), f32.cos, f32.sin).to(DType::f64),
                rope(y.detach(), gathered.cos, gathered.sin), 5e-2, 5e-2);
  const Tensor flat = rand_values({2, kLen, kHeadDim}, DType::f64);
  require_close(rope(flat, gathered.cos, gathered.sin), rope(flat.unsqueeze(1), gathered.cos, gathered.sin).squeeze(1),
                0.0, 0.0);
  CHECK_THROWS_AS(rope(rand_values({3, 2, kLen, kHeadDim}, DType::f64), gathered.cos, gathered.sin), ShapeError);
  CHECK_THROWS_AS(rope(rand_values({kLen, kHeadDim}, DType::f64), gathered.cos, gathered.sin), ShapeError);
}
