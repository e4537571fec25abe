// Core: dtypes and half-precision rounding, shapes, views that alias, factories, RNG, print.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "libgenesis/core/allocator.h"
#include "libgenesis/core/printable.h"
#include "tests/testing.h"

using namespace genesis;

TEST_CASE("f16 and bf16 round to nearest even", "[cpu][core]") {
  // 1 + 2^-11 is halfway between two f16 values: ties to even (1.0).
  CHECK(float(float16(1.0f + std::ldexp(1.0f, -11))) == 1.0f);
  // 1 + 3 * 2^-11 is halfway: ties to even (1 + 2^-9).
  CHECK(float(float16(1.0f + 3 * std::ldexp(1.0f, -11))) == 1.0f + std::ldexp(1.0f, -9));
  CHECK(float(float16(65504.0f)) == 65504.0f);
  CHECK(std::isinf(float(float16(65520.0f))));
  CHECK(float(float16(std::ldexp(1.0f, -24))) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(float(float16(std::ldexp(1.0f, -26))) == 0.0f);
  CHECK(std::isnan(float(float16(NAN))));
  CHECK(float(bfloat16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);  // tie to even
  CHECK(float(bfloat16(1.0f + 3 * std::ldexp(1.0f, -8))) == 1.0f + std::ldexp(1.0f, -6));
  CHECK(std::isnan(float(bfloat16(NAN))));
  // Every f16 bit pattern survives a round trip through float.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float16 h = float16::from_bits(static_cast<uint16_t>(b));
    float f = h;
    if (std::isnan(f)) continue;
    REQUIRE(float16(f).bits == h.bits);
  }
}

TEST_CASE("dense f32 casts to f16 and bf16 give the scalar conversion's bits", "[cpu][core]") {
  // The dense loops are vector code (F16C on AVX2 CPUs): ties, subnormals, overflow to inf,
  // infinities and NaN payloads must come out as float16(float) / bfloat16(float) give them.
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u,
                                0x7F800001u, 0x7FA00000u, 0x477FF000u, 0x477FEFFFu, 0x38800000u, 0x387FFFFFu,
                                0x33000000u, 0x33000001u, 0x00000001u, 0x3F801000u, 0x3F803000u, 0x3F808000u};
  uint64_t state = 0x9E3779B97F4A7C15ull;
  while (bits.size() < 4099) {  // odd-sized: the vector loop and its scalar tail
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    bits.push_back(static_cast<uint32_t>(state >> 32));
  }
  std::vector<float> values(bits.size());
  std::memcpy(values.data(), bits.data(), bits.size() * sizeof(float));
  Tensor x = from_vector(values, {static_cast<int64_t>(values.size())});
  std::vector<float16> h = x.to(DType::f16).to_vector<float16>();
  std::vector<bfloat16> b = x.to(DType::bf16).to_vector<bfloat16>();
  for (size_t i = 0; i < values.size(); ++i) {
    INFO("f32 bits 0x" << std::hex << bits[i]);
    REQUIRE(h[i].bits == float16(values[i]).bits);
    REQUIRE(b[i].bits == bfloat16(values[i]).bits);
  }
}

TEST_CASE("host blocks: 64-byte aligned, 2 MiB aligned from 2 MiB on, large ones reused", "[cpu][core]") {
  Allocator& host = allocator_for(Device{});
  for (size_t bytes : {size_t{1}, size_t{100}, size_t{1} << 20, (size_t{2} << 20) - 64, size_t{2} << 20,
                       (size_t{5} << 20) + 12345}) {
    INFO("bytes " << bytes);
    auto* p = static_cast<unsigned char*>(host.allocate(bytes));
    REQUIRE(p != nullptr);
    const auto address = reinterpret_cast<uintptr_t>(p);
    CHECK(address % 64 == 0);
    if (bytes >= (size_t{2} << 20)) CHECK(address % (size_t{2} << 20) == 0);
    std::memset(p, 0xA5, bytes);  // every byte is writable
    CHECK(p[bytes - 1] == 0xA5);
    host.deallocate(p, bytes);
    if (bytes >= (size_t{1} << 20)) {
      void* again = host.allocate(bytes);  // the cached block of that size class
      CHECK(again == p);
      host.deallocate(again, bytes);
    }
  }
}

