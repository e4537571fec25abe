// CUDA parity of the joining and indexing ops (cat, stack, split, chunk, index_select, gather,
// scatter_add, tril/triu, repeat, flip, one_hot) against the CPU: every dtype, every axis (also
// negative), odd sizes, non-contiguous operands, i32 and i64 indices, empty tensors, gradients,
// bit-identical repeated runs of the sorted scatter-add, and bad indices: the op returns, the
// kernel skips them, and IndexError surfaces at the next synchronization.
#include <string>

#include "tests/cuda_testing.h"

using namespace genesis;
using namespace genesis::testing;

namespace {

// Data movement and the CPU-ordered scatter-add are exact on both devices.
constexpr Tolerance kExact{};

// Gradients that go through a CUDA sum (repeat's tile axes) differ from the CPU's in summation order.
Tolerance sum_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {1e-12, 1e-12};
    case DType::f32:
      return {1e-5, 1e-5};
    case DType::f16:
      return {1e-2, 1e-2};
    default:
      return {2e-2, 2e-2};
  }
}

// Random indices in [0, bound) of the given index dtype (on the CPU).
Tensor random_index(const Shape& shape, int64_t bound, DType index_dtype) {
  return random_input(shape, DType::i64, 0, static_cast<double>(bound)).to(index_dtype);
}

// A bad CUDA index is reported by the kernel, not thrown by the op: `op` returns, and the
// IndexError surfaces at the next synchronization (here the copy to the host), its message
// holding every one of `parts`. It is raised once: the next copy succeeds. Returns the op's
// result as the kernels left it (on the CPU).
Tensor raised_at_next_sync(const std::function<Tensor()>& op, const std::vector<std::string>& parts) {
  Tensor out;
  REQUIRE_NOTHROW(out = op());
  try {
    out.to(kCPU);
    FAIL("no IndexError at the next synchronization");
  } catch (const IndexError& e) {
    for (const std::string& part : parts) CHECK_THAT(e.what(), Catch::Contains(part));
  }
  Tensor host;
  REQUIRE_NOTHROW(host = out.to(kCPU));
  return host;
}

constexpr DType kIndexDTypes[] = {DType::i64, DType::i32};
constexpr int64_t kAxes[] = {0, 1, 2, -1, -3};
const Shape kBase{7, 9, 11};

}  // namespace

GENESIS_CUDA_PARITY("cat") {
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    for (int64_t axis : kAxes) {
      INFO("axis " << axis);
      const size_t ax = static_cast<size_t>(axis < 0 ? axis + 3 : axis);
      Shape a = kBase, b = kBase, c = kBase;
      b[ax] = 4;
      c[ax] = 0;
      check_parity(
          [axis](const TensorList& in) {
            return cat({in[0], in[1], in[2], in[0]}, axis);
          },
          {random_input(a, dtype), random_input(b, dtype), random_input(c, dtype)}, kExact);
      // Transposed and sliced inputs.
      check_parity(
          [axis](const TensorList& in) {
            return cat({in[0].transpose(0, 2), in[1].slice(1, 0, 18, 2)}, axis);
          },
          {random_input({11, 9, 7}, dtype), random_input({7, 18, 11}, dtype)}, kExact);
    }
    // 16-byte aligned rows (the vectorized path), a 1-D concatenation, and more pieces than one launch takes.
    check_parity(
        [](const TensorList& in) {
          return cat({in[0], in[1]}, 1);
        },
        {random_input({33, 64}, dtype), random_input({33, 32}, dtype)}, kExact);
    check_parity(
        [](const TensorList& in) {
          return cat({in[0], in[1]}, 0);
        },
        {random_input({1}, dtype), random_input({129}, dtype)}, kExact);
    check_parity(
        [](const TensorList& in) {
          std::vector<Tensor> many;
          for (int64_t i = 0; i < 70; ++i) many.push_back(in[0].narrow(1, i % 5, 1 + i % 3));
          return cat(many, 1);
        },
        {random_input({3, 8}, dtype)}, kExact);
    check_parity(
        [](const TensorList& in) {
          return cat({in[0], in[1]}, 1);
        },
        {random_input({0, 3}, dtype), random_input({0, 5}, dtype)}, kExact);
  }
  // Mixed dtypes promote; gradients flow back in each input's dtype.
  check_parity(
      [](const TensorList& in) {
        return cat({in[0], in[1], in[2]}, 1);
      },
      {random_input({5, 3}, DType::f16), random_input({5, 2}, DType::f32), random_input({5, 1}, DType::i32)}, kExact);
  for (DType dtype : kFloatDTypes) {
    check_backward_parity(
        [](const TensorList& in) {
          return cat({in[0], in[1].t(), in[0]}, -1);
        },
        {random_input({5, 7}, dtype), random_input({3, 5}, dtype)}, kExact);
  }
  check_backward_parity(
      [](const TensorList& in) {
        return cat({in[0], in[1]}, 0);
      },
      {random_input({2, 3}, DType::f16), random_input({4, 3}, DType::f32)}, kExact);
  CHECK_THROWS_AS(cat({random_input({2}, DType::f32).to(kCuda0), random_input({2}, DType::f32)}), DeviceError);
}

