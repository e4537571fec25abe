// NF4 with double-quantized statistics (libgenesis/ops/quant.h) on the CPU: codes against a
// brute-force reference built from the paper's table, the absmax's 8-bit statistics, the exact
// reconstruction, the error on a normal weight, nf4_linear and its gradients, the memory a
// weight takes, and the errors.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/common/nf4_format.h"
#include "tests/testing.h"

using namespace genesis;
using Catch::Matchers::Contains;

namespace {

// QLoRA's NF4 levels (Dettmers et al. 2023, the paper's appendix), written out again for the reference.
constexpr double kPaperLevels[16] = {-1.0,
                                     -0.6961928009986877,
                                     -0.5250730514526367,
                                     -0.39491748809814453,
                                     -0.28444138169288635,
                                     -0.18477343022823334,
                                     -0.09105003625154495,
                                     0.0,
                                     0.07958029955625534,
                                     0.16093020141124725,
                                     0.24611230194568634,
                                     0.33791524171829224,
                                     0.44070982933044434,
                                     0.5626170039176941,
                                     0.7229568362236023,
                                     1.0};

// Half the largest gap between neighbours of the dynamic map (its top decade steps by 0.9/64),
// plus the f32 roundings: how far a decoded absmax may be from the exact one, in units of its
// 256-block's scale.
constexpr double kAbsmaxTolerance = 0.00704;

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor host = t.to(kCPU);
  std::vector<uint8_t> out(static_cast<size_t>(host.numel()));
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size());
  return out;
}

// The element scaled by its block's absmax as bitsandbytes scales it: x * (1 / absmax).
float normalized(float x, float absmax) {
  if (absmax == 0.0f) return 0.0f;
  const float inverse = 1.0f / absmax;
  return std::isinf(inverse) ? x / absmax : x * inverse;
}

// The nearest of `count` ascending values by brute force; a tie keeps the first (lower) one.
int nearest(double r, const double* values, int count) {
  int best = 0;
  for (int k = 1; k < count; ++k)
    if (std::fabs(r - values[k]) < std::fabs(r - values[best])) best = k;
  return best;
}

struct Reference {
  std::vector<uint8_t> codes;  // packed as the format says: even element in the high nibble
  std::vector<float> absmax;   // exact, per 64-block
};

Reference reference_quantize(const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  Reference ref;
  std::vector<int> code(x.size() + 1, 7);  // an odd count's missing partner is the level 0
  for (int64_t first = 0; first < n; first += 64) {
    float m = 0.0f;
    for (int64_t i = first; i < std::min(n, first + 64); ++i) m = std::max(m, std::fabs(x[static_cast<size_t>(i)]));
    ref.absmax.push_back(m);
    for (int64_t i = first; i < std::min(n, first + 64); ++i)
      code[static_cast<size_t>(i)] = nearest(normalized(x[static_cast<size_t>(i)], m), kPaperLevels, 16);
  }
  for (size_t i = 0; i < x.size(); i += 2) ref.codes.push_back(static_cast<uint8_t>(code[i] << 4 | code[i + 1]));
  return ref;
}

double dynamic_map(int code) {
  return kernels::nf4::make_tables().map[code];
}

// A normal weight of `shape` with the cases the format must get right planted in it: an
// all-zero block, outliers of both signs (30000: finite in f16 too; the largest floats have a
// test of their own), exact ties between levels, a block of subnormals (its absmax's reciprocal
// overflows), a block whose largest magnitude is negative.
Tensor planted_weight(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  std::vector<float> w = randn(shape, {}, &gen).to_vector<float>();
  const size_t n = w.size();
  auto set = [&](size_t i, float v) {
    if (i < n) w[i] = v;
  };
  for (size_t i = 64; i < 128; ++i) set(i, 0.0f);
  set(130, 30000.0f);
  set(200, -30000.0f);
  // Block 4 has absmax exactly 1: halfway between levels 7 and 8 (an exact float) ties to 7.
  set(256, 1.0f);
  set(257, static_cast<float>(kPaperLevels[8] / 2));
  set(258, std::nextafter(static_cast<float>(kPaperLevels[8] / 2), 1.0f));
  set(259, -1.0f);
  for (size_t i = 320; i < 384; ++i) set(i, w[i] * 1e-40f);
  set(400, -9.0f);
  return from_vector(w, shape);
}

