// CUDA parity of the transformer ops: rope (strided views, misaligned and transposed inputs),
// swiglu, scaled-dot-product attention over odd lengths, grouped-query heads, causal masks with
// a KV-cache offset, explicit scales and transposed / cache-narrowed operands, every floating
// dtype, gradients of every input, determinism; then whole Hugging Face fixture models on cuda:0.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "libgenesis/io/safetensors.h"
#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/caching_allocator.h"
#include "libgenesis/cuda/runtime.h"
#endif
#include "libgenesis/models/hf.h"
#include "libgenesis/ops/transformer.h"
#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;
namespace fs = std::filesystem;

namespace {

// Attention sums kv_len products in another order than the CPU and its exponentials differ by
// an ulp. 16-bit inputs: the CPU rounds only the output, CUDA also stores the probabilities in
// 16 bits (relative error u = 2^-11 for f16, 2^-8 for bf16 on each term of P V), so the output
// may move by about u * max|v| more than one rounding step.
Tolerance attention_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-11, 1e-12};
    case DType::f32:
      return {2e-5, 2e-5};
    case DType::f16:
      return {4e-3, 4e-3};
    default:
      return {2e-2, 2e-2};
  }
}

// Gradients add one more summation (over query rows), the softmax backward's cancellation, and
// for 16-bit inputs the 16-bit score gradients that dQ and dK are products of.
Tolerance attention_grad_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-10, 1e-11};
    case DType::f32:
      return {1e-4, 1e-4};
    case DType::f16:
      return {1e-2, 1e-2};
    default:
      return {5e-2, 5e-2};
  }
}

// Forward outputs, then the gradients of every input, computed twice on cuda:0: the same bits.
void check_deterministic_with_gradients(const Fn& fn, const TensorList& inputs) {
  TensorList first, second;
  for (int run = 0; run < 2; ++run) {
    TensorList leaves;
    for (const Tensor& t : inputs) leaves.push_back(t.detach().to(kCuda0).requires_grad_(true));
    Tensor out = fn(leaves);
    sum(mul(out, full(out.shape(), 0.75, {.dtype = out.dtype(), .device = kCuda0}))).backward();
    TensorList& results = run == 0 ? first : second;
    results.push_back(out.detach());
    for (const Tensor& leaf : leaves) results.push_back(leaf.grad());
  }
  for (size_t i = 0; i < first.size(); ++i) require_close(second[i], first[i], 0.0, 0.0);
}

// ---- rope ----------------------------------------------------------------------------------

struct RopeCase {
  Shape stored;                               // the generated tensor
  std::function<Tensor(const Tensor&)> view;  // the rope input viewed from it
  int64_t seq, dim;
};

const std::vector<RopeCase>& rope_cases() {
  static const std::vector<RopeCase> cases = {
      {{3, 4, 33, 64}, [](const Tensor& t) { return t; }, 33, 64},
      {{1, 4, 1, 8}, [](const Tensor& t) { return t; }, 1, 8},
      // [B, H, T, D] viewed from [B, T, H, D] (the projections' layout): no copy, vector path.
      {{3, 129, 4, 16}, [](const Tensor& t) { return t.transpose(1, 2); }, 129, 16},
      {{1, 7, 6, 64}, [](const Tensor& t) { return t.transpose(1, 2); }, 7, 64},
      // Misaligned rows (scalar path), a 2-D input, a head_dim not a multiple of the vector.
      {{2, 3, 7, 18}, [](const Tensor& t) { return t.narrow(3, 1, 16); }, 7, 16},
      {{33, 8}, [](const Tensor& t) { return t; }, 33, 8},
      {{2, 5, 6}, [](const Tensor& t) { return t; }, 5, 6},
      // Three leading dimensions that do not merge, and head_dim not unit-stride: copied.
      {{2, 7, 3, 2, 16},
       [](const Tensor& t) {
         return t.permute({3, 0, 2, 1, 4});
       },
       7,
       16},
      {{2, 3, 16, 7}, [](const Tensor& t) { return t.transpose(2, 3); }, 7, 16},
  };
  return cases;
}

}  // namespace

