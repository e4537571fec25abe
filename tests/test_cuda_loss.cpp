// CUDA parity of the losses: the fused class-index kernels (cross_entropy, nll_loss) over odd
// sizes, both the one-warp-per-row and one-block-per-row forward paths, [N, C] and [N, C, d...]
// layouts, ignored targets, label smoothing, every reduction and float dtype, and gradients;
// and the elementwise-composed losses (mse_loss, l1_loss, binary_cross_entropy_with_logits).
// Bad targets: the op returns, the row counts as ignored, and IndexError surfaces at the next
// synchronization.
#include <optional>
#include <string>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/ops/loss.h"
#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

constexpr genesis::Reduction kReductionModes[] = {genesis::Reduction::none, genesis::Reduction::mean,
                                                  genesis::Reduction::sum};
constexpr DType kTargetDTypes[] = {DType::i64, DType::i32};

// Loss values: the per-row sums of exps and logits are taken in a different order on each
// device (f32 accumulation for the 16-bit dtypes), then the result is rounded once.
Tolerance loss_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-11, 1e-12};
    case DType::f32:
      return {1e-5, 1e-5};
    case DType::f16:
      return {2e-3, 1e-5};
    default:
      return {1e-2, 1e-4};
  }
}

// Class indices in [0, classes) of `dtype`; a fraction `ignored` of them (about) set to `ignore`
// when given.
Tensor class_targets(const Shape& shape, int64_t classes, DType dtype, std::optional<int64_t> ignore,
                     double ignored = 0.2) {
  Tensor t = random_input(shape, DType::i64, 0, static_cast<double>(classes));
  if (ignore) t = masked_fill(t, lt(random_input(shape, DType::f64, 0, 1), ignored), static_cast<double>(*ignore));
  return t.to(dtype);
}

// Logits of shape `logits_shape` ([N, C, d...]) and matching targets.
struct ClassCase {
  Shape logits_shape;
  std::optional<int64_t> ignore;
};

// N = 37 rows of C = 1001 classes (a warp per row), C = 3000 and 5003 (a block per row), [N, C,
// d...], a single class, fewer classes than a 16-byte pack holds, and ignore_index inside the
// class range. Odd C starts most rows off a 16-byte boundary (an elementwise head and tail).
const ClassCase kClassCases[] = {
    {{37, 1001}, -100}, {{37, 1001}, std::nullopt}, {{5, 3000}, -100}, {{19, 5003}, -100}, {{7, 5, 3, 4}, -100},
    {{3, 17, 11}, 4},   {{6, 1}, std::nullopt},     {{9, 3}, -100},    {{11, 6}, 2},
};

using ClassLossFn =
    std::function<Tensor(const Tensor& input, const Tensor& target, genesis::Reduction, int64_t ignore)>;