GENESIS_CUDA_PARITY("stack") {
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    for (int64_t axis : {0, 1, 2, 3, -1, -4}) {
      INFO("axis " << axis);
      check_parity(
          [axis](const TensorList& in) {
            return stack({in[0], in[1].transpose(0, 2), in[0]}, axis);
          },
          {random_input({5, 3, 7}, dtype), random_input({7, 3, 5}, dtype)}, kExact);
    }
    check_parity(
        [](const TensorList& in) {
          return stack({in[0], in[1]}, 0);
        },
        {random_input({}, dtype), random_input({}, dtype)}, kExact);
    check_parity(
        [](const TensorList& in) {
          return stack({in[0], in[1]}, 1);
        },
        {random_input({4, 0}, dtype), random_input({4, 0}, dtype)}, kExact);
  }
  for (DType dtype : kFloatDTypes) {
    check_backward_parity(
        [](const TensorList& in) {
          return stack({in[0], in[1].t()}, 1);
        },
        {random_input({5, 3}, dtype), random_input({3, 5}, dtype)}, kExact);
  }
}

GENESIS_CUDA_PARITY("split") {
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    for (int64_t axis : kAxes) {
      INFO("axis " << axis);
      const int64_t length = kBase[static_cast<size_t>(axis < 0 ? axis + 3 : axis)];
      for (size_t piece = 0; piece < static_cast<size_t>((length + 3) / 4); ++piece) {
        check_parity([axis, piece](const TensorList& in) { return split(in[0], 4, axis)[piece].contiguous(); },
                     {random_input(kBase, dtype)}, kExact);
      }
    }
    for (size_t piece = 0; piece < 3; ++piece) {
      check_parity(
          [piece](const TensorList& in) {
            return split(in[0].t(), {2, 0, 3}, 1)[piece].contiguous();
          },
          {random_input({5, 4}, dtype)}, kExact);
    }
  }
  for (DType dtype : kFloatDTypes) {
    check_backward_parity([](const TensorList& in) { return split(in[0], 3, -1)[1]; }, {random_input({4, 7}, dtype)},
                          kExact);
  }
}

GENESIS_CUDA_PARITY("chunk") {
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    for (int64_t axis : kAxes) {
      INFO("axis " << axis);
      for (size_t piece = 0; piece < 3; ++piece) {
        check_parity([axis, piece](const TensorList& in) { return chunk(in[0], 3, axis)[piece].contiguous(); },
                     {random_input(kBase, dtype)}, kExact);
      }
    }
  }
  for (DType dtype : kFloatDTypes) {
    check_backward_parity([](const TensorList& in) { return chunk(in[0].t(), 2, 0)[1]; }, {random_input({4, 7}, dtype)},
                          kExact);
  }
}

