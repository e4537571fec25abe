// CUDA runtime services and kernel launchers called directly: every launcher writes into an
// output poisoned with NaN (or a sentinel) and must leave no element unwritten; cuBLAS GEMM
// against a double-precision host reference. Skipped without a GPU, except the checks of what
// happens when there is none.
#if GENESIS_WITH_CUDA
#include <cuda_runtime_api.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/random.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/linalg.h"
#include "kernels/cuda/reduce.h"
#include "libgenesis/core/allocator.h"
#include "libgenesis/cuda/blas.h"
#include "libgenesis/cuda/runtime.h"
#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;
using Catch::Matchers::Contains;
namespace kc = genesis::kernels::cuda;
namespace kcpu = genesis::kernels::cpu;
using kernels::BinaryOp;
using kernels::UnaryOp;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// An uninitialized GPU tensor filled with `poison` by the fill kernel.
Tensor poisoned(const Shape& shape, DType dtype, double poison = kNaN) {
  Tensor t = empty(shape, {.dtype = dtype, .device = kCuda0});
  kc::fill(dtype, t.numel(), t.data_ptr(), poison, cuda::current_stream());
  return t;
}

void require_no_nan(const Tensor& t) {
  auto values = t.to_vector<double>();
  for (size_t i = 0; i < values.size(); ++i) {
    INFO("element " << i << " of " << values.size() << " was left unwritten");
    REQUIRE_FALSE(std::isnan(values[i]));
  }
}

// The views a launcher is run over: contiguous with a vector tail, transposed, misaligned.
struct Layout {
  const char* name;
  Shape base;
  std::function<Tensor(const Tensor&)> view;
};
const Layout kLayouts[] = {
    {"contiguous", {37, 129}, [](const Tensor& x) { return x; }},
    {"transposed", {129, 37}, [](const Tensor& x) { return x.t(); }},
    {"misaligned", {4774}, [](const Tensor& x) { return x.narrow(0, 1, 4773); }},
};

}  // namespace

TEST_CASE("CUDA tensors without a device fail clearly", "[cuda]") {
  if (cuda::is_available()) return;  // covered by the tests below
  CHECK_FALSE(cuda::is_available());
  CHECK(cuda::device_count() == 0);
  CHECK_THROWS_AS(empty({2}, {.device = kCuda0}), DeviceError);
  CHECK_THROWS_WITH(empty({2}, {.device = kCuda0}), Contains("no CUDA device is available"));
}

TEST_CASE("CUDA runtime: devices, streams, copies, errors", "[cuda][api-error]") {
  if (!cuda_ready()) return;
  CHECK(cuda::is_available());
  int count = cuda::device_count();
  REQUIRE(count >= 1);
  Device missing(DeviceType::cuda, count);
  CHECK_THROWS_WITH(allocator_for(missing),
                    Contains("does not exist: " + std::to_string(count) + " CUDA device(s) visible"));

  cudaStream_t default_stream = cuda::current_stream();
  CHECK(default_stream != nullptr);
  CHECK(cuda::current_stream() == default_stream);
  cudaStream_t side = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
  cuda::set_current_stream(side);
  CHECK(cuda::current_stream() == side);
  Tensor x = random_input({37, 129}, DType::f32);
  Tensor y = add(x.to(kCuda0), 1.0);
  cuda::synchronize();
  require_close(y, add(x, 1.0), 0.0, 0.0);
  y = Tensor();
  cuda::set_current_stream(nullptr);
  CHECK(cuda::current_stream() == default_stream);
  cudaStreamDestroy(side);

  // Host -> device -> device -> host.
  std::vector<uint8_t> bytes(1000003), back(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  Tensor a = empty({static_cast<int64_t>(bytes.size())}, {.dtype = DType::boolean, .device = kCuda0});
  Tensor b = empty({static_cast<int64_t>(bytes.size())}, {.dtype = DType::boolean, .device = kCuda0});
  cuda::memcpy(a.data_ptr(), kCuda0, bytes.data(), kCPU, bytes.size());
  cuda::memcpy(b.data_ptr(), kCuda0, a.data_ptr(), kCuda0, bytes.size());
  cuda::memcpy(back.data(), kCPU, b.data_ptr(), kCuda0, bytes.size());
  CHECK(back == bytes);
  cuda::memcpy(back.data(), kCPU, nullptr, kCuda0, 0);  // nothing to copy

  try {
    GENESIS_CUDA_CHECK(cudaMemcpy(nullptr, nullptr, 1, static_cast<cudaMemcpyKind>(99)));
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Contains("CUDA error cudaErrorInvalidMemcpyDirection") && Contains("at cudaMemcpy(") &&
                             Contains("test_cuda_kernels.cpp:"));
  }
  CHECK(cudaGetLastError() == cudaSuccess);  // the failure did not stick
}

