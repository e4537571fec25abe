// CUDA parity of views, copies, factories and random draws, and gradients through CUDA.
// Every check runs the same function on the CPU and on cuda:0 and compares all elements;
// the tests skip on machines without a GPU.
#include <cmath>
#include <limits>
#include <vector>

#include "tests/cuda_testing.h"
#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/runtime.h"
#endif

using namespace genesis;
using namespace genesis::testing;

namespace {

using ViewFn = std::function<Tensor(const Tensor&)>;

// A view taken on the GPU has the CPU view's geometry (and shares its base's storage exactly
// when the CPU one does); strided reads of it through a copy and an elementwise op, and the
// gradient through it, match the CPU.
void check_view(const ViewFn& view, const Shape& shape) {
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype) << ", input shape " << shape_str(shape));
    Tensor x = random_input(shape, dtype, -4.0, 4.0);
    Tensor x_gpu = x.to(kCuda0);
    Tensor expected = view(x), actual = view(x_gpu);
    CHECK(actual.shape() == expected.shape());
    CHECK(actual.strides() == expected.strides());
    CHECK(actual.offset() == expected.offset());
    CHECK(actual.shares_storage(x_gpu) == expected.shares_storage(x));
    check_parity([&](const TensorList& in) { return view(in[0]).contiguous(); }, {x}, {});
    if (dtype != DType::boolean) {
      check_parity([&](const TensorList& in) { return mul(view(in[0]), view(in[0])); }, {x},
                   elementwise_tolerance(dtype));
    }
  }
  check_backward_parity([&](const TensorList& in) { return mul(view(in[0]), 3.0); }, {random_input(shape, DType::f32)},
                        {1e-6, 1e-6});
}

// Draws with `draw` from a generator on the CPU, then from the same state on cuda:0.
void check_random(const std::function<Tensor(Generator&, const Shape&, DType, Device)>& draw,
                  std::initializer_list<DType> dtypes, bool exact) {
  for (DType dtype : dtypes) {
    for (const Shape& shape : {Shape{37, 129}, Shape{1}, Shape{3, 5, 7}, Shape{}, Shape{1000, 1001}}) {
      INFO("dtype " << dtype_name(dtype) << ", shape " << shape_str(shape));
      Generator gen(20240917);
      gen.set_state({20240917, 12345});
      Tensor expected = draw(gen, shape, dtype, kCPU);
      GeneratorState after_cpu = gen.state();
      gen.set_state({20240917, 12345});
      Tensor actual = draw(gen, shape, dtype, kCuda0);
      CHECK(gen.state() == after_cpu);
      REQUIRE(actual.device() == kCuda0);
      REQUIRE(actual.dtype() == expected.dtype());
      Tolerance tolerance = exact ? Tolerance{} : elementwise_tolerance(dtype);
      require_close(actual, expected, tolerance.rtol, tolerance.atol);
    }
  }
}

}  // namespace

// --- views -------------------------------------------------------------------