GENESIS_CUDA_PARITY("index_select") {
  for (DType index_dtype : kIndexDTypes) {
    INFO("index dtype " << dtype_name(index_dtype));
    for (DType dtype : kAllDTypes) {
      INFO("dtype " << dtype_name(dtype));
      for (int64_t axis : kAxes) {
        INFO("axis " << axis);
        const int64_t bound = kBase[static_cast<size_t>(axis < 0 ? axis + 3 : axis)];
        // More picks than rows: repeated indices.
        check_parity([axis](const TensorList& in) { return index_select(in[0], axis, in[1]); },
                     {random_input(kBase, dtype), random_index({23}, bound, index_dtype)}, kExact);
        check_parity(
            [axis](const TensorList& in) {
              return index_select(in[0].permute({2, 0, 1}), axis, in[1]);
            },
            {random_input({9, 11, 7}, dtype), random_index({5}, 7, index_dtype)}, kExact);
        check_parity([axis](const TensorList& in) { return index_select(in[0], axis, in[1]); },
                     {random_input(kBase, dtype), random_index({0}, bound, index_dtype)}, kExact);
      }
      check_parity([](const TensorList& in) { return index_select(in[0], 0, in[1]); },
                   {random_input({6}, dtype), random_index({}, 6, index_dtype)}, kExact);
    }
    for (DType dtype : kFloatDTypes) {
      // Every axis of a transposed input; rows 5 and 6 of 7 are never picked.
      for (int64_t axis : kAxes) {
        INFO("axis " << axis);
        Tensor index = random_index({40}, 5, index_dtype);
        check_backward_parity(
            [axis, index](const TensorList& in) {
              return index_select(in[0].transpose(0, 2), axis, index.to(in[0].device()));
            },
            {random_input({7, 8, 9}, dtype)}, kExact);
      }
      Tensor none = random_index({0}, 5, index_dtype);
      check_backward_parity([none](const TensorList& in) { return index_select(in[0], 1, none.to(in[0].device())); },
                            {random_input({3, 5}, dtype)}, kExact);
    }
    // Thousands of picks of a few rows: the gradient sums long runs, the same bits every time.
    Tensor index = random_index({5000}, 3, index_dtype);
    check_deterministic(
        [index](const TensorList& in) {
          Tensor x = in[0].detach().requires_grad_(true);
          sum(mul(index_select(x, 0, index.to(x.device())), in[1])).backward();
          return x.grad();
        },
        {random_input({3, 17}, DType::f32), random_input({5000, 17}, DType::f32)});
    Tensor x = random_input({4, 3}, DType::f32).to(kCuda0);
    raised_at_next_sync(
        [&] {
          return index_select(x, 0, tensor({1, 4}, {2}, {.dtype = index_dtype}).to(kCuda0));
        },
        {"index_select: index 4 is out of range [0, 4)"});
    raised_at_next_sync(
        [&] {
          return index_select(x, 1, tensor({0, -2}, {2}, {.dtype = index_dtype}).to(kCuda0));
        },
        {"index_select: index -2 is out of range [0, 3)"});
    // The gradient skips the bad pick (reported again by the backward) and sums the others.
    Tensor w = tensor({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}).to(kCuda0).requires_grad_(true);
    Tensor gw = raised_at_next_sync(
        [&] {
          sum(index_select(w, 1, tensor({3, 7, 3, 0, -1}, {5}, {.dtype = index_dtype}).to(kCuda0))).backward();
          return w.grad();
        },
        {"index_select: index ", "is out of range [0, 4)"});
    CHECK(gw.to_vector<float>() == std::vector<float>{1, 0, 0, 2, 1, 0, 0, 2});
    check_parity([](const TensorList& in) { return index_select(in[0], 0, in[1]); },
                 {random_input({4, 3}, DType::f32), random_index({6}, 4, index_dtype)}, kExact);
    CHECK_THROWS_AS(index_select(x, 0, tensor({1}, {1}, {.dtype = index_dtype})), DeviceError);
  }
}