GENESIS_CUDA_PARITY("rope") {
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    const Tolerance tolerance = elementwise_tolerance(dtype);
    for (const RopeCase& c : rope_cases()) {
      INFO("stored " << shape_str(c.stored) << ", seq " << c.seq << ", head_dim " << c.dim);
      const RopeTables tables = rope_tables(5, c.seq, c.dim, 10000.0, {.dtype = dtype});
      auto view = c.view;
      check_parity([view](const TensorList& in) { return rope(view(in[0]), in[1], in[2]); },
                   {random_input(c.stored, dtype, -2, 2), tables.cos, tables.sin}, tolerance);
      check_backward_parity(
          [view, tables](const TensorList& in) {
            const Device device = in[0].device();
            return rope(view(in[0]), tables.cos.to(device), tables.sin.to(device));
          },
          {random_input(c.stored, dtype, -2, 2)}, tolerance);
    }
  }
  const RopeTables tables = rope_tables(0, 33, 16, 500.0);
  check_deterministic_with_gradients(
      [tables](const TensorList& in) {
        return rope(in[0].transpose(1, 2), tables.cos.to(kCuda0), tables.sin.to(kCuda0));
      },
      {random_input({3, 33, 4, 16}, DType::f32)});
}

// The tables are computed on the host and copied: the same bits on both devices.
TEST_CASE("cuda rope_tables equal the CPU's bits", "[cuda][transformer]") {
  if (!cuda_ready()) return;
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    const RopeTables host = rope_tables(7, 129, 64, 1e6, {.dtype = dtype});
    const RopeTables device = rope_tables(7, 129, 64, 1e6, {.dtype = dtype, .device = kCuda0});
    REQUIRE(device.cos.device() == kCuda0);
    REQUIRE(device.sin.device() == kCuda0);
    require_close(device.cos, host.cos, 0.0, 0.0);
    require_close(device.sin, host.sin, 0.0, 0.0);
  }
}

// ---- swiglu --------------------------------------------------------------------------------

GENESIS_CUDA_PARITY("swiglu") {
  const Shape shapes[] = {{37, 129}, {1, 1}, {3, 5, 7}, {4, 1024}, {}, {0, 3}};
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    const Tolerance tolerance = elementwise_tolerance(dtype);
    for (const Shape& shape : shapes) {
      INFO("shape " << shape_str(shape));
      const TensorList inputs = {random_input(shape, dtype, -6, 6), random_input(shape, dtype, -2, 2)};
      check_parity([](const TensorList& in) { return swiglu(in[0], in[1]); }, inputs, tolerance);
      check_backward_parity([](const TensorList& in) { return swiglu(in[0], in[1]); }, inputs, tolerance);
    }
    // Transposed operands and a misaligned slice (scalar path).
    const TensorList transposed = {random_input({129, 37}, dtype, -6, 6), random_input({37, 129}, dtype)};
    check_parity([](const TensorList& in) { return swiglu(in[0].t(), in[1]); }, transposed, tolerance);
    check_backward_parity([](const TensorList& in) { return swiglu(in[0].t(), in[1]); }, transposed, tolerance);
    const TensorList sliced = {random_input({5, 67}, dtype, -6, 6), random_input({5, 67}, dtype)};
    auto misaligned = [](const TensorList& in) { return swiglu(in[0].narrow(1, 1, 64), in[1].narrow(1, 3, 64)); };
    check_parity(misaligned, sliced, tolerance);
    check_backward_parity(misaligned, sliced, tolerance);
  }
  check_deterministic_with_gradients([](const TensorList& in) { return swiglu(in[0], in[1]); },
                      {random_input({7, 333}, DType::bf16, -6, 6), random_input({7, 333}, DType::bf16)});
}

// ---- scaled_dot_product_attention ----------------------------------------------------------