GENESIS_CUDA_PARITY("view") {
  check_view([](const Tensor& x) { return x.view({35, 6}); }, {6, 35});
  check_view([](const Tensor& x) { return x.view({-1}); }, {37, 129});
  check_view([](const Tensor& x) { return x.view({3, 1, 5, 7}); }, {3, 5, 7});
}
GENESIS_CUDA_PARITY("reshape") {
  check_view([](const Tensor& x) { return x.reshape({129, 37}); }, {37, 129});
  check_view([](const Tensor& x) { return x.t().reshape({-1}); }, {37, 129});  // a copy
  check_view([](const Tensor& x) { return x.reshape({1}); }, {});
}
GENESIS_CUDA_PARITY("permute") {
  check_view([](const Tensor& x) { return x.permute({2, 0, 1}); }, {3, 5, 7});
  check_view([](const Tensor& x) { return x.permute({1, 0}); }, {37, 129});
}
GENESIS_CUDA_PARITY("transpose") {
  check_view([](const Tensor& x) { return x.transpose(0, 1); }, {37, 129});
  check_view([](const Tensor& x) { return x.transpose(0, 2); }, {3, 5, 7});
  check_view([](const Tensor& x) { return x.t(); }, {1, 1});
}
GENESIS_CUDA_PARITY("narrow") {
  check_view([](const Tensor& x) { return x.narrow(1, 3, 100); }, {37, 129});
  check_view([](const Tensor& x) { return x.narrow(0, 36, 1); }, {37, 129});
  // One element in: contiguous but not 16-byte aligned, so the strided path runs.
  check_view([](const Tensor& x) { return x.narrow(0, 1, 4772); }, {4773});
}
GENESIS_CUDA_PARITY("slice") {
  check_view([](const Tensor& x) { return x.slice(1, 1, 128, 3); }, {37, 129});
  check_view([](const Tensor& x) { return x.slice(0, -5, 37); }, {37, 129});
  check_view([](const Tensor& x) { return x.slice(2, 0, 7, 2).slice(0, 1, 3); }, {3, 5, 7});
}
GENESIS_CUDA_PARITY("select") {
  check_view([](const Tensor& x) { return x.select(1, 64); }, {37, 129});
  check_view([](const Tensor& x) { return x.select(0, -1); }, {3, 5, 7});
  check_view([](const Tensor& x) { return x.select(0, 0); }, {1});
}
GENESIS_CUDA_PARITY("expand") {
  check_view([](const Tensor& x) { return x.expand({37, 129}); }, {37, 1});
  check_view([](const Tensor& x) { return x.expand({5, 129}); }, {1, 129});
  check_view([](const Tensor& x) { return x.expand({3, 4}); }, {});
}
GENESIS_CUDA_PARITY("squeeze") {
  check_view([](const Tensor& x) { return x.squeeze(); }, {37, 1, 129});
  check_view([](const Tensor& x) { return x.squeeze(1); }, {37, 1, 129});
  check_view([](const Tensor& x) { return x.squeeze(); }, {1, 1});
}
GENESIS_CUDA_PARITY("unsqueeze") {
  check_view([](const Tensor& x) { return x.t().unsqueeze(1); }, {37, 129});
  check_view([](const Tensor& x) { return x.unsqueeze(0); }, {});
}
GENESIS_CUDA_PARITY("flatten") {
  check_view([](const Tensor& x) { return x.flatten(); }, {3, 5, 7});
  check_view([](const Tensor& x) { return x.permute({1, 0, 2}).flatten(1); }, {3, 5, 7});  // a copy
}

// --- copies --------------------------------------------------------------------

GENESIS_CUDA_PARITY("contiguous") {
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    Tensor x = random_input({37, 129}, dtype, -4.0, 4.0);
    check_parity([](const TensorList& in) { return in[0].t().contiguous(); }, {x}, {});
    check_parity(
        [](const TensorList& in) {
          return in[0].permute({2, 0, 1}).contiguous();
        },
        {random_input({3, 5, 7}, dtype)}, {});
    check_parity([](const TensorList& in) { return in[0].slice(1, 1, 128, 2).contiguous(); }, {x}, {});
    // Even sizes take the 2 x 2 block transpose of 2-byte dtypes: partial 64 x 64 tiles, a batch,
    // whole tiles, and an odd offset that leaves it for the element-wise tiles.
    for (const Shape& shape : {Shape{130, 66}, Shape{128, 192}}) {
      check_parity([](const TensorList& in) { return in[0].t().contiguous(); }, {random_input(shape, dtype)}, {});
    }
    check_parity([](const TensorList& in) { return in[0].transpose(1, 2).contiguous(); },
                 {random_input({3, 70, 130}, dtype)}, {});
    check_parity([](const TensorList& in) { return in[0].slice(1, 1, 67).t().contiguous(); },
                 {random_input({130, 68}, dtype)}, {});
    Tensor x_gpu = x.to(kCuda0);
    CHECK(x_gpu.contiguous().is_same(x_gpu));
  }
  check_backward_parity([](const TensorList& in) { return in[0].t().contiguous(); },
                        {random_input({37, 129}, DType::f32)}, {1e-6, 1e-6});
}

GENESIS_CUDA_PARITY("clone") {
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    for (const Shape& shape : kParityShapes)
      check_parity([](const TensorList& in) { return in[0].clone(); }, {random_input(shape, dtype)}, {});
    check_parity([](const TensorList& in) { return in[0].t().clone(); }, {random_input({37, 129}, dtype)}, {});
  }
  Tensor x = random_input({37, 129}, DType::f32).to(kCuda0);
  Tensor copy = x.clone();
  CHECK_FALSE(copy.shares_storage(x));
  copy.fill_(7.0);
  CHECK(x.to_vector<float>() != copy.to_vector<float>());
  check_backward_parity([](const TensorList& in) { return in[0].clone(); }, {random_input({3, 5, 7}, DType::f32)},
                        {1e-6, 1e-6});
}