GENESIS_CUDA_PARITY("gather") {
  for (DType index_dtype : kIndexDTypes) {
    INFO("index dtype " << dtype_name(index_dtype));
    for (DType dtype : kAllDTypes) {
      INFO("dtype " << dtype_name(dtype));
      for (int64_t axis : kAxes) {
        INFO("axis " << axis);
        const size_t ax = static_cast<size_t>(axis < 0 ? axis + 3 : axis);
        Shape index_shape{5, 9, 4};
        index_shape[ax] = 13;  // longer than the input along the gathered axis
        check_parity([axis](const TensorList& in) { return gather(in[0], axis, in[1]); },
                     {random_input(kBase, dtype), random_index(index_shape, kBase[ax], index_dtype)}, kExact);
        // A transposed input and a transposed index.
        check_parity(
            [axis](const TensorList& in) { return gather(in[0].transpose(0, 2), axis, in[1].transpose(0, 2)); },
            {random_input({11, 9, 7}, dtype), random_index({4, 9, 5}, 4, index_dtype)}, kExact);
      }
      check_parity([](const TensorList& in) { return gather(in[0], 1, in[1]); },
                   {random_input({3, 4}, dtype), random_index({3, 0}, 4, index_dtype)}, kExact);
    }
    for (DType dtype : kFloatDTypes) {
      Tensor index = random_index({6, 30}, 3, index_dtype);
      check_backward_parity([index](const TensorList& in) { return gather(in[0], 1, index.to(in[0].device())); },
                            {random_input({7, 3}, dtype)}, kExact);
      Tensor transposed = random_index({30, 6}, 3, index_dtype).t();
      check_backward_parity(
          [transposed](const TensorList& in) { return gather(in[0].t(), 1, transposed.to(in[0].device())); },
          {random_input({3, 7}, dtype)}, kExact);
    }
    // A bad entry's output is zero and the rest is gathered; the gradient skips it.
    Tensor x = tensor({1, 2, 3, 4, 5, 6}, {2, 3}).to(kCuda0).requires_grad_(true);
    Tensor picked = raised_at_next_sync(
        [&] {
          return gather(x, 1, tensor({0, 3, 1, 2}, {2, 2}, {.dtype = index_dtype}).to(kCuda0));
        },
        {"gather: index 3 is out of range [0, 3)"});
    CHECK(picked.to_vector<float>() == std::vector<float>{1, 0, 5, 6});
    Tensor gx = raised_at_next_sync(
        [&] {
          sum(gather(x, 0, tensor({1, 1, 2, 0, 5, 1}, {2, 3}, {.dtype = index_dtype}).to(kCuda0))).backward();
          return x.grad();
        },
        {"gather: index ", "is out of range [0, 2)"});
    CHECK(gx.to_vector<float>() == std::vector<float>{1, 0, 0, 1, 1, 1});
    check_parity([](const TensorList& in) { return gather(in[0], 0, in[1]); },
                 {random_input({4, 3}, DType::f32), random_index({2, 3}, 4, index_dtype)}, kExact);
  }
}

GENESIS_CUDA_PARITY("scatter_add") {
  const DType numeric[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};
  for (DType index_dtype : kIndexDTypes) {
    INFO("index dtype " << dtype_name(index_dtype));
    for (DType dtype : numeric) {
      INFO("dtype " << dtype_name(dtype));
      for (int64_t axis : kAxes) {
        INFO("axis " << axis);
        const size_t ax = static_cast<size_t>(axis < 0 ? axis + 3 : axis);
        Shape index_shape{5, 9, 4}, src_shape{6, 9, 5};
        index_shape[ax] = 17;  // more contributions than destinations: repeated indices
        src_shape[ax] = 19;
        check_parity([axis](const TensorList& in) { return scatter_add(in[0], axis, in[1], in[2]); },
                     {random_input(kBase, dtype, -8, 8), random_index(index_shape, kBase[ax], index_dtype),
                      random_input(src_shape, dtype, -8, 8)},
                     kExact);
      }
      // Non-contiguous input, index and src.
      check_parity(
          [](const TensorList& in) { return scatter_add(in[0].t(), 0, in[1].t(), in[2].slice(1, 0, 20, 2).t()); },
          {random_input({5, 4}, dtype, -8, 8), random_index({3, 9}, 4, index_dtype),
           random_input({3, 20}, dtype, -8, 8)},
          kExact);
      check_parity([](const TensorList& in) { return scatter_add(in[0], 0, in[1], in[2]); },
                   {random_input({4, 3}, dtype), random_index({0, 3}, 4, index_dtype), random_input({2, 3}, dtype)},
                   kExact);
    }
    for (DType dtype : kFloatDTypes) {
      Tensor index = random_index({9, 4}, 3, index_dtype);
      check_backward_parity(
          [index](const TensorList& in) { return scatter_add(in[0], 0, index.to(in[0].device()), in[1]); },
          {random_input({3, 5}, dtype), random_input({11, 4}, dtype)}, kExact);
    }
    // Many contributions to few destinations: long ordered runs, bit-identical every run.
    Tensor index = random_index({6000, 8}, 5, index_dtype);
    check_deterministic(
        [index](const TensorList& in) { return scatter_add(in[0], 0, index.to(in[0].device()), in[1]); },
        {random_input({5, 8}, DType::f32), random_input({6000, 8}, DType::f32)});
    check_parity([index](const TensorList& in) { return scatter_add(in[0], 0, index.to(in[0].device()), in[1]); },
                 {random_input({5, 8}, DType::f16), random_input({6000, 8}, DType::f16)}, kExact);
    // Bad contributions are dropped, the others summed. Four destinations: the sort key of a bad
    // one (4) needs one more bit than the destinations do.
    Tensor x = tensor({0, 10, 20, 30}, {4}).to(kCuda0);
    Tensor src = tensor({1, 2, 3, 4, 5, 6}, {6}).to(kCuda0);
    Tensor added = raised_at_next_sync(
        [&] {
          return scatter_add(x, 0, tensor({0, 9, 0, 3, -1, 4}, {6}, {.dtype = index_dtype}).to(kCuda0), src);
        },
        {"scatter_add: index ", "is out of range [0, 4)"});
    CHECK(added.to_vector<float>() == std::vector<float>{4, 10, 20, 34});
    Tensor y = random_input({4, 3}, DType::f32).to(kCuda0);
    raised_at_next_sync(
        [&] {
          return scatter_add(y, 1, tensor({-1, 0}, {1, 2}, {.dtype = index_dtype}).to(kCuda0),
                             random_input({1, 2}, DType::f32).to(kCuda0));
        },
        {"scatter_add: index -1 is out of range [0, 3)"});
    check_parity(
        [](const TensorList& in) { return scatter_add(in[0], 1, in[1], in[2]); },
        {random_input({4, 3}, DType::f32), random_index({4, 5}, 3, index_dtype), random_input({4, 5}, DType::f32)},
        kExact);
  }
  Tensor flags = random_input({3}, DType::boolean).to(kCuda0);
  CHECK_THROWS_AS(scatter_add(flags, 0, tensor({0}, {1}, {.dtype = DType::i64}).to(kCuda0), flags.narrow(0, 0, 1)),
                  DTypeError);
}

