// Packed sequences on CUDA against the CPU: attention with doc_start through the flash kernels
// (bf16/f16, head_dim 64 and 128; on sm_90a the wgmma kernels, where they apply) and through
// the GEMM path (f32, and 16-bit inputs of a head_dim the flash kernels do not take), forward
// and gradients, over rows that end inside a tile and documents that cross tiles or fill one
// token; then rope by per-row positions. Outputs come from poisoned memory (cuda_testing.h).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "libgenesis/ops/transformer.h"
#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

// i32 [rows, T]: each position's document start, the documents of row r of the given lengths.
Tensor starts_of(const std::vector<std::vector<int64_t>>& lengths_per_row) {
  std::vector<int32_t> starts;
  for (const std::vector<int64_t>& lengths : lengths_per_row) {
    int64_t position = 0;
    for (const int64_t length : lengths) {
      for (int64_t i = 0; i < length; ++i) starts.push_back(static_cast<int32_t>(position));
      position += length;
    }
  }
  const auto rows = static_cast<int64_t>(lengths_per_row.size());
  return from_vector(starts, {rows, static_cast<int64_t>(starts.size()) / rows});
}

// Documents of lengths 1 to 11 repeated up to `total` tokens (the last one cut short).
std::vector<int64_t> short_documents(int64_t total, int64_t first) {
  std::vector<int64_t> lengths;
  for (int64_t used = 0, n = first; used < total; n = n % 11 + 1) {
    lengths.push_back(std::min(n, total - used));
    used += lengths.back();
  }
  return lengths;
}

struct PackedCase {
  std::vector<std::vector<int64_t>> documents;  // per row; each row sums to T
  int64_t q_heads, kv_heads;
};

// T = 300 (not a multiple of any tile): documents crossing tiles and of one token, another row's
// in the other order; a single document (plain causal); many short documents (most key tiles
// skipped); groups of 2 and 1 query heads per kv head.
std::vector<PackedCase> packed_cases() {
  return {{{{7, 130, 1, 162}, {162, 1, 130, 7}}, 4, 2},
          {{{300}, {1, 299}}, 2, 2},
          {{short_documents(300, 1), short_documents(300, 6)}, 4, 2},
          {{{64, 64, 1, 171}, {63, 65, 128, 44}}, 2, 1}};
}

// Like tests/test_cuda_transformer.cpp's attention tolerances: 16-bit CUDA also rounds the
// probabilities (and the gradients' dS) to 16 bits.
Tolerance packed_tolerance(DType dtype, bool gradients) {
  if (dtype == DType::f32) return gradients ? Tolerance{1e-4, 1e-4} : Tolerance{2e-5, 2e-5};
  if (dtype == DType::f16) return gradients ? Tolerance{1e-2, 1e-2} : Tolerance{4e-3, 4e-3};
  return gradients ? Tolerance{5e-2, 5e-2} : Tolerance{2e-2, 2e-2};
}

// Every packed case at this dtype and head_dim: q, k, v [B, H, T, D] as views of [B, T, H, D]
// projections (the models' layout), doc_start on the inputs' device.
void check_packed_parity(DType dtype, int64_t head_dim) {
  for (const PackedCase& c : packed_cases()) {
    INFO(dtype_name(dtype) << ", head_dim " << head_dim << ", Hq " << c.q_heads << ", Hkv " << c.kv_heads
                           << ", first row's documents " << c.documents[0].size());
    const Tensor starts = starts_of(c.documents);
    const int64_t batch = starts.size(0), len = starts.size(1);
    const Fn attention = [starts](const TensorList& in) {
      auto heads = [](const Tensor& t) { return t.transpose(1, 2); };
      return scaled_dot_product_attention(heads(in[0]), heads(in[1]), heads(in[2]), true, std::nullopt, 0.0, nullptr,
                                          starts.to(in[0].device()));
    };
    const TensorList inputs{random_input({batch, len, c.q_heads, head_dim}, dtype, -2, 2),
                            random_input({batch, len, c.kv_heads, head_dim}, dtype, -2, 2),
                            random_input({batch, len, c.kv_heads, head_dim}, dtype)};
    check_parity(attention, inputs, packed_tolerance(dtype, false));
    check_backward_parity(attention, inputs, packed_tolerance(dtype, true));
  }
}

}  // namespace