GENESIS_CUDA_PARITY("to_dtype") {
  // Every pair of dtypes, from a transposed (strided) source; casts are exact on both devices.
  for (DType from : kAllDTypes) {
    Tensor x = random_input({37, 129}, from, -4.0, 4.0);
    for (DType to : kAllDTypes) {
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      check_parity([to](const TensorList& in) { return in[0].t().to(to); }, {x}, {});
      check_parity([to](const TensorList& in) { return in[0].to(to); }, {random_input({}, from, -4.0, 4.0)}, {});
    }
  }
  Tensor special = tensor({std::nan(""), INFINITY, -INFINITY, 0.0, -0.0, 65504.0, 1e-8, 3.0e38});
  for (DType to : {DType::f16, DType::bf16, DType::f64, DType::boolean}) {
    INFO("special values -> " << dtype_name(to));
    check_parity([to](const TensorList& in) { return in[0].to(to); }, {special}, {});
  }
  check_backward_parity([](const TensorList& in) { return in[0].to(DType::f64).t(); },
                        {random_input({37, 129}, DType::f32)}, {1e-6, 1e-6});
}

GENESIS_CUDA_PARITY("to_device") {
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    Tensor x = random_input({37, 129}, dtype, -4.0, 4.0);
    Tensor round_trip = x.to(kCuda0).to(kCPU);
    require_close(round_trip, x, 0.0, 0.0);
    require_close(x.t().to(kCuda0), x.t(), 0.0, 0.0);           // strided host source
    require_close(x.to(kCuda0).t().to(kCPU), x.t(), 0.0, 0.0);  // strided device source
    require_close(x.to(kCuda0).select(1, 5).to(kCPU), x.select(1, 5), 0.0, 0.0);
    // copy_ across devices into a poisoned destination.
    Tensor dst = full({129, 37}, std::nan(""), {.dtype = dtype, .device = kCuda0});
    dst.copy_(x.t());
    require_close(dst, x.t(), 0.0, 0.0);
  }
  Tensor empty_gpu = empty({0, 5}, {.device = kCuda0});
  CHECK(empty_gpu.to(kCPU).shape() == Shape{0, 5});
  check_backward_parity([](const TensorList& in) { return mul(in[0].to(kCPU), 2.0); },
                        {random_input({3, 5, 7}, DType::f32)}, {1e-6, 1e-6});
}

// --- factories ---------------------------------------------------------------

GENESIS_CUDA_PARITY("full") {
  for (DType dtype : kAllDTypes) {
    for (double value : {2.5, -1.0, 0.0, 1.0, std::nan("")}) {
      if (!is_floating(dtype) && std::isnan(value)) continue;
      for (const Shape& shape : {Shape{37, 129}, Shape{1}, Shape{3, 5, 7}, Shape{}, Shape{4099}}) {
        INFO("dtype " << dtype_name(dtype) << ", value " << value << ", shape " << shape_str(shape));
        Tensor expected = full(shape, value, {.dtype = dtype});
        Tensor actual = full(shape, value, {.dtype = dtype, .device = kCuda0});
        REQUIRE(actual.device() == kCuda0);
        require_close(actual, expected, 0.0, 0.0);
      }
    }
    // fill_ of a strided view leaves the elements outside it alone.
    Tensor base = full({37, 129}, 1.0, {.dtype = dtype, .device = kCuda0});
    base.slice(1, 0, 129, 2).fill_(0.0);
    Tensor expected = full({37, 129}, 1.0, {.dtype = dtype});
    expected.slice(1, 0, 129, 2).fill_(0.0);
    require_close(base, expected, 0.0, 0.0);
  }
}

GENESIS_CUDA_PARITY("arange") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    INFO("dtype " << dtype_name(dtype));
    require_close(arange(0, 37, 1, {.dtype = dtype, .device = kCuda0}), arange(0, 37, 1, {.dtype = dtype}), 0.0, 0.0);
    require_close(arange(-3.5, 10, 0.7, {.dtype = dtype, .device = kCuda0}), arange(-3.5, 10, 0.7, {.dtype = dtype}),
                  0.0, 0.0);
  }
  CHECK(arange(int64_t{5}, {.dtype = DType::i64, .device = kCuda0}).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 1, 2, 3, 4});
}

GENESIS_CUDA_PARITY("linspace") {
  for (DType dtype : kFloatDTypes) {
    INFO("dtype " << dtype_name(dtype));
    require_close(linspace(-1, 1, 129, {.dtype = dtype, .device = kCuda0}), linspace(-1, 1, 129, {.dtype = dtype}), 0.0,
                  0.0);
    require_close(linspace(3, 3, 1, {.dtype = dtype, .device = kCuda0}), linspace(3, 3, 1, {.dtype = dtype}), 0.0, 0.0);
  }
}

GENESIS_CUDA_PARITY("eye") {
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    require_close(eye(37, -1, {.dtype = dtype, .device = kCuda0}), eye(37, -1, {.dtype = dtype}), 0.0, 0.0);
    require_close(eye(5, 9, {.dtype = dtype, .device = kCuda0}), eye(5, 9, {.dtype = dtype}), 0.0, 0.0);
  }
}