namespace {

#define GENESIS_UNARY_OP_ENTRY(name) UnaryOp::name,
constexpr UnaryOp kUnaryOps[] = {GENESIS_FORALL_UNARY_OPS(GENESIS_UNARY_OP_ENTRY)};
#undef GENESIS_UNARY_OP_ENTRY
#define GENESIS_BINARY_OP_ENTRY(name) BinaryOp::name,
constexpr BinaryOp kBinaryOps[] = {GENESIS_FORALL_BINARY_OPS(GENESIS_BINARY_OP_ENTRY)};
#undef GENESIS_BINARY_OP_ENTRY

// A CPU tensor and its copy on cuda:0, both seen through `layout`.
struct Operand {
  Tensor cpu, gpu;
};
Operand operand(const Layout& layout, DType dtype, double lo, double hi) {
  Tensor base = random_input(layout.base, dtype, lo, hi);
  return {layout.view(base), layout.view(base.to(kCuda0))};
}

int ndim(const Tensor& t) {
  return static_cast<int>(t.dim());
}

}  // namespace

TEST_CASE("CUDA unary kernels write every element", "[cuda]") {
  if (!cuda_ready()) return;
  const kernels::ElementwiseParams params{0.5, 1.5};
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    for (const Layout& layout : kLayouts) {
      Operand x = operand(layout, dtype, 0.1, 2.0);
      const Shape& shape = x.cpu.shape();
      for (UnaryOp op : kUnaryOps) {
        INFO("unary op " << static_cast<int>(op) << ", " << dtype_name(dtype) << ", " << layout.name);
        Tensor expected = empty(shape, {.dtype = dtype});
        kcpu::unary(op, dtype, ndim(x.cpu), shape.data(), x.cpu.data_ptr(), x.cpu.strides().data(), expected.data_ptr(),
                    params);
        Tensor actual = poisoned(shape, dtype, is_floating(dtype) ? kNaN : -12345.0);
        kc::unary(op, dtype, ndim(x.gpu), shape.data(), x.gpu.data_ptr(), x.gpu.strides().data(), actual.data_ptr(),
                  params, cuda::current_stream());
        if (is_floating(dtype)) require_no_nan(actual);
        Tolerance t = elementwise_tolerance(dtype);
        require_close(actual, expected, t.rtol, t.atol);
      }
    }
  }
}

TEST_CASE("CUDA unary-backward kernels write every element", "[cuda]") {
  if (!cuda_ready()) return;
  const kernels::ElementwiseParams params{0.5, 1.5};
  for (DType dtype : kFloatDTypes) {
    for (const Layout& layout : {kLayouts[0], kLayouts[2]}) {  // the launcher takes contiguous operands
      Operand x = operand(layout, dtype, 0.1, 2.0), grad = operand(layout, dtype, -1.0, 1.0);
      const int64_t n = x.cpu.numel();
      for (UnaryOp op : kUnaryOps) {
        INFO("unary op " << static_cast<int>(op) << ", " << dtype_name(dtype) << ", " << layout.name);
        Tensor expected = empty({n}, {.dtype = dtype});
        kcpu::unary_backward(op, dtype, n, x.cpu.data_ptr(), grad.cpu.data_ptr(), expected.data_ptr(), params);
        Tensor actual = poisoned({n}, dtype);
        kc::unary_backward(op, dtype, n, x.gpu.data_ptr(), grad.gpu.data_ptr(), actual.data_ptr(), params,
                           cuda::current_stream());
        require_no_nan(actual);
        Tolerance t = elementwise_tolerance(dtype);
        require_close(actual, expected, t.rtol, t.atol);
      }
    }
  }
}