namespace {

struct AttentionCase {
  int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim;
  bool causal;
  std::optional<double> scale;
};

// Odd lengths, a single query (decoding with a cache), kv_len > q_len (the cache offset),
// kv_len < q_len without the mask, rows longer than a warp's 1024 columns, groups of 1, 2, 6.
const AttentionCase kAttentionCases[] = {
    {1, 4, 4, 1, 1, 8, true, {}},      {1, 4, 4, 7, 7, 16, true, {}},      {3, 4, 2, 7, 12, 8, true, {}},
    {3, 4, 2, 33, 33, 64, false, {}},  {1, 6, 1, 33, 40, 16, true, 0.3},   {3, 6, 1, 1, 9, 64, true, {}},
    {1, 4, 2, 129, 129, 64, true, {}}, {3, 4, 4, 129, 140, 8, false, 1.7}, {1, 6, 1, 7, 3, 16, false, {}},
    {3, 4, 2, 1, 1, 16, false, {}},    {1, 4, 4, 33, 1100, 16, false, {}}, {3, 6, 1, 129, 129, 8, true, {}},
};

using Layout = std::function<Tensor(const Tensor&)>;

struct AttentionLayout {
  const char* name;
  bool heads_second;   // stored [B, H, L, D]; otherwise [B, L, H, D] transposed into place
  int64_t extra_rows;  // stored with this many more rows, narrowed away (a KV cache's capacity)
};
const AttentionLayout kAttentionLayouts[] = {
    {"contiguous", true, 0}, {"transposed views of [B, T, H, D]", false, 0}, {"narrowed from a cache", true, 5}};

Shape stored_shape(const AttentionLayout& layout, int64_t batch, int64_t heads, int64_t rows, int64_t dim) {
  return layout.heads_second ? Shape{batch, heads, rows + layout.extra_rows, dim}
                             : Shape{batch, rows + layout.extra_rows, heads, dim};
}

Tensor as_heads(const AttentionLayout& layout, const Tensor& stored, int64_t rows) {
  Tensor t = layout.heads_second ? stored : stored.transpose(1, 2);
  return t.narrow(2, 0, rows);
}

Fn attention_fn(const AttentionCase& c, const AttentionLayout& layout) {
  return [c, layout](const TensorList& in) {
    return scaled_dot_product_attention(as_heads(layout, in[0], c.q_len), as_heads(layout, in[1], c.kv_len),
                                        as_heads(layout, in[2], c.kv_len), c.causal, c.scale);
  };
}

TensorList attention_inputs(const AttentionCase& c, const AttentionLayout& layout, DType dtype) {
  return {random_input(stored_shape(layout, c.batch, c.q_heads, c.q_len, c.head_dim), dtype, -2, 2),
          random_input(stored_shape(layout, c.batch, c.kv_heads, c.kv_len, c.head_dim), dtype, -2, 2),
          random_input(stored_shape(layout, c.batch, c.kv_heads, c.kv_len, c.head_dim), dtype)};
}

}  // namespace

GENESIS_CUDA_PARITY("scaled_dot_product_attention") {
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    for (const AttentionCase& c : kAttentionCases) {
      INFO("B " << c.batch << ", Hq " << c.q_heads << ", Hkv " << c.kv_heads << ", T " << c.q_len << ", S " << c.kv_len
                << ", D " << c.head_dim << ", causal " << c.causal << ", scale " << (c.scale ? *c.scale : 0.0));
      for (const AttentionLayout& layout : kAttentionLayouts) {
        INFO("layout: " << layout.name);
        const TensorList inputs = attention_inputs(c, layout, dtype);
        check_parity(attention_fn(c, layout), inputs, attention_tolerance(dtype));
        check_backward_parity(attention_fn(c, layout), inputs, attention_grad_tolerance(dtype));
      }
    }
  }
}

// The flash kernels (f16/bf16, head_dim 32/64/96/128): lengths that cross many 64-row tiles
// and end inside one, the causal offset of kv_len > q_len, groups of 1, 4 and 7 query heads per
// kv head, a single query (decoding), and operands the kernels cannot read through their
// strides (an odd row stride: copied first), against the CPU.
TEST_CASE("cuda flash attention matches the CPU", "[cuda][transformer]") {
  if (!cuda_ready()) return;
  const AttentionCase cases[] = {
      {2, 4, 4, 300, 300, 64, true, {}},  {1, 8, 2, 100, 257, 128, true, {}}, {2, 7, 1, 77, 77, 32, true, 0.2},
      {1, 4, 4, 65, 190, 96, false, {}},  {2, 4, 1, 1, 200, 64, true, {}},    {1, 2, 2, 256, 256, 128, false, {}},
      {1, 12, 12, 129, 129, 64, true, {}},
  };
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (const AttentionCase& c : cases) {
      INFO(dtype_name(dtype) << " B " << c.batch << ", Hq " << c.q_heads << ", Hkv " << c.kv_heads << ", T "
                             << c.q_len << ", S " << c.kv_len << ", D " << c.head_dim << ", causal " << c.causal);
      for (const AttentionLayout& layout : kAttentionLayouts) {
        INFO("layout: " << layout.name);
        const TensorList inputs = attention_inputs(c, layout, dtype);
        check_parity(attention_fn(c, layout), inputs, attention_tolerance(dtype));
        check_backward_parity(attention_fn(c, layout), inputs, attention_grad_tolerance(dtype));
      }
    }
  }
  // Rows of 65 elements (head_dim 64 plus one): not 16-byte aligned, so copied before the kernels.
  const AttentionCase c{1, 4, 4, 70, 70, 64, true, {}};
  auto odd_rows = [c](const TensorList& in) {
    auto heads = [](const Tensor& t) { return t.narrow(3, 0, 64); };
    return scaled_dot_product_attention(heads(in[0]), heads(in[1]), heads(in[2]), c.causal);
  };
  const TensorList padded{random_input({1, 4, 70, 65}, DType::bf16, -2, 2),
                          random_input({1, 4, 70, 65}, DType::bf16, -2, 2), random_input({1, 4, 70, 65}, DType::bf16)};
  check_parity(odd_rows, padded, attention_tolerance(DType::bf16));
  check_backward_parity(odd_rows, padded, attention_grad_tolerance(DType::bf16));
}