namespace {

void check_triangle(Tensor (*op)(const Tensor&, int64_t)) {
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    for (int64_t diagonal : {-40, -2, 0, 3, 200}) {
      INFO("diagonal " << diagonal);
      for (const Shape& shape : {Shape{37, 129}, Shape{3, 5, 7}, Shape{2, 3, 1, 6}, Shape{0, 4}}) {
        check_parity([op, diagonal](const TensorList& in) { return op(in[0], diagonal); }, {random_input(shape, dtype)},
                     kExact);
      }
      check_parity([op, diagonal](const TensorList& in) { return op(in[0].transpose(-1, -2), diagonal); },
                   {random_input({3, 9, 5}, dtype)}, kExact);
    }
  }
  for (DType dtype : kFloatDTypes) {
    check_backward_parity([op](const TensorList& in) { return op(in[0].t(), 1); }, {random_input({6, 5}, dtype)},
                          kExact);
  }
}

}  // namespace

GENESIS_CUDA_PARITY("tril") {
  check_triangle(&tril);
}

GENESIS_CUDA_PARITY("triu") {
  check_triangle(&triu);
}

GENESIS_CUDA_PARITY("repeat") {
  const std::vector<std::vector<int64_t>> repeat_cases = {{2, 1, 3}, {1, 1}, {3, 2}, {0, 2}, {2, 1, 1, 2}};
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    for (const std::vector<int64_t>& repeats : repeat_cases) {
      INFO("repeats " << shape_str(repeats));
      check_parity([&repeats](const TensorList& in) { return repeat(in[0], repeats); }, {random_input({3, 5}, dtype)},
                   kExact);
      check_parity([&repeats](const TensorList& in) { return repeat(in[0].t(), repeats); },
                   {random_input({5, 3}, dtype)}, kExact);
    }
    check_parity([](const TensorList& in) { return repeat(in[0], {4}); }, {random_input({}, dtype)}, kExact);
  }
  for (DType dtype : kFloatDTypes) {
    check_backward_parity(
        [](const TensorList& in) {
          return repeat(in[0].t(), {2, 3, 1});
        },
        {random_input({5, 3}, dtype)}, sum_tolerance(dtype));
  }
}