TEST_CASE("CUDA binary and where kernels write every element", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType dtype : kAllDTypes) {
    for (const Layout& layout : kLayouts) {
      Operand a = operand(layout, dtype, 0.5, 2.0), b = operand(layout, dtype, 0.5, 2.0);
      Operand cond = operand(layout, DType::boolean, 0.0, 1.0);
      const Shape& shape = a.cpu.shape();
      for (BinaryOp op : kBinaryOps) {
        INFO("binary op " << static_cast<int>(op) << ", " << dtype_name(dtype) << ", " << layout.name);
        DType out_dtype = kernels::is_comparison(op) ? DType::boolean : dtype;
        Tensor expected = empty(shape, {.dtype = out_dtype});
        kcpu::binary(op, dtype, ndim(a.cpu), shape.data(), a.cpu.data_ptr(), a.cpu.strides().data(), b.cpu.data_ptr(),
                     b.cpu.strides().data(), expected.data_ptr());
        Tensor actual = poisoned(shape, out_dtype, is_floating(out_dtype) ? kNaN : -12345.0);
        kc::binary(op, dtype, ndim(a.gpu), shape.data(), a.gpu.data_ptr(), a.gpu.strides().data(), b.gpu.data_ptr(),
                   b.gpu.strides().data(), actual.data_ptr(), cuda::current_stream());
        if (is_floating(out_dtype)) require_no_nan(actual);
        Tolerance t = elementwise_tolerance(out_dtype);
        require_close(actual, expected, t.rtol, t.atol);
      }
      INFO("where, " << dtype_name(dtype) << ", " << layout.name);
      Tensor expected = empty(shape, {.dtype = dtype});
      kcpu::where(dtype, ndim(a.cpu), shape.data(), static_cast<const bool*>(cond.cpu.data_ptr()),
                  cond.cpu.strides().data(), a.cpu.data_ptr(), a.cpu.strides().data(), b.cpu.data_ptr(),
                  b.cpu.strides().data(), expected.data_ptr());
      Tensor actual = poisoned(shape, dtype, is_floating(dtype) ? kNaN : -12345.0);
      kc::where(dtype, ndim(a.gpu), shape.data(), static_cast<const bool*>(cond.gpu.data_ptr()),
                cond.gpu.strides().data(), a.gpu.data_ptr(), a.gpu.strides().data(), b.gpu.data_ptr(),
                b.gpu.strides().data(), actual.data_ptr(), cuda::current_stream());
      if (is_floating(dtype)) require_no_nan(actual);
      require_close(actual, expected, 0.0, 0.0);
    }
  }
}