// Forward values for every float dtype, reduction and target dtype, then gradients in f32 and
// f64 (every reduction) and in f16/bf16 (mean). `lo`/`hi` bound the inputs.
void check_class_loss(const ClassLossFn& loss, double lo, double hi) {
  for (const ClassCase& c : kClassCases) {
    const int64_t classes = c.logits_shape[1];
    Shape target_shape = c.logits_shape;
    target_shape.erase(target_shape.begin() + 1);
    const int64_t ignore = c.ignore.value_or(-100);
    for (DType target_dtype : kTargetDTypes) {
      Tensor target = class_targets(target_shape, classes, target_dtype, c.ignore);
      for (DType dtype : kFloatDTypes) {
        for (genesis::Reduction reduction : kReductionModes) {
          INFO("logits " << shape_str(c.logits_shape) << " " << dtype_name(dtype) << ", target "
                         << dtype_name(target_dtype) << ", reduction " << static_cast<int>(reduction)
                         << ", ignore_index " << ignore);
          auto apply = [&](const TensorList& in) { return loss(in[0], in[1], reduction, ignore); };
          check_parity(apply, {random_input(c.logits_shape, dtype, lo, hi), target}, loss_tolerance(dtype));
          if (target_dtype != DType::i64) continue;
          if (dtype == DType::f32 || dtype == DType::f64 || reduction == genesis::Reduction::mean) {
            // Gradient with respect to the logits only; the targets stay fixed.
            Tensor fixed_target = target;
            auto apply_to_logits = [&loss, reduction, ignore, fixed_target](const TensorList& in) {
              return loss(in[0], fixed_target.to(in[0].device()), reduction, ignore);
            };
            check_backward_parity(apply_to_logits, {random_input(c.logits_shape, dtype, lo, hi)},
                                  loss_tolerance(dtype));
          }
        }
      }
    }
  }
  // Non-contiguous logits, and the single-sample form ([C] logits, 0-d target).
  Tensor target = class_targets({37}, 1001, DType::i64, -100);
  check_parity([&](const TensorList& in) { return loss(in[0].t(), in[1], genesis::Reduction::none, -100); },
               {random_input({1001, 37}, DType::f32, lo, hi), target}, loss_tolerance(DType::f32));
  for (genesis::Reduction reduction : kReductionModes) {
    check_parity([&](const TensorList& in) { return loss(in[0], in[1], reduction, -100); },
                 {random_input({1001}, DType::f32, lo, hi), scalar_tensor(7.0, {.dtype = DType::i64})},
                 loss_tolerance(DType::f32));
  }
  // Every target ignored: mean is 0 / 0 = NaN on both devices, the gradient zero (a warp and a
  // block per row); an empty batch's mean is NaN as well.
  Tensor all_ignored = full({37}, -100.0, {.dtype = DType::i64});
  for (int64_t classes : {1001, 3001}) {
    for (DType dtype : kFloatDTypes) {
      INFO("all ignored, " << classes << " classes, " << dtype_name(dtype));
      check_parity([&](const TensorList& in) { return loss(in[0], in[1], genesis::Reduction::mean, -100); },
                   {random_input({37, classes}, dtype, lo, hi), all_ignored}, {});
      for (genesis::Reduction reduction : {genesis::Reduction::sum, genesis::Reduction::mean}) {
        check_backward_parity(
            [&](const TensorList& in) { return loss(in[0], all_ignored.to(in[0].device()), reduction, -100); },
            {random_input({37, classes}, dtype, lo, hi)}, {});
      }
    }
  }
  check_parity([&](const TensorList& in) { return loss(in[0], in[1], genesis::Reduction::mean, -100); },
               {random_input({0, 5}, DType::f32, lo, hi), full({0}, 0.0, {.dtype = DType::i64})}, {});
  // Mostly ignored rows: the mean divides by the few counted ones, a count that stays on the
  // device for the forward's division and the backward's scale ([N, C] and [N, C, d...] rows).
  for (const Shape& shape : {Shape{37, 1001}, Shape{19, 5003}, Shape{7, 5, 3, 4}, Shape{3, 17, 11}}) {
    Shape target_shape = shape;
    target_shape.erase(target_shape.begin() + 1);
    Tensor sparse = class_targets(target_shape, shape[1], DType::i64, -100, 0.9);
    for (DType dtype : kFloatDTypes) {
      INFO("mostly ignored, logits " << shape_str(shape) << " " << dtype_name(dtype));
      auto mean_loss = [&loss, sparse](const TensorList& in) {
        return loss(in[0], sparse.to(in[0].device()), genesis::Reduction::mean, -100);
      };
      check_parity(mean_loss, {random_input(shape, dtype, lo, hi)}, loss_tolerance(dtype));
      check_backward_parity(mean_loss, {random_input(shape, dtype, lo, hi)}, loss_tolerance(dtype));
    }
  }
  // Contiguous logits whose first row starts one element past a 16-byte boundary (a view into
  // a larger buffer); their gradient buffer is aligned differently from them.
  for (int64_t classes : {1001, 3001}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      INFO("misaligned rows, " << classes << " classes, " << dtype_name(dtype));
      Tensor misaligned_target = class_targets({13}, classes, DType::i64, -100);
      auto misaligned = [&loss, &misaligned_target, classes](const TensorList& in) {
        Tensor x = in[0].narrow(0, 1, 13 * classes).view({13, classes});
        return loss(x, misaligned_target.to(in[0].device()), genesis::Reduction::mean, -100);
      };
      check_parity(misaligned, {random_input({13 * classes + 1}, dtype, lo, hi)}, loss_tolerance(dtype));
      check_backward_parity(misaligned, {random_input({13 * classes + 1}, dtype, lo, hi)}, loss_tolerance(dtype));
    }
  }
}

// A bad CUDA target is reported by the kernel, not thrown by the op: `op` returns, and the
// IndexError surfaces at the next synchronization (here the copy to the host), its message
// holding `part`. It is raised once: the next copy succeeds. Returns the op's result on the CPU.
Tensor raised_at_next_sync(const std::function<Tensor()>& op, const std::string& part) {
  Tensor out;
  REQUIRE_NOTHROW(out = op());
  try {
    out.to(kCPU);
    FAIL("no IndexError at the next synchronization");
  } catch (const IndexError& e) {
    CHECK_THAT(e.what(), Catch::Contains(part));
  }
  Tensor host;
  REQUIRE_NOTHROW(host = out.to(kCPU));
  return host;
}

