// NF4 on CUDA against the CPU, bit for bit: quantize_nf4's codes, absmax codes, scales and
// offset, and dequantize_nf4 in every output dtype, over odd sizes, partial blocks and several
// scale groups, with outputs poisoned twice (0xFF by the allocator, 0x00 through the kernel
// launcher) so that an unwritten byte fails either way; codes at a misaligned address (the
// element-by-element path); nf4_linear and its gradients. Skipped without a GPU.
#include <cstring>
#include <vector>

#include "tests/cuda_testing.h"

#if GENESIS_WITH_CUDA
#include "kernels/cuda/nf4.h"
#include "libgenesis/cuda/caching_allocator.h"
#include "libgenesis/cuda/runtime.h"
#endif

using namespace genesis;
using namespace genesis::testing;

namespace {

std::vector<uint8_t> raw_bytes(const Tensor& t) {
  const Tensor host = t.to(kCPU).contiguous();
  std::vector<uint8_t> out(static_cast<size_t>(host.numel()) * host.element_size());
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size());
  return out;
}

#if GENESIS_WITH_CUDA
// The same bits in every part.
void require_same(const Nf4Weight& gpu, const Nf4Weight& cpu) {
  REQUIRE(gpu.device() == kCuda0);
  REQUIRE(gpu.shape == cpu.shape);
  CHECK(raw_bytes(gpu.codes) == raw_bytes(cpu.codes));
  CHECK(raw_bytes(gpu.absmax_codes) == raw_bytes(cpu.absmax_codes));
  CHECK(raw_bytes(gpu.absmax_scale) == raw_bytes(cpu.absmax_scale));
  CHECK(std::memcmp(&gpu.absmax_offset, &cpu.absmax_offset, sizeof(float)) == 0);
}
#endif

// Odd counts, a single element, partial last blocks, several 256-block scale groups.
const Shape kShapes[] = {{37, 129}, {1, 1}, {3, 5}, {64, 64}, {300, 257}, {1024, 4099}};

Tensor normal_weight(const Shape& shape, DType dtype, uint64_t seed) {
  Generator gen(seed);
  Tensor w = randn(shape, {}, &gen);
  // An all-zero block, outliers of both signs.
  if (w.numel() > 256) {
    std::vector<float> v = w.to_vector<float>();
    for (size_t i = 64; i < 128; ++i) v[i] = 0.0f;
    v[130] = 3000.0f;
    v[200] = -3000.0f;
    w = from_vector(v, shape);
  }
  return w.to(dtype);
}

}  // namespace

TEST_CASE("CUDA quantize_nf4 and dequantize_nf4 give the CPU's bits", "[cuda][nf4]") {
  if (!cuda_ready()) return;
#if GENESIS_WITH_CUDA
  cuda::set_poison_allocations(true, 0);
  for (const Shape& shape : kShapes) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      INFO("shape " << shape_str(shape) << ", weight dtype " << dtype_name(dtype));
      const Tensor w = normal_weight(shape, dtype, 7);
      const Nf4Weight cpu = quantize_nf4(w);
      const Nf4Weight gpu = quantize_nf4(w.to(kCuda0));
      require_same(gpu, cpu);
      for (DType out : {DType::f32, DType::bf16, DType::f16}) {
        INFO("dequantized to " << dtype_name(out));
        const Tensor got = dequantize_nf4(gpu, out);
        REQUIRE(got.device() == kCuda0);
        CHECK(raw_bytes(got) == raw_bytes(dequantize_nf4(cpu, out)));
        // From the CPU's weight moved over, too.
        CHECK(raw_bytes(dequantize_nf4(cpu.to(kCuda0), out)) == raw_bytes(dequantize_nf4(cpu, out)));
      }
      CHECK(raw_bytes(nf4_absmax(gpu)) == raw_bytes(nf4_absmax(cpu)));
    }
  }
  cuda::set_poison_allocations(false, 0);
#endif
}