GENESIS_CUDA_PARITY("flip") {
  const std::vector<std::vector<int64_t>> axes_cases = {{0}, {1}, {2}, {-1}, {0, 2}, {-3, 1, 2}, {}};
  for (DType dtype : kAllDTypes) {
    INFO("dtype " << dtype_name(dtype));
    for (const std::vector<int64_t>& axes : axes_cases) {
      INFO("axes " << shape_str(axes));
      check_parity([&axes](const TensorList& in) { return flip(in[0], axes); }, {random_input(kBase, dtype)}, kExact);
      check_parity(
          [&axes](const TensorList& in) {
            return flip(in[0].permute({2, 0, 1}), axes);
          },
          {random_input({11, 7, 9}, dtype)}, kExact);
    }
    check_parity([](const TensorList& in) { return flip(in[0], {1}); }, {random_input({3, 0}, dtype)}, kExact);
  }
  for (DType dtype : kFloatDTypes) {
    check_backward_parity(
        [](const TensorList& in) {
          return flip(in[0].t(), {0, -1});
        },
        {random_input({4, 7}, dtype)}, kExact);
  }
}

GENESIS_CUDA_PARITY("one_hot") {
  for (DType index_dtype : kIndexDTypes) {
    INFO("index dtype " << dtype_name(index_dtype));
    check_parity([](const TensorList& in) { return one_hot(in[0], 7); }, {random_index({13, 5}, 7, index_dtype)},
                 kExact);
    check_parity([](const TensorList& in) { return one_hot(in[0].t()); }, {random_index({13, 5}, 9, index_dtype)},
                 kExact);
    check_parity([](const TensorList& in) { return one_hot(in[0], 3); }, {random_index({}, 3, index_dtype)}, kExact);
    check_parity([](const TensorList& in) { return one_hot(in[0], 4); }, {random_index({0}, 4, index_dtype)}, kExact);
    // With num_classes given, a bad index's row stays zero and the error comes at the next sync.
    Tensor rows = raised_at_next_sync(
        [&] {
          return one_hot(tensor({1, 5, 0}, {3}, {.dtype = index_dtype}).to(kCuda0), 3);
        },
        {"one_hot: index 5 is out of range [0, 3)"});
    CHECK(rows.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0, 0, 0, 0, 1, 0, 0});
    raised_at_next_sync(
        [&] {
          return one_hot(tensor({0, -1}, {2}, {.dtype = index_dtype}).to(kCuda0), 3);
        },
        {"one_hot: index -1 is out of range [0, 3)"});
    CHECK_THROWS_WITH(one_hot(tensor({0}, {1}, {.dtype = index_dtype}).to(kCuda0), 0),
                      Catch::Contains("one_hot") && Catch::Contains("0 classes"));
    check_parity([](const TensorList& in) { return one_hot(in[0], 4); }, {random_index({5}, 4, index_dtype)}, kExact);
    // Inferring num_classes reads the indices on the host, so a negative one throws from the op.
    CHECK_THROWS_AS(one_hot(tensor({0, -1}, {2}, {.dtype = index_dtype}).to(kCuda0)), IndexError);
  }
}

TEST_CASE("index_select, gather, scatter_add and one_hot do not wait on the device", "[cuda]") {
  if (!cuda_ready()) return;
  Tensor x_host = random_input({5, 7}, DType::f32);
  Tensor picks = tensor({4, 0, 4, 2}, {4}, {.dtype = DType::i64}).to(kCuda0);
  check_no_host_read([&] {
    Tensor x = x_host.to(kCuda0).requires_grad_(true);
    sum(index_select(x, 0, picks)).backward();
    return x.grad();
  });
  Tensor positions = random_index({3, 7}, 5, DType::i32).to(kCuda0);
  check_no_host_read([&] {
    Tensor x = x_host.to(kCuda0).requires_grad_(true);
    sum(gather(x, 0, positions)).backward();
    return x.grad();
  });
  check_no_host_read([&] {
    Tensor x = x_host.to(kCuda0).requires_grad_(true);
    Tensor src = random_input({3, 7}, DType::f32).to(kCuda0).requires_grad_(true);
    sum(scatter_add(x, 0, positions, src)).backward();
    return src.grad();
  });
  check_no_host_read([&] { return one_hot(picks, 5); });
  // Inferring the class count reads the indices on the host: the pending fault comes out there.
  Tensor pending = one_hot(tensor({7}, {1}, {.dtype = DType::i64}).to(kCuda0), 3);
  CHECK_THROWS_WITH(one_hot(picks), Catch::Contains("one_hot: index 7 is out of range [0, 3)"));
  CHECK(one_hot(picks).size(1) == 5);
}