// Attention dropout draws, on cuda, the mask the CPU draws from the same generator state: the flash
// kernels (f16/bf16, the mma.sync kernels also on sm_90a) and the composite path (f32, where the
// flash kernels do not apply), forward and gradients, over odd lengths, grouped heads, the
// causal offset and strided operands.
TEST_CASE("cuda attention dropout draws the CPU's mask", "[cuda][transformer]") {
  if (!cuda_ready()) return;
  const AttentionCase cases[] = {
      {2, 4, 4, 77, 77, 64, true, {}},   {1, 8, 2, 100, 157, 128, true, {}}, {2, 6, 3, 33, 70, 32, false, 0.2},
      {1, 4, 1, 1, 90, 96, true, {}},    {1, 2, 2, 130, 130, 64, false, {}},
      // kv_len a multiple of 4: each counter's words shared between lanes
      {2, 4, 4, 96, 96, 64, true, {}},   {1, 6, 2, 50, 132, 128, true, {}},  {1, 4, 4, 200, 200, 32, false, {}},
  };
  for (double p : {0.1, 0.5}) {
    for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
      for (const AttentionCase& c : cases) {
        INFO("p " << p << ", " << dtype_name(dtype) << " B " << c.batch << ", Hq " << c.q_heads << ", Hkv "
                  << c.kv_heads << ", T " << c.q_len << ", S " << c.kv_len << ", D " << c.head_dim);
        for (const AttentionLayout& layout : kAttentionLayouts) {
          INFO("layout: " << layout.name);
          auto fn = [c, layout, p](const TensorList& in) {
            Generator gen(1234);
            return scaled_dot_product_attention(as_heads(layout, in[0], c.q_len), as_heads(layout, in[1], c.kv_len),
                                                as_heads(layout, in[2], c.kv_len), c.causal, c.scale, p, &gen);
          };
          const TensorList inputs = attention_inputs(c, layout, dtype);
          check_parity(fn, inputs, attention_tolerance(dtype));
          check_backward_parity(fn, inputs, attention_grad_tolerance(dtype));
        }
      }
    }
  }
}