TEST_CASE("CUDA NF4 kernels write every byte (outputs zeroed first)", "[cuda][nf4]") {
  if (!cuda_ready()) return;
#if GENESIS_WITH_CUDA
  for (const Shape& shape : kShapes) {
    INFO("shape " << shape_str(shape));
    const Tensor w = normal_weight(shape, DType::bf16, 9);
    const Nf4Weight cpu = quantize_nf4(w);
    const int64_t n = w.numel(), blocks = (n + 63) / 64, groups = (blocks + 255) / 256;
    const TensorOptions bytes{.dtype = DType::boolean, .device = kCuda0};
    Nf4Weight gpu = cpu;
    gpu.codes = zeros({(n + 1) / 2}, bytes);
    gpu.absmax_codes = zeros({blocks}, bytes);
    gpu.absmax_scale = full({groups}, NAN, {.device = kCuda0});
    const Tensor offset = full({1}, NAN, {.device = kCuda0});
    const Tensor absmax = empty({blocks}, {.device = kCuda0});
    const Tensor partial = empty({groups}, {.dtype = DType::f64, .device = kCuda0});
    const Tensor x = w.to(kCuda0);
    kernels::cuda::nf4_quantize(DType::bf16, n, x.data_ptr(), static_cast<uint8_t*>(gpu.codes.data_ptr()),
                                static_cast<uint8_t*>(gpu.absmax_codes.data_ptr()), gpu.absmax_scale.data<float>(),
                                offset.data<float>(), absmax.data<float>(), partial.data<double>(),
                                cuda::current_stream());
    gpu.absmax_offset = offset.item<float>();
    require_same(gpu, cpu);
    const Tensor out = zeros(shape, {.dtype = DType::bf16, .device = kCuda0});
    kernels::cuda::nf4_dequantize(DType::bf16, n, static_cast<const uint8_t*>(gpu.codes.data_ptr()),
                                  static_cast<const uint8_t*>(gpu.absmax_codes.data_ptr()),
                                  gpu.absmax_scale.data<float>(), gpu.absmax_offset, out.data_ptr(),
                                  cuda::current_stream());
    CHECK(raw_bytes(out) == raw_bytes(dequantize_nf4(cpu, DType::bf16)));
  }
#endif
}

TEST_CASE("CUDA dequantize_nf4 reads codes at a misaligned address", "[cuda][nf4]") {
  if (!cuda_ready()) return;
  const Nf4Weight cpu = quantize_nf4(normal_weight({33, 100}, DType::f32, 3));
  // The codes one byte into a buffer: a contiguous view whose address is not 16-byte aligned.
  const int64_t code_bytes = cpu.codes.numel();
  Tensor padded = empty({code_bytes + 1}, {.dtype = DType::boolean});
  std::memcpy(static_cast<char*>(padded.data_ptr()) + 1, cpu.codes.data_ptr(), static_cast<size_t>(code_bytes));
  Nf4Weight gpu = cpu.to(kCuda0);
  gpu.codes = padded.to(kCuda0).narrow(0, 1, code_bytes);
  for (DType out : {DType::f32, DType::bf16, DType::f16})
    CHECK(raw_bytes(dequantize_nf4(gpu, out)) == raw_bytes(dequantize_nf4(cpu, out)));
}

TEST_CASE("CUDA nf4_linear matches the CPU, forward and gradients", "[cuda][nf4]") {
  if (!cuda_ready()) return;
  Generator gen(13);
  const Nf4Weight cpu = quantize_nf4(randn({96, 130}, {}, &gen));
  const Nf4Weight gpu = cpu.to(kCuda0);
  const Fn fn = [&](const TensorList& in) { return nf4_linear(in[0], in[0].device().is_cpu() ? cpu : gpu, in[1]); };
  const TensorList inputs = {randn({4, 7, 130}, {}, &gen), randn({96}, {}, &gen)};
  check_parity(fn, inputs, {1e-4, 1e-4});
  check_backward_parity(fn, inputs, {1e-4, 1e-4});
  const TensorList half_inputs = {inputs[0].to(DType::bf16), inputs[1].to(DType::bf16)};
  check_parity(fn, half_inputs, {2e-2, 2e-2});
  check_backward_parity(fn, half_inputs, {2e-2, 2e-2});
}

TEST_CASE("CUDA quantize_nf4 refuses a NaN weight", "[cuda][nf4]") {
  if (!cuda_ready()) return;
  CHECK_THROWS_AS(quantize_nf4(tensor({1.0, NAN, 3.0, 4.0}, {2, 2}).to(kCuda0)), ValueError);
}