// --- random draws: same generator state, same values -----------------------------

GENESIS_CUDA_PARITY("rand") {
  check_random([](Generator& g, const Shape& s, DType dt, Device d) { return rand(s, {.dtype = dt, .device = d}, &g); },
               {DType::f32, DType::f64, DType::f16, DType::bf16}, /*exact=*/true);
}
GENESIS_CUDA_PARITY("randn") {
  // Box-Muller uses log/sin/cos: CUDA's and the host's may differ in the last ulp.
  check_random(
      [](Generator& g, const Shape& s, DType dt, Device d) { return randn(s, {.dtype = dt, .device = d}, &g); },
      {DType::f32, DType::f64, DType::f16, DType::bf16}, /*exact=*/false);
}
GENESIS_CUDA_PARITY("randint") {
  check_random([](Generator& g, const Shape& s, DType dt,
                  Device d) { return randint(-7, 1000, s, {.dtype = dt, .device = d}, &g); },
               {DType::i64, DType::i32, DType::f32}, /*exact=*/true);
  check_random([](Generator& g, const Shape& s, DType dt,
                  Device d) { return randint(0, int64_t{1} << 32, s, {.dtype = dt, .device = d}, &g); },
               {DType::i64}, /*exact=*/true);
}
GENESIS_CUDA_PARITY("bernoulli") {
  check_random([](Generator& g, const Shape& s, DType dt,
                  Device d) { return bernoulli(s, 0.3, {.dtype = dt, .device = d}, &g); },
               {DType::f32, DType::boolean, DType::f16, DType::i64}, /*exact=*/true);
}

// --- autograd ------------------------------------------------------------------

TEST_CASE("gradients through CUDA match the CPU", "[cuda]") {
  if (!cuda_ready()) return;
  auto expression = [](const TensorList& in) {
    const Tensor &a = in[0], &b = in[1], &c = in[2];
    Tensor h = sigmoid(add(mul(a, b.t()), c));
    Tensor picked = where(gt(a, 0.0), mul(h, exp(neg(a))), pow(h, 2.0));
    return add(mean(picked, {1}), sum(maximum(a.slice(1, 0, 129, 2), 0.25), {1}));
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO("dtype " << dtype_name(dtype));
    TensorList inputs{random_input({37, 129}, dtype), random_input({129, 37}, dtype), random_input({129}, dtype)};
    check_backward_parity(expression, inputs, dtype == DType::f64 ? Tolerance{1e-12, 1e-12} : Tolerance{1e-5, 1e-6});
  }
}

// --- runtime: staged uploads and asynchronous kernel faults -----------------------------

TEST_CASE("uploads from host memory are staged and land intact", "[cuda]") {
  if (!cuda_ready()) return;
  // Many uploads in a row reuse the pinned staging buffers; each host tensor is overwritten
  // right after its upload returns, which must not change what reaches the GPU.
  std::vector<Tensor> on_gpu;
  std::vector<std::vector<float>> expected;
  for (int i = 0; i < 40; ++i) {
    Tensor host = random_input({257, 33 + i}, DType::f32);
    expected.push_back(host.to_vector<float>());
    on_gpu.push_back(host.to(kCuda0));
    host.fill_(std::nan(""));
  }
  // A large upload (above the staging limit) goes directly.
  Tensor big = random_input({70 << 20 >> 2}, DType::f32);
  Tensor big_gpu = big.to(kCuda0);
  require_close(big_gpu.to(kCPU), big, 0.0, 0.0);
  for (size_t i = 0; i < on_gpu.size(); ++i) CHECK(on_gpu[i].to(kCPU).to_vector<float>() == expected[i]);
}

#if GENESIS_WITH_CUDA
TEST_CASE("a bad index found by a kernel is raised at the next synchronization", "[cuda]") {
  if (!cuda_ready()) return;
  Tensor weight = random_input({10, 4}, DType::f32).to(kCuda0);
  Tensor rows = embedding(tensor({3, 12, 4}, {3}, {.dtype = DType::i64}).to(kCuda0), weight);
  CHECK(rows.size(0) == 3);  // the op itself returns without waiting for the kernel
  try {
    cuda::synchronize();
    FAIL("no error was raised");
  } catch (const IndexError& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("embedding: index 12 is out of range [0, 10)"));
  }
  // Raised once: the device stays usable and later work is correct.
  Tensor good = embedding(tensor({9, 0}, {2}, {.dtype = DType::i64}).to(kCuda0), weight);
  require_close(good.to(kCPU), embedding(tensor({9, 0}, {2}, {.dtype = DType::i64}), weight.to(kCPU)), 0.0, 0.0);
}
#endif