// Bad targets on CUDA (above the classes, negative; i64 and i32): the loss and its gradient are
// the CPU's with that row ignored, and the IndexError names the op and the value. Mixed devices
// raise DeviceError at once.
void check_class_loss_errors(const std::string& name, const ClassLossFn& loss) {
  Tensor x = random_input({5, 10}, DType::f32);
  const std::vector<int64_t> ignored_row = {0, -100, 1, 2, -100};
  const Tensor ignored_target = from_vector(ignored_row, {5});
  struct BadTarget {
    int64_t value;
    DType dtype;
  };
  for (BadTarget bad : {BadTarget{10, DType::i64}, BadTarget{-3, DType::i32}}) {
    std::vector<int64_t> values = ignored_row;
    values[1] = bad.value;
    Tensor target = from_vector(values, {5}).to(bad.dtype).to(kCuda0);
    const std::string message = name + ": index " + std::to_string(bad.value) + " is out of range [0, 10)";
    for (genesis::Reduction reduction : kReductionModes) {
      INFO("bad target " << bad.value << ", reduction " << static_cast<int>(reduction));
      Tensor expected_x = x.clone().requires_grad_(true);
      Tensor expected = loss(expected_x, ignored_target, reduction, -100);
      sum(expected).backward();
      Tensor value = raised_at_next_sync([&] { return loss(x.to(kCuda0), target, reduction, -100); }, message);
      require_close(value, expected, 1e-5, 1e-5);
      Tensor gx = raised_at_next_sync(
          [&] {
            Tensor logits = x.to(kCuda0).requires_grad_(true);
            sum(loss(logits, target, reduction, -100)).backward();
            return logits.grad();
          },
          message);
      require_close(gx, expected_x.grad(), 1e-5, 1e-5);
    }
  }
  check_parity([&loss](const TensorList& in) { return loss(in[0], in[1], genesis::Reduction::mean, -100); },
               {x, ignored_target}, loss_tolerance(DType::f32));
  CHECK_THROWS_AS(
      loss(x.to(kCuda0), tensor({0, 1, 1, 2, 3}, {5}, {.dtype = DType::i64}), genesis::Reduction::mean, -100),
      DeviceError);
}

}  // namespace

GENESIS_CUDA_PARITY("cross_entropy") {
  for (double smoothing : {0.0, 0.1}) {
    INFO("label_smoothing " << smoothing);
    check_class_loss(
        [smoothing](const Tensor& x, const Tensor& t, genesis::Reduction reduction, int64_t ignore) {
          return cross_entropy(x, t, {.reduction = reduction, .ignore_index = ignore, .label_smoothing = smoothing});
        },
        -4, 4);
  }
  // Large logits: the running max keeps exp in range.
  Tensor target = class_targets({37}, 1001, DType::i64, -100);
  for (DType dtype : {DType::f32, DType::bf16}) {
    check_parity([](const TensorList& in) { return cross_entropy(in[0], in[1]); },
                 {random_input({37, 1001}, dtype, 60, 80), target}, loss_tolerance(dtype));
  }
  // The mean is a fixed-order sum: repeated runs give the same bits.
  Tensor x = random_input({4096, 1001}, DType::f32).to(kCuda0);
  Tensor t = class_targets({4096}, 1001, DType::i64, -100).to(kCuda0);
  CHECK(cross_entropy(x, t).item() == cross_entropy(x, t).item());
  check_class_loss_errors("cross_entropy",
                          [](const Tensor& x, const Tensor& t, genesis::Reduction reduction, int64_t ignore) {
                            return cross_entropy(x, t, {.reduction = reduction, .ignore_index = ignore});
                          });
}

namespace {

// Gradients of a loss of 16-bit inputs on the GPU against the f64 gradient of the same (rounded)
// inputs: the error may be at most three times the CPU's 16-bit composition's (both round the
// logits and their gradient to 16 bits, at different points), plus 0.1% of the gradient's range.
void check_half_gradients_against_f64(const Fn& loss, const TensorList& inputs) {
  auto gradients = [&loss](const TensorList& values, Device device, std::optional<DType> dtype) {
    TensorList leaves;
    for (const Tensor& t : values)
      leaves.push_back((dtype ? t.to(*dtype) : t).detach().to(device).requires_grad_(true));
    loss(leaves).backward();
    TensorList grads;
    for (const Tensor& leaf : leaves) grads.push_back(leaf.grad().to(kCPU).to(DType::f64));
    return grads;
  };
  const TensorList exact = gradients(inputs, kCPU, DType::f64);
  const TensorList on_cpu = gradients(inputs, kCPU, std::nullopt);
  const TensorList on_gpu = gradients(inputs, kCuda0, std::nullopt);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const double range = max(abs(exact[i])).item();
    const double cpu_error = max(abs(sub(on_cpu[i], exact[i]))).item();
    const double gpu_error = max(abs(sub(on_gpu[i], exact[i]))).item();
    INFO("gradient of input " << i << ": GPU error " << gpu_error << ", CPU error " << cpu_error << ", range "
                              << range);
    CHECK(gpu_error <= 3 * cpu_error + 1e-3 * range);
  }
}

}  // namespace