TEST_CASE("CUDA copy, fill and random kernels write every element", "[cuda]") {
  if (!cuda_ready()) return;
  for (DType from : kAllDTypes) {
    for (const Layout& layout : kLayouts) {
      Operand src = operand(layout, from, -4.0, 4.0);
      const Shape& shape = src.cpu.shape();
      for (DType to : kFloatDTypes) {
        INFO("copy " << dtype_name(from) << " -> " << dtype_name(to) << ", " << layout.name);
        // The destination is strided too: the transpose of a contiguous buffer.
        Tensor expected = empty(shape, {.dtype = to});
        kcpu::copy(ndim(src.cpu), shape.data(), from, src.cpu.data_ptr(), src.cpu.strides().data(), to,
                   expected.data_ptr(), expected.strides().data());
        Tensor actual = poisoned(shape.size() == 2 ? Shape{shape[1], shape[0]} : shape, to);
        Tensor dst = shape.size() == 2 ? actual.t() : actual;
        kc::copy(ndim(src.gpu), shape.data(), from, src.gpu.data_ptr(), src.gpu.strides().data(), to, dst.data_ptr(),
                 dst.strides().data(), cuda::current_stream());
        require_no_nan(actual);
        require_close(dst, expected, 0.0, 0.0);
      }
    }
  }
  for (DType dtype : kFloatDTypes) {
    for (int64_t n : {int64_t{1}, int64_t{4773}, int64_t{1000001}}) {
      INFO("fill and random, " << dtype_name(dtype) << ", " << n << " elements");
      Tensor filled = poisoned({n}, dtype);
      kc::fill(dtype, n, filled.data_ptr(), 0.75, cuda::current_stream());
      require_close(filled, full({n}, 0.75, {.dtype = dtype}), 0.0, 0.0);
      Tensor expected = empty({n}, {.dtype = dtype});
      kcpu::random_fill(kernels::RandomKind::uniform, dtype, n, expected.data_ptr(), 7, 99, -1.0, 1.0);
      Tensor actual = poisoned({n}, dtype);
      kc::random_fill(kernels::RandomKind::uniform, dtype, n, actual.data_ptr(), 7, 99, -1.0, 1.0,
                      cuda::current_stream());
      require_no_nan(actual);
      require_close(actual, expected, 0.0, 0.0);
    }
  }
}

TEST_CASE("CUDA row sums write every row", "[cuda]") {
  if (!cuda_ready()) return;
  // One warp per row, one block per row, and rows split into slices (few long rows).
  const std::pair<int64_t, int64_t> kSizes[] = {{1, 1},     {37, 129},   {129, 37},    {3, 513},    {5, 4099},
                                                {2, 16385}, {3, 300007}, {1, 1000001}, {600, 9000}, {7, 0}};
  for (DType dtype : kAllDTypes) {
    for (auto [rows, cols] : kSizes) {
      INFO("sum_rows " << dtype_name(dtype) << ", " << rows << " x " << cols);
      Tensor x = random_input({rows, cols}, DType::i64, 1, 5).to(dtype);
      DType out_dtype = is_floating(dtype) ? dtype : DType::i64;
      Tensor expected = empty({rows}, {.dtype = out_dtype});
      kcpu::sum_rows(dtype, rows, cols, x.data_ptr(), expected.data_ptr());
      Tensor x_gpu = x.to(kCuda0);
      Tensor actual = poisoned({rows}, out_dtype, is_floating(out_dtype) ? kNaN : -12345.0);
      kc::sum_rows(dtype, rows, cols, x_gpu.data_ptr(), actual.data_ptr(), cuda::current_stream());
      require_close(actual, expected, 0.0, 0.0);  // whole numbers: exact in both accumulators
    }
  }
}