// Every kept and dropped entry, through K = V = I (S = D) and grad_out = I: the output is the
// dropped probabilities, dV their transpose and dQ the score gradients, so each kernel's mask is
// compared entry by entry (f16 against f64; a wrong entry moves a value by P / keep_prob, far
// beyond the tolerance).
TEST_CASE("cuda flash attention dropout keeps the CPU's entries", "[cuda][transformer]") {
  if (!cuda_ready()) return;
  for (int64_t d : {64, 128}) {
    for (bool causal : {false, true}) {
      const int64_t steps = causal ? d - 21 : d;  // causal: a KV-cache offset of 21
      INFO("D " << d << ", causal " << causal);
      Tensor identity = eye(d, -1, {.dtype = DType::f64}).reshape({1, 1, d, d}).expand({2, 2, d, d}).contiguous();
      Tensor q = random_input({2, 4, steps, d}, DType::f64, -8, 8);
      Tensor grad_out = eye(steps, d, {.dtype = DType::f64}).reshape({1, 1, steps, d}).expand({2, 4, steps, d});
      auto run = [&](DType dtype, Device device) {
        Tensor qd = q.to(dtype).to(device).detach().requires_grad_(true);
        Tensor kd = identity.to(dtype).to(device).detach().requires_grad_(true);
        Tensor vd = identity.to(dtype).to(device).detach().requires_grad_(true);
        Generator gen(2024);
        Tensor out = scaled_dot_product_attention(qd, kd, vd, causal, std::nullopt, 0.5, &gen);
        out.backward(grad_out.to(dtype).to(device).contiguous());
        return TensorList{out.to(kCPU).to(DType::f64), qd.grad().to(kCPU).to(DType::f64),
                          vd.grad().to(kCPU).to(DType::f64)};
      };
      const TensorList expected = run(DType::f64, kCPU), got = run(DType::f16, kCuda0);
      require_close(got[0], expected[0], 2e-3, 1e-2);  // out = P * mask / keep_prob
      require_close(got[1], expected[1], 2e-3, 1e-2);  // dQ = scale dS
      require_close(got[2], expected[2], 2e-3, 1e-2);  // dV = (P * mask / keep_prob)^T
      // About half of the visible probabilities are dropped.
      Tensor reference = scaled_dot_product_attention(q, identity, identity, causal);
      const double seen = sum(gt(reference, 0.0).to(DType::f64)).item();
      const double zeros = sum(mul(gt(reference, 0.0).to(DType::f64), eq(got[0], 0.0).to(DType::f64))).item();
      CHECK(std::abs(zeros - 0.5 * seen) < 5.0 * std::sqrt(seen * 0.25));
    }
  }
}

#if GENESIS_WITH_CUDA
// No [T, T] matrix: the forward and backward of 4096 tokens allocate about what the inputs,
// the output, the gradients and the per-row statistics take (a materialized bf16 [1, 4, 4096,
// 4096] would add 128 MiB).
TEST_CASE("cuda flash attention keeps no attention matrix", "[cuda][transformer]") {
  if (!cuda_ready()) return;
  const int64_t heads = 4, steps = 4096, dim = 64;
  Tensor q = random_input({1, heads, steps, dim}, DType::bf16).to(kCuda0).requires_grad_(true);
  Tensor k = random_input({1, heads, steps, dim}, DType::bf16).to(kCuda0).requires_grad_(true);
  Tensor v = random_input({1, heads, steps, dim}, DType::bf16).to(kCuda0).requires_grad_(true);
  cuda::synchronize();
  const size_t before = cuda::memory_stats(0).allocated;
  cuda::reset_peak_stats(0);
  Tensor out = scaled_dot_product_attention(q, k, v, true);
  sum(out.to(DType::f32)).backward();
  cuda::synchronize();
  const size_t operand = static_cast<size_t>(heads * steps * dim) * 2;
  CHECK(cuda::memory_stats(0).peak_allocated - before < 12 * operand);
  CHECK(std::isfinite(sum(q.grad().to(DType::f32)).item()));
}
#endif

// GPT-2's layout: q, k and v are head views of one [B, T, 3 * H * D] projection.
TEST_CASE("cuda attention reads q, k, v as views of one projection", "[cuda][transformer]") {
  if (!cuda_ready()) return;
  const int64_t batch = 3, steps = 33, heads = 4, dim = 16, width = heads * dim;
  auto split_heads = [=](const TensorList& in) {
    auto part = [&](int64_t i) {
      return in[0].narrow(2, i * width, width).reshape({batch, steps, heads, dim}).transpose(1, 2);
    };
    return scaled_dot_product_attention(part(0), part(1), part(2), true);
  };
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    const TensorList inputs = {random_input({batch, steps, 3 * width}, dtype, -2, 2)};
    check_parity(split_heads, inputs, attention_tolerance(dtype));
    check_backward_parity(split_heads, inputs, attention_grad_tolerance(dtype));
  }
}

TEST_CASE("cuda attention is deterministic", "[cuda][transformer]") {
  if (!cuda_ready()) return;
  for (DType dtype : {DType::f32, DType::bf16}) {
    const AttentionCase c{3, 6, 2, 33, 40, 16, true, {}};
    for (const AttentionLayout& layout : kAttentionLayouts) {
      INFO("dtype " << dtype_name(dtype) << ", layout: " << layout.name);
      check_deterministic_with_gradients(attention_fn(c, layout), attention_inputs(c, layout, dtype));
    }
  }
}