GENESIS_CUDA_PARITY("linear_cross_entropy") {
  // The fused head against the CPU's composition: V both odd and a multiple of 64 (the padded
  // rows' tail), K odd and aligned, ignored targets, smoothing, mean and sum, each float dtype;
  // the loss, then the gradients of x and the weight.
  struct HeadCase {
    int64_t rows, in_features, classes;
  };
  for (const HeadCase& c : {HeadCase{37, 64, 1001}, HeadCase{19, 37, 3001}, HeadCase{8, 48, 1024}}) {
    Tensor target = class_targets({c.rows}, c.classes, DType::i64, -100);
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (genesis::Reduction reduction : {genesis::Reduction::mean, genesis::Reduction::sum}) {
        for (double smoothing : {0.0, 0.1}) {
          INFO("x [" << c.rows << ", " << c.in_features << "], weight [" << c.classes << ", " << c.in_features << "] "
                     << dtype_name(dtype) << ", reduction " << static_cast<int>(reduction) << ", smoothing "
                     << smoothing);
          const CrossEntropyOptions options{.reduction = reduction, .label_smoothing = smoothing};
          auto head = [&](const TensorList& in) {
            return linear_cross_entropy(in[0], in[1], target.to(in[0].device()), options);
          };
          const TensorList inputs{random_input({c.rows, c.in_features}, dtype),
                                  random_input({c.classes, c.in_features}, dtype)};
          check_parity(head, inputs, loss_tolerance(dtype));
          if (dtype == DType::f32) {
            check_backward_parity(head, inputs, {1e-4, 1e-6});
          } else {
            check_half_gradients_against_f64(head, inputs);
          }
        }
      }
    }
  }
  // Under autocast, f32 leaves: bf16 GEMMs, an f32 loss, f32 gradients.
  {
    AutocastGuard autocast(DType::bf16);
    Tensor target = class_targets({37}, 1001, DType::i32, -100);
    auto head = [&](const TensorList& in) { return linear_cross_entropy(in[0], in[1], target.to(in[0].device())); };
    const TensorList inputs{random_input({37, 64}, DType::f32), random_input({1001, 64}, DType::f32)};
    check_parity(head, inputs, loss_tolerance(DType::bf16));
    check_backward_parity(head, inputs, {5e-2, 1e-3});
  }
  // Bad targets surface at the next synchronization, as cross_entropy's do.
  Tensor x = random_input({5, 8}, DType::f32).to(kCuda0), w = random_input({9, 8}, DType::f32).to(kCuda0);
  CHECK_THROWS_AS(linear_cross_entropy(x, w, tensor({0, 1, 9, 2, 3}, {5}, {.dtype = DType::i64}).to(kCuda0)).item(),
                  IndexError);
}

// Logits beyond one chunk (1 GiB): 4100 rows of 131072 f32 classes go in three chunks (1367,
// 1367 and 1366 rows), the weight's gradient summed over them; against the unfused composition
// on the same device.
TEST_CASE("cuda linear_cross_entropy over several logits chunks equals the composition", "[cuda][loss]") {
  if (!cuda_ready()) return;
  const int64_t rows = 4100, in_features = 40, classes = 131071;
  Tensor target = class_targets({rows}, classes, DType::i64, -100).to(kCuda0);
  Tensor x = random_input({rows, in_features}, DType::f32).to(kCuda0).requires_grad_(true);
  Tensor w = random_input({classes, in_features}, DType::f32).to(kCuda0).requires_grad_(true);
  Tensor fused = linear_cross_entropy(x, w, target);
  fused.backward();
  const Tensor fused_gx = x.grad().clone(), fused_gw = w.grad().clone();
  x.zero_grad_(true);
  w.zero_grad_(true);
  Tensor composed = cross_entropy(matmul(x, w.t()), target);
  composed.backward();
  require_close(fused, composed, 1e-5, 1e-6);
  require_close(fused_gx, x.grad(), 1e-4, 1e-7);
  require_close(fused_gw, w.grad(), 1e-4, 1e-7);
}