namespace {

// Row-major C[i] = alpha op(A[i]) op(B[i]) + beta C[i] in double on the host.
std::vector<double> reference_gemm(const genesis::kernels::GemmArgs& g, const std::vector<double>& a, const std::vector<double>& b,
                                   const std::vector<double>& c) {
  std::vector<double> out = c;
  for (int64_t batch = 0; batch < g.batch; ++batch) {
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < g.k; ++p) {
          double av = a[batch * g.stride_a + (g.trans_a ? p * g.lda + i : i * g.lda + p)];
          double bv = b[batch * g.stride_b + (g.trans_b ? j * g.ldb + p : p * g.ldb + j)];
          acc += av * bv;
        }
        double& dst = out[batch * g.stride_c + i * g.ldc + j];
        dst = g.alpha * acc + (g.beta == 0.0 ? 0.0 : g.beta * dst);
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("cuBLAS GEMM matches a double-precision reference", "[cuda]") {
  if (!cuda_ready()) return;
  struct Case {
    bool trans_a, trans_b;
    int64_t m, n, k, batch;
    double alpha, beta;
  };
  const Case kCases[] = {{false, false, 37, 129, 53, 1, 1.0, 0.0},
                         {true, false, 37, 129, 53, 3, 1.0, 0.0},
                         {false, true, 1, 1, 1, 1, 2.0, 0.0},
                         {true, true, 64, 33, 17, 2, 0.5, 1.5},
                         {false, false, 5, 7, 0, 2, 1.0, 0.0}};
  for (DType dtype : kFloatDTypes) {
    for (const Case& c : kCases) {
      INFO(dtype_name(dtype) << ": trans " << c.trans_a << c.trans_b << ", m n k " << c.m << " " << c.n << " " << c.k
                             << ", batch " << c.batch << ", beta " << c.beta);
      genesis::kernels::GemmArgs g;
      g.trans_a = c.trans_a, g.trans_b = c.trans_b, g.m = c.m, g.n = c.n, g.k = c.k, g.batch = c.batch;
      g.alpha = c.alpha, g.beta = c.beta;
      g.lda = c.trans_a ? c.m : c.k, g.stride_a = c.m * c.k;
      g.ldb = c.trans_b ? c.k : c.n, g.stride_b = c.k * c.n;
      g.ldc = c.n + 3, g.stride_c = c.m * (c.n + 3);  // padded rows: C is strided
      Tensor a = random_input({c.batch * c.m * c.k}, dtype), b = random_input({c.batch * c.k * c.n}, dtype);
      Tensor c_in = random_input({c.batch * g.stride_c}, dtype);
      Tensor a_gpu = a.to(kCuda0), b_gpu = b.to(kCuda0);
      Tensor c_gpu = c.beta == 0.0 ? poisoned({c.batch * g.stride_c}, dtype) : c_in.to(kCuda0);
      std::vector<double> want =
          reference_gemm(g, a.to_vector<double>(), b.to_vector<double>(),
                         c.beta == 0.0 ? std::vector<double>(g.batch * g.stride_c, kNaN) : c_in.to_vector<double>());
      g.a = a_gpu.data_ptr(), g.b = b_gpu.data_ptr(), g.c = c_gpu.data_ptr();
      kc::gemm(dtype, g, cuda::current_stream());
      std::vector<double> got = c_gpu.to_vector<double>();
      double tol = dtype == DType::f64 ? 1e-12 : dtype == DType::f32 ? 1e-5 : dtype == DType::f16 ? 2e-3 : 1e-2;
      for (int64_t batch = 0; batch < c.batch; ++batch) {
        for (int64_t i = 0; i < c.m; ++i) {
          for (int64_t j = 0; j < c.n; ++j) {
            size_t at = static_cast<size_t>(batch * g.stride_c + i * g.ldc + j);
            INFO("C[" << batch << "][" << i << "][" << j << "]: got " << got[at] << ", want " << want[at]);
            REQUIRE(std::fabs(got[at] - want[at]) <= tol * (1.0 + std::fabs(want[at])) * std::sqrt(c.k + 1.0));
          }
        }
      }
    }
  }
  // TF32 trades mantissa bits for speed; results stay close.
  cuda::set_allow_tf32(true);
  CHECK(cuda::allow_tf32());
  Tensor a = random_input({64, 64}, DType::f32), b = random_input({64, 64}, DType::f32);
  Tensor a_gpu = a.to(kCuda0), b_gpu = b.to(kCuda0), c_gpu = poisoned({64, 64}, DType::f32);
  genesis::kernels::GemmArgs g;
  g.m = g.n = g.k = 64, g.lda = g.ldb = g.ldc = 64;
  g.a = a_gpu.data_ptr(), g.b = b_gpu.data_ptr(), g.c = c_gpu.data_ptr();
  kc::gemm(DType::f32, g, cuda::current_stream());
  cuda::set_allow_tf32(false);
  std::vector<double> want =
      reference_gemm(g, a.to_vector<double>(), b.to_vector<double>(), std::vector<double>(64 * 64, 0.0));
  std::vector<double> got = c_gpu.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(std::fabs(got[i] - want[i]) <= 2e-2);
  CHECK_THROWS_AS(kc::gemm(DType::i32, g, cuda::current_stream()), DTypeError);
}
#endif  // GENESIS_WITH_CUDA