TEST_CASE("cuda attention refuses mixed devices", "[cuda][transformer]") {
  if (!cuda_ready()) return;
  Tensor q = random_input({1, 2, 3, 4}, DType::f32).to(kCuda0), k = random_input({1, 2, 3, 4}, DType::f32);
  CHECK_THROWS_AS(scaled_dot_product_attention(q, k, k), DeviceError);
  CHECK_THROWS_AS(swiglu(q, q.to(kCPU)), DeviceError);
  const RopeTables tables = rope_tables(0, 3, 4, 100.0);
  CHECK_THROWS_AS(rope(q, tables.cos, tables.sin), DeviceError);
}

// ---- whole models --------------------------------------------------------------------------

namespace {

fs::path fixture_dir(const std::string& name) {
  for (const char* root :
       std::initializer_list<const char*>{std::getenv("GENESIS_SOURCE_DIR"), GENESIS_SOURCE_DIR, "."}) {
    if (root && fs::exists(fs::path(root) / "tests/fixtures" / name / "reference.safetensors"))
      return fs::path(root) / "tests/fixtures" / name;
  }
  return {};
}

// Logits, parameter gradients of the loss, and greedy generation with the KV cache of the model
// of tests/fixtures/<name> on cuda:0 against the same model on the CPU.
void check_model_on_cuda(const std::string& name) {
  const fs::path dir = fixture_dir(name);
  if (dir.empty()) {
    WARN("skipped: tests/fixtures/" << name << " does not exist");
    return;
  }
  const io::SafetensorsFile reference(dir / "reference.safetensors");
  Tensor ids = reference.load("input_ids", DType::i64);
  auto on_cpu = models::load_hf_model(dir);
  auto on_gpu = models::load_hf_model(dir, {.device = kCuda0});
  Tensor cpu_logits = on_cpu->forward(ids), gpu_logits = on_gpu->forward(ids.to(kCuda0));
  REQUIRE(gpu_logits.device() == kCuda0);
  require_close(gpu_logits, cpu_logits, 1e-4, 1e-4);
  models::causal_lm_loss(cpu_logits, ids).backward();
  models::causal_lm_loss(gpu_logits, ids.to(kCuda0)).backward();
  const auto cpu_params = on_cpu->named_parameters(), gpu_params = on_gpu->named_parameters();
  REQUIRE(cpu_params.size() == gpu_params.size());
  auto check_gradients = [&](const char* loss_name) {
    for (size_t i = 0; i < cpu_params.size(); ++i) {
      INFO(name << ": gradient of " << cpu_params[i].name << " (" << loss_name << ")");
      const Tensor expected = cpu_params[i].tensor.grad().to(DType::f64);
      const Tensor actual = gpu_params[i].tensor.grad().to(kCPU).to(DType::f64);
      const double scale = std::max(max(abs(expected)).item(), 1e-12);
      CHECK(max(abs(sub(actual, expected))).item() / scale <= 1e-4);
    }
  };
  check_gradients("causal_lm_loss of the logits");
  // The fused head's loss (training's path), next-token targets.
  for (const auto* model : {&on_cpu, &on_gpu})
    for (Tensor& p : (*model)->parameters()) p.set_grad(Tensor());
  const int64_t steps = ids.size(1) - 1;
  Tensor inputs = ids.narrow(1, 0, steps).contiguous(), targets = ids.narrow(1, 1, steps).contiguous();
  Tensor cpu_loss = on_cpu->loss(inputs, targets), gpu_loss = on_gpu->loss(inputs.to(kCuda0), targets.to(kCuda0));
  require_close(gpu_loss.to(kCPU), cpu_loss, 1e-5, 1e-5);
  cpu_loss.backward();
  gpu_loss.backward();
  check_gradients("CausalLM::loss");
  Tensor prompt = reference.load("prompt_ids", DType::i64);
  const int64_t new_tokens = reference.load("generated_ids", DType::i64).size(1);
  CHECK(models::greedy_generate(*on_gpu, prompt.to(kCuda0), new_tokens).to_vector<int64_t>() ==
        models::greedy_generate(*on_cpu, prompt, new_tokens).to_vector<int64_t>());
}

}  // namespace

TEST_CASE("fixture language models on cuda match the CPU", "[cuda][models]") {
  if (!cuda_ready()) return;
  for (const char* name : {"gpt2", "llama", "qwen2", "qwen3"}) {
    INFO("model " << name);
    check_model_on_cuda(name);
  }
}