TEST_CASE("host blocks of 2 MiB and more are advised to huge pages", "[cpu][core]") {
  // The kernel marks an advised range "hg" in its VmFlags; without transparent huge pages
  // (no sysfs entry) or with the advice turned off there is nothing to check.
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled") || std::getenv("GENESIS_CPU_HUGEPAGES")) return;
  Allocator& host = allocator_for(Device{});
  const size_t bytes = size_t{6} << 20;
  void* p = host.allocate(bytes);
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line, flags;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long begin = 0, end = 0;  // a mapping's header line: "begin-end perms offset dev inode path"
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2) {
      inside = begin <= address && address < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      flags = line;
      break;
    }
  }
  host.deallocate(p, bytes);
  INFO(flags);
  CHECK(flags.find(" hg") != std::string::npos);
}

TEST_CASE("dtype promotion and casts", "[cpu][core]") {
  CHECK(promote_types(DType::i32, DType::f16) == DType::f16);
  CHECK(promote_types(DType::f16, DType::bf16) == DType::f32);
  CHECK(promote_types(DType::i32, DType::i64) == DType::i64);
  CHECK(promote_types(DType::boolean, DType::i32) == DType::i32);
  CHECK(promote_types(DType::f32, DType::f64) == DType::f64);
  Tensor x = tensor({-1.7, -0.5, 0.0, 0.5, 2.5, 3.9});
  CHECK(x.to(DType::i32).to_vector<int32_t>() == std::vector<int32_t>{-1, 0, 0, 0, 2, 3});  // truncation
  CHECK(x.to(DType::boolean).to_vector<bool>() == std::vector<bool>{true, true, false, true, true, true});
  Tensor h = tensor({1.0 / 3.0}).to(DType::bf16);
  CHECK(h.item() == double(float(bfloat16(1.0f / 3.0f))));
  CHECK(parse_dtype("bfloat16") == DType::bf16);
  CHECK(!parse_dtype("f8").has_value());
}

TEST_CASE("a cast keeps the layout of a permuted contiguous tensor", "[cpu][core]") {
  Tensor w = arange(0, 24, 1, {.dtype = DType::f32}).reshape({2, 3, 4});
  Tensor t = w.permute({2, 0, 1}).requires_grad_(false);
  Tensor cast = t.to(DType::f64);
  CHECK(cast.strides() == t.strides());
  CHECK(cast.to_vector<double>() == t.to(DType::f64).contiguous().to_vector<double>());
  CHECK(cast.contiguous().to_vector<double>() == t.contiguous().to(DType::f64).to_vector<double>());
  // A strided slice is not dense: it gets a contiguous result.
  Tensor sliced = w.slice(2, 0, 4, 2).to(DType::f64);
  CHECK(sliced.is_contiguous());
  // Gradients flow through the permuted cast back to the source's layout.
  Tensor leaf = arange(0, 6, 1, {.dtype = DType::f64}).reshape({2, 3}).requires_grad_(true);
  Tensor y = leaf.t().to(DType::f32);
  CHECK(y.stride(0) == 1);
  sum(mul(y, arange(0, 6, 1, {.dtype = DType::f32}).reshape({3, 2}))).backward();
  CHECK(leaf.grad().to_vector<double>() == std::vector<double>{0, 2, 4, 1, 3, 5});
}

// Transposed copies go through tiles (kernels/cpu/elementwise.cpp): every element lands where
// its index says, for planes smaller and larger than a tile, ragged edges, outer dimensions,
// a strided outer slice and casts to another dtype.
TEST_CASE("transposed copies put every element in place", "[cpu][core]") {
  const Shape shapes[] = {{70, 33}, {32, 32}, {3, 45, 100}, {2, 5, 31, 64}, {1, 129, 1}};
  for (const Shape& shape : shapes) {
    INFO("shape of " << shape.size() << " dims, first " << shape[0]);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    Tensor x = arange(0, static_cast<double>(n), 1, {.dtype = DType::f32}).reshape(shape);
    Tensor t = x.transpose(-1, -2);
    std::vector<double> expected;  // element by element through the view
    const Shape ts = t.shape();
    const int64_t rows = ts[ts.size() - 2], cols = ts[ts.size() - 1], planes = n / (rows * cols);
    Tensor flat = t.reshape({planes, rows, cols});
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) expected.push_back(flat.select(0, p).select(0, r).select(0, c).item());
    CHECK(t.contiguous().to(DType::f64).to_vector<double>() == expected);
    std::vector<double> as_bf16;
    for (double v : expected) as_bf16.push_back(float(bfloat16(static_cast<float>(v))));
    CHECK(t.to(DType::bf16).contiguous().to(DType::f64).to_vector<double>() == as_bf16);
  }
  // Every other plane of a batch, transposed.
  Tensor batch = arange(0, 4 * 40 * 50, 1, {.dtype = DType::f64}).reshape({4, 40, 50});
  const std::vector<double> picked = batch.slice(0, 0, 4, 2).transpose(1, 2).contiguous().to_vector<double>();
  std::vector<double> expected;
  for (int64_t p : {0, 2})
    for (int64_t c = 0; c < 50; ++c)
      for (int64_t r = 0; r < 40; ++r) expected.push_back(static_cast<double>((p * 40 + r) * 50 + c));
  CHECK(picked == expected);
}