TEST_CASE("cuda packed attention matches the CPU on the flash kernels", "[cuda][transformer]") {
  if (!cuda_ready()) return;
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (int64_t head_dim : {64, 128}) check_packed_parity(dtype, head_dim);
  }
}

TEST_CASE("cuda packed attention matches the CPU on the GEMM path", "[cuda][transformer]") {
  if (!cuda_ready()) return;
  // f32 takes the GEMMs at every head_dim; 16-bit inputs do at a head_dim the flash kernels lack.
  check_packed_parity(DType::f32, 64);
  check_packed_parity(DType::bf16, 48);
  check_packed_parity(DType::f16, 16);
}

TEST_CASE("cuda packed attention refuses dropout", "[cuda][transformer]") {
  if (!cuda_ready()) return;
  const Tensor q = random_input({1, 2, 8, 64}, DType::bf16).to(kCuda0);
  const Tensor starts = starts_of({{3, 5}}).to(kCuda0);
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, q, q, true, std::nullopt, 0.1, nullptr, starts),
                    Catch::Contains("dropout with doc_start is not supported"));
}

TEST_CASE("cuda rope by positions matches the CPU", "[cuda][transformer]") {
  if (!cuda_ready()) return;
  const Tensor starts = starts_of({{7, 130, 1, 162}, short_documents(300, 4)});
  const Tensor positions = sub(arange(300, {.dtype = DType::i32}).unsqueeze(0), starts);
  for (DType dtype : kFloatDTypes) {
    for (int64_t head_dim : {16, 64, 128}) {
      INFO(dtype_name(dtype) << ", head_dim " << head_dim);
      const RopeTables tables = rope_tables(0, 300, head_dim, 10000.0, {.dtype = dtype});
      const RopeTables gathered = gather_rope_tables(tables, positions);
      // [B, H, T, D] viewed from [B, T, H, D], a contiguous [B, H, T, D], and [B, T, D].
      const std::vector<std::pair<Shape, std::function<Tensor(const Tensor&)>>> layouts = {
          {{2, 300, 3, head_dim}, [](const Tensor& t) { return t.transpose(1, 2); }},
          {{2, 3, 300, head_dim}, [](const Tensor& t) { return t; }},
          {{2, 300, head_dim}, [](const Tensor& t) { return t; }}};
      for (const auto& [stored, view] : layouts) {
        INFO("stored " << shape_str(stored));
        check_parity([view](const TensorList& in) { return rope(view(in[0]), in[1], in[2]); },
                     {random_input(stored, dtype, -2, 2), gathered.cos, gathered.sin}, elementwise_tolerance(dtype));
        check_backward_parity(
            [view, gathered](const TensorList& in) {
              const Device device = in[0].device();
              return rope(view(in[0]), gathered.cos.to(device), gathered.sin.to(device));
            },
            {random_input(stored, dtype, -2, 2)}, elementwise_tolerance(dtype));
      }
    }
  }
  // The tables gathered on cuda (index_select there) are the CPU's.
  const RopeTables tables = rope_tables(0, 300, 64, 10000.0);
  const RopeTables on_cuda = gather_rope_tables({tables.cos.to(kCuda0), tables.sin.to(kCuda0)}, positions.to(kCuda0));
  const RopeTables on_cpu = gather_rope_tables(tables, positions);
  require_close(on_cuda.cos.to(kCPU), on_cpu.cos, 0.0, 0.0);
  require_close(on_cuda.sin.to(kCPU), on_cpu.sin, 0.0, 0.0);
}