// quantize_nf4 of `w` against the reference: codes, scales, offset and absmax codes exactly,
// the decoded absmax within kAbsmaxTolerance, and dequantize equal to level * decoded absmax.
void check_against_reference(const Tensor& w) {
  const std::vector<float> x = w.to_vector<float>();
  const Nf4Weight q = quantize_nf4(w);
  const Reference ref = reference_quantize(x);
  REQUIRE(q.shape == w.shape());
  REQUIRE(bytes_of(q.codes) == ref.codes);

  double sum = 0.0;
  for (float a : ref.absmax) sum += a;
  CHECK(q.absmax_offset == Approx(sum / static_cast<double>(ref.absmax.size())).epsilon(1e-6));
  const std::vector<float> scale = q.absmax_scale.to_vector<float>();
  const std::vector<uint8_t> absmax_codes = bytes_of(q.absmax_codes);
  const std::vector<float> decoded = nf4_absmax(q).to_vector<float>();
  REQUIRE(scale.size() == (ref.absmax.size() + 255) / 256);
  double map[256];
  for (int k = 0; k < 256; ++k) map[k] = dynamic_map(k);
  for (size_t g = 0; g < scale.size(); ++g) {
    float group_max = 0.0f;
    for (size_t b = g * 256; b < std::min(ref.absmax.size(), g * 256 + 256); ++b)
      group_max = std::max(group_max, std::fabs(ref.absmax[b] - q.absmax_offset));
    CHECK(scale[g] == group_max);
  }
  for (size_t b = 0; b < ref.absmax.size(); ++b) {
    INFO("block " << b << " of " << ref.absmax.size());
    const float s = scale[b / 256];
    CHECK(absmax_codes[b] == nearest(normalized(ref.absmax[b] - q.absmax_offset, s), map, 256));
    const volatile float product = static_cast<float>(map[absmax_codes[b]]) * s;
    CHECK(decoded[b] == product + q.absmax_offset);
    CHECK(std::fabs(decoded[b] - ref.absmax[b]) <= kAbsmaxTolerance * s + 1e-6 * ref.absmax[b]);
  }

  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    INFO("dequantized to " << dtype_name(dtype));
    std::vector<float> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const int code = i % 2 == 0 ? ref.codes[i / 2] >> 4 : ref.codes[i / 2] & 0x0F;
      want[i] = static_cast<float>(kPaperLevels[code]) * decoded[i / 64];
    }
    const Tensor got = dequantize_nf4(q, dtype);
    REQUIRE(got.shape() == w.shape());
    REQUIRE(got.dtype() == dtype);
    testing::require_close(got, from_vector(want, w.shape()).to(dtype), 0.0, 0.0);
  }
}

}  // namespace

TEST_CASE("quantize_nf4 gives the reference's codes, statistics and reconstruction", "[cpu][nf4]") {
  // Odd counts with a partial last block, several 256-block scale groups, one element.
  for (const Shape& shape : {Shape{37, 129}, Shape{1, 1}, Shape{3, 5}, Shape{300, 257}, Shape{8, 64}}) {
    INFO("shape " << shape_str(shape));
    const Tensor w = planted_weight(shape, 17);
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      INFO("weight dtype " << dtype_name(dtype));
      check_against_reference(w.to(dtype));
    }
  }
}

TEST_CASE("NF4 codes: packing, zero blocks, extremes and ties", "[cpu][nf4]") {
  // Elements 0..3 in block 0 (absmax 1): 1 -> 15, -1 -> 0, 0 -> 7, the tie 0.0398 -> 7.
  const float tie = static_cast<float>(kPaperLevels[8] / 2);
  const Nf4Weight q = quantize_nf4(tensor({1.0, -1.0, 0.0, tie, -0.6961928009986877}, {1, 5}));
  CHECK(bytes_of(q.codes) == std::vector<uint8_t>{0xF0, 0x77, 0x17});
  // An all-zero weight: code 7 everywhere, zeros back, no NaN.
  const Nf4Weight zero = quantize_nf4(zeros({3, 43}));
  for (uint8_t byte : bytes_of(zero.codes)) CHECK(byte == 0x77);
  CHECK(zero.absmax_offset == 0.0f);
  for (float v : dequantize_nf4(zero, DType::f32).to_vector<float>()) CHECK(v == 0.0f);
  // The largest floats of both signs come back as themselves.
  const float big = std::numeric_limits<float>::max();
  const std::vector<float> back =
      dequantize_nf4(quantize_nf4(tensor({big, -big, 0.0}, {1, 3})), DType::f32).to_vector<float>();
  CHECK(back == std::vector<float>{big, -big, 0.0f});
}

TEST_CASE("NF4 round trip of a normal weight: relative RMS error about 0.1", "[cpu][nf4]") {
  Generator gen(5);
  const Tensor w = randn({1024, 1024}, {}, &gen);
  const Tensor back = dequantize_nf4(quantize_nf4(w), DType::f32);
  const Tensor diff = sub(back, w);
  const double err = std::sqrt(sum(mul(diff, diff)).item() / sum(mul(w, w)).item());
  INFO("relative RMS error " << err);
  // 0.0920 with this seed: 4-bit levels spread over [-absmax, absmax] of 64 normal values.
  CHECK(err > 0.085);
  CHECK(err < 0.1);
}

TEST_CASE("An NF4 [4096, 4096] weight takes 0.5159 bytes an element", "[cpu][nf4]") {
  const Nf4Weight q = quantize_nf4(zeros({4096, 4096}, {.dtype = DType::bf16}));
  // 4 bits, 8 bits per 64 elements, an f32 scale per 16384, the offset: 4.127 bits.
  CHECK(q.bytes() == 4096 * 4096 / 2 + 4096 * 4096 / 64 + 4 * (4096 * 4096 / 16384) + 4);
  const double per_element = static_cast<double>(q.bytes()) / (4096.0 * 4096.0);
  CHECK(per_element == Approx(0.5159).margin(1e-4));
  CHECK(per_element < 0.5160);
}