TEST_CASE("views share storage and alias writes", "[cpu][core]") {
  Tensor x = arange(0, 24, 1, {.dtype = DType::f32}).reshape({2, 3, 4});
  Tensor t = x.transpose(0, 2);
  CHECK(t.shape() == Shape{4, 3, 2});
  CHECK(t.shares_storage(x));
  CHECK(!t.is_contiguous());
  CHECK(t.select(0, 1).select(0, 2).select(0, 1).item() == x.select(0, 1).select(0, 2).select(0, 1).item());
  {
    NoGradGuard g;
    t.select(0, 3).select(0, 0).select(0, 1).fill_(-5.0);
  }
  CHECK(x.select(0, 1).select(0, 0).select(0, 3).item() == -5.0);
  Tensor s = x.slice(2, 1, 4, 2);  // columns 1 and 3
  CHECK(s.shape() == Shape{2, 3, 2});
  CHECK(s.to_vector<float>()[1] == 3.0f);
  Tensor e = tensor({1, 2, 3}).unsqueeze(0).expand({4, 3});
  CHECK(e.stride(0) == 0);
  CHECK(e.to_vector<float>() == std::vector<float>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  CHECK(x.flatten().shape() == Shape{24});
  CHECK(x.flatten(1).shape() == Shape{2, 12});
  CHECK(x.unsqueeze(-1).shape() == Shape{2, 3, 4, 1});
  CHECK(x.unsqueeze(-1).squeeze().shape() == Shape{2, 3, 4});
  CHECK(x.narrow(1, 1, 2).shape() == Shape{2, 2, 4});
  CHECK(x.permute({2, 0, 1}).contiguous().is_contiguous());
  // view of a non-contiguous tensor fails with a clear error; reshape copies.
  CHECK_THROWS_AS(t.view({24}), ShapeError);
  Tensor r = t.reshape({24});
  CHECK(!r.shares_storage(x));
  // view that splits a contiguous chunk of a non-contiguous tensor works.
  Tensor sliced = arange(0, 48, 1).reshape({4, 12}).slice(0, 0, 4, 2);  // rows 0, 2
  Tensor v = sliced.view({2, 3, 4});
  CHECK(v.shares_storage(sliced));
  CHECK(v.select(0, 1).select(0, 0).select(0, 0).item() == 24.0);
}

TEST_CASE("shapes whose sizes overflow int64 are a ShapeError", "[cpu][core]") {
  const int64_t big = int64_t{1} << 40;
  CHECK_THROWS_AS(numel_of({big, big}), ShapeError);
  CHECK(numel_of({big, big, 0}) == 0);
  CHECK(numel_of({0, big, big}) == 0);
  CHECK_THROWS_AS(contiguous_strides({0, big, big}), ShapeError);  // empty, yet its strides overflow
  CHECK_THROWS_AS(empty({0, big, big}), ShapeError);
  CHECK(contiguous_strides({2, 0, 3}) == Strides{3, 3, 1});
}

TEST_CASE("factories", "[cpu][core]") {
  CHECK(zeros({2, 3}).to_vector<float>() == std::vector<float>(6, 0.0f));
  CHECK(full({2}, 7.5, {.dtype = DType::f64}).to_vector<double>() == std::vector<double>{7.5, 7.5});
  CHECK(arange(5).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(1.0, 2.0, 0.25).to_vector<float>() == std::vector<float>{1.0f, 1.25f, 1.5f, 1.75f});
  CHECK(linspace(0.0, 1.0, 5, {.dtype = DType::f64}).to_vector<double>() == std::vector<double>{0, 0.25, 0.5, 0.75, 1});
  CHECK(eye(2, 3).to_vector<float>() == std::vector<float>{1, 0, 0, 0, 1, 0});
  std::vector<int32_t> host{4, 5, 6};
  Tensor h = from_vector(host, {3, 1});
  CHECK(h.dtype() == DType::i32);
  CHECK(h.shape() == Shape{3, 1});
  CHECK(scalar_tensor(3.0).dim() == 0);
  CHECK(scalar_tensor(3.0).item() == 3.0);
  CHECK_THROWS_AS(tensor({1, 2, 3}, {2, 2}), ShapeError);
  CHECK_THROWS_AS(zeros({2}).item(), ValueError);
}

TEST_CASE("Philox RNG is reproducible and state is saveable", "[cpu][core]") {
  Generator g(1234);
  Tensor a = randn({1001}, {}, &g);
  GeneratorState saved = g.state();
  Tensor b = rand({77}, {.dtype = DType::f64}, &g);
  Generator g2(1234);
  CHECK(randn({1001}, {}, &g2).to_vector<float>() == a.to_vector<float>());
  g2.set_state(saved);
  CHECK(rand({77}, {.dtype = DType::f64}, &g2).to_vector<double>() == b.to_vector<double>());
  // Moments of a large normal sample.
  Tensor big = randn({200000}, {.dtype = DType::f64}, &g);
  CHECK(std::fabs(mean(big).item()) < 0.01);
  CHECK(std::fabs(mean(mul(big, big)).item() - 1.0) < 0.02);
  Tensor u = rand({100000}, {.dtype = DType::f64}, &g);
  auto uv = u.to_vector<double>();
  for (double v : uv) REQUIRE((v >= 0.0 && v < 1.0));
  Tensor ri = randint(-3, 4, {10000}, {.dtype = DType::i64}, &g);
  auto rv = ri.to_vector<int64_t>();
  std::set<int64_t> seen(rv.begin(), rv.end());
  CHECK(seen == std::set<int64_t>{-3, -2, -1, 0, 1, 2, 3});
  Tensor bern = bernoulli({100000}, 0.3, {.dtype = DType::f64}, &g);
  CHECK(std::fabs(mean(bern).item() - 0.3) < 0.01);
  CHECK(bernoulli({10}, 0.0, {}, &g).to_vector<float>() == std::vector<float>(10, 0.0f));
  CHECK_THROWS_AS(randint(3, 3, {2}), ValueError);
}

TEST_CASE("tensors print readably", "[cpu][core]") {
  Tensor x = tensor({1, 2.5, -3, 4}, {2, 2});
  std::string s = x.str();
  CHECK(s.find("[[ 1.0000,  2.5000],") != std::string::npos);
  CHECK(s.find("shape=[2, 2], dtype=f32") != std::string::npos);
  std::string big = zeros({100, 100}).str();
  CHECK(big.find("...") != std::string::npos);
  CHECK(big.size() < 2000);
}

TEST_CASE("bad input raises genesis errors", "[cpu][core]") {
  CHECK_THROWS_AS(Device::parse("tpu"), UsageError);
  CHECK(Device::parse("cuda:1").index == 1);
  CHECK_THROWS_AS(zeros({2, 3}).reshape({4, 2}), ShapeError);
  CHECK_THROWS_AS(zeros({2, 3}).permute({0, 0}), ShapeError);
  CHECK_THROWS_AS(zeros({2, 3}).select(1, 3), IndexError);
  CHECK_THROWS_AS(zeros({2, 3}).transpose(0, 2), IndexError);
  CHECK_THROWS_AS(zeros({2, 3}).expand({3, 3}), ShapeError);
  CHECK_THROWS_AS(add(zeros({2, 3}), zeros({4})), ShapeError);
  CHECK_THROWS_AS(Tensor().shape(), ValueError);
  try {
    add(zeros({2, 3}), zeros({4}));
  } catch (const ShapeError& e) {
    CHECK(std::string(e.what()).find("add: shapes [2, 3] and [4]") != std::string::npos);
  }
}

TEST_CASE("printable: control characters and bytes that are not UTF-8 escaped, UTF-8 kept", "[cpu][core]") {
  CHECK(printable("plain text, 42") == "plain text, 42");
  CHECK(printable("a\nb\tc\rd\x7f") == "a\\nb\\tc\\x0dd\\x7f");
  CHECK(printable(std::string("nul\0byte", 8)) == "nul\\x00byte");
  CHECK(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");  // é € 😀
  CHECK(printable("\xff\xfe") == "\\xff\\xfe");
  CHECK(printable("cut \xe2\x82") == "cut \\xe2\\x82");              // a sequence cut short
  CHECK(printable("\xc0\xaf overlong") == "\\xc0\\xaf overlong");    // an overlong '/'
  CHECK(printable("\xed\xa0\x80 surrogate") == "\\xed\\xa0\\x80 surrogate");
  CHECK(printable("\xf4\x90\x80\x80 past U+10FFFF") == "\\xf4\\x90\\x80\\x80 past U+10FFFF");
}