GENESIS_CUDA_PARITY("nll_loss") {
  // Log-probabilities are negative; the kernel only gathers them.
  check_class_loss([](const Tensor& x, const Tensor& t, genesis::Reduction reduction,
                      int64_t ignore) { return nll_loss(x, t, reduction, ignore); },
                   -8, 0);
  check_class_loss_errors("nll_loss", [](const Tensor& x, const Tensor& t, genesis::Reduction reduction,
                                         int64_t ignore) { return nll_loss(x, t, reduction, ignore); });
}

namespace {

using PairLossFn = std::function<Tensor(const Tensor& input, const Tensor& target, genesis::Reduction)>;

// An elementwise loss of input and target of one shape: every float dtype and reduction,
// transposed operands, and gradients with respect to both.
void check_pair_loss(const PairLossFn& loss, double target_lo, double target_hi) {
  for (DType dtype : kFloatDTypes) {
    for (genesis::Reduction reduction : kReductionModes) {
      INFO(dtype_name(dtype) << ", reduction " << static_cast<int>(reduction));
      auto apply = [&](const TensorList& in) { return loss(in[0], in[1], reduction); };
      for (const Shape& shape : kParityShapes) {
        check_parity(apply, {random_input(shape, dtype, -3, 3), random_input(shape, dtype, target_lo, target_hi)},
                     loss_tolerance(dtype));
      }
      check_parity([&](const TensorList& in) { return loss(in[0].t(), in[1], reduction); },
                   {random_input({129, 37}, dtype, -3, 3), random_input({37, 129}, dtype, target_lo, target_hi)},
                   loss_tolerance(dtype));
      if (dtype == DType::f32 || dtype == DType::f64) {
        check_backward_parity(
            apply, {random_input({37, 129}, dtype, -3, 3), random_input({37, 129}, dtype, target_lo, target_hi)},
            loss_tolerance(dtype));
      }
    }
  }
}

}  // namespace

GENESIS_CUDA_PARITY("mse_loss") {
  check_pair_loss([](const Tensor& x, const Tensor& t, genesis::Reduction r) { return mse_loss(x, t, r); }, -3, 3);
}

GENESIS_CUDA_PARITY("l1_loss") {
  check_pair_loss([](const Tensor& x, const Tensor& t, genesis::Reduction r) { return l1_loss(x, t, r); }, -3, 3);
}

GENESIS_CUDA_PARITY("binary_cross_entropy_with_logits") {
  check_pair_loss(
      [](const Tensor& x, const Tensor& t, genesis::Reduction r) { return binary_cross_entropy_with_logits(x, t, r); },
      0, 1);
  // pos_weight broadcast over the rows, with its gradient.
  for (DType dtype : {DType::f32, DType::f64}) {
    auto weighted = [](const TensorList& in) {
      return binary_cross_entropy_with_logits(in[0], in[1], genesis::Reduction::mean, in[2]);
    };
    TensorList inputs = {random_input({37, 129}, dtype, -3, 3), random_input({37, 129}, dtype, 0, 1),
                         random_input({129}, dtype, 0.5, 2)};
    check_parity(weighted, inputs, loss_tolerance(dtype));
    check_backward_parity(weighted, inputs, loss_tolerance(dtype));
  }
}

TEST_CASE("cross_entropy and nll_loss do not wait on the device, forward or backward", "[cuda]") {
  if (!cuda_ready()) return;
  for (const Shape& shape : {Shape{37, 1001}, Shape{7, 5, 3}}) {
    Shape target_shape = shape;
    target_shape.erase(target_shape.begin() + 1);
    Tensor logits_host = random_input(shape, DType::f32);
    Tensor target = class_targets(target_shape, shape[1], DType::i64, -100).to(kCuda0);
    for (genesis::Reduction reduction : kReductionModes) {
      INFO("logits " << shape_str(shape) << ", reduction " << static_cast<int>(reduction));
      check_no_host_read([&] {
        Tensor logits = logits_host.to(kCuda0).requires_grad_(true);
        sum(cross_entropy(logits, target, {.reduction = reduction, .label_smoothing = 0.1})).backward();
        return logits.grad();
      });
      check_no_host_read([&] {
        Tensor log_probs = logits_host.to(kCuda0).requires_grad_(true);
        sum(nll_loss(log_probs, target, reduction)).backward();
        return log_probs.grad();
      });
    }
  }
}