TEST_CASE("nf4_linear is linear on the dequantized weight, with input and bias gradients only", "[cpu][nf4]") {
  Generator gen(11);
  const Nf4Weight q = quantize_nf4(randn({29, 67}, {}, &gen));
  const Tensor bias = randn({29}, {}, &gen);
  for (DType dtype : {DType::f32, DType::bf16}) {
    INFO("input dtype " << dtype_name(dtype));
    const Tensor x0 = randn({3, 5, 67}, {.dtype = dtype}, &gen);
    const Tensor w = dequantize_nf4(q, DType::bf16);
    Tensor x1 = x0.clone().requires_grad_(true), b1 = bias.clone().requires_grad_(true);
    Tensor x2 = x0.clone().requires_grad_(true), b2 = bias.clone().requires_grad_(true);
    const Tensor y1 = nf4_linear(x1, q, b1);
    const Tensor y2 = linear(x2, w, b2);
    REQUIRE(y1.dtype() == y2.dtype());
    testing::require_close(y1, y2, 0.0, 0.0);
    const Tensor r = randn(y1.shape(), {.dtype = y1.dtype()}, &gen);
    sum(mul(y1, r)).backward();
    sum(mul(y2, r)).backward();
    const double tol = dtype == DType::f32 ? 1e-5 : 1e-2;
    testing::require_close(x1.grad(), x2.grad(), tol, tol);
    testing::require_close(b1.grad(), b2.grad(), tol, tol);
    CHECK(x1.grad().dtype() == dtype);
  }
  // The quantized parts never take part in autograd; the graph's node has x and the bias only.
  Tensor x = randn({4, 67}, {}, &gen).requires_grad_(true);
  const Tensor y = nf4_linear(x, q);
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->next_edges.size() == 2);
  sum(y).backward();
  CHECK(x.grad().defined());
  for (const Tensor& part : {q.codes, q.absmax_codes, q.absmax_scale}) {
    CHECK_FALSE(part.requires_grad());
    CHECK_FALSE(part.grad().defined());
  }
}

TEST_CASE("gradcheck nf4_linear (input and bias)", "[cpu][nf4][gradcheck]") {
  Generator gen(3);
  const Nf4Weight q = quantize_nf4(randn({6, 9}, {}, &gen), DType::f32);
  testing::gradcheck([&q](const TensorList& in) { return nf4_linear(in[0], q, in[1]); },
                     {testing::rand_leaf({2, 3, 9}), testing::rand_leaf({6})});
  testing::gradcheck([&q](const TensorList& in) { return nf4_linear(in[0], q); }, {testing::rand_leaf({9})});
}

TEST_CASE("NF4 weights move between devices and handle empty shapes", "[cpu][nf4]") {
  const Nf4Weight q = quantize_nf4(randn({3, 7}));
  const Nf4Weight same = q.to(kCPU);
  CHECK(bytes_of(same.codes) == bytes_of(q.codes));
  const Nf4Weight empty_weight = quantize_nf4(zeros({0, 5}));
  CHECK(empty_weight.bytes() == 4);
  CHECK(dequantize_nf4(empty_weight, DType::bf16).shape() == Shape{0, 5});
}

TEST_CASE("NF4 errors name the limit", "[cpu][nf4]") {
  CHECK_THROWS_AS(quantize_nf4(zeros({2, 3, 4})), ShapeError);
  CHECK_THROWS_WITH(quantize_nf4(zeros({2, 3, 4})), Contains("NF4 quantizes 2-D weights [out, in]"));
  CHECK_THROWS_AS(quantize_nf4(zeros({2, 3}, {.dtype = DType::i64})), DTypeError);
  CHECK_THROWS_WITH(quantize_nf4(zeros({2, 3}, {.dtype = DType::f64})), Contains("f32, bf16 or f16"));
  CHECK_THROWS_AS(quantize_nf4(zeros({2, 3}), DType::i32), DTypeError);
  CHECK_THROWS_WITH(quantize_nf4(tensor({1.0, NAN, 2.0}, {1, 3})), Contains("NaN or infinite element"));
  CHECK_THROWS_AS(quantize_nf4(tensor({1.0, INFINITY}, {2, 1})), ValueError);

  const Nf4Weight q = quantize_nf4(randn({4, 6}));
  CHECK_THROWS_AS(dequantize_nf4(q, DType::f64), DTypeError);
  CHECK_THROWS_WITH(nf4_linear(randn({2, 5}), q), Contains("must end in the weight's 6 input features"));
  Nf4Weight broken = q;
  broken.codes = broken.codes.narrow(0, 0, 11);
  CHECK_THROWS_WITH(dequantize_nf4(broken, DType::f32), Contains("codes must be 12 contiguous bytes"));
  broken = q;
  broken.shape = {24};
  CHECK_THROWS_AS(dequantize_nf4(broken, DType::f32), ShapeError);
}
