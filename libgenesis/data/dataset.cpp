#include "libgenesis/data/dataset.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "libgenesis/core/error.h"
#include "libgenesis/data/idx.h"
#include "libgenesis/data/permutation.h"

namespace genesis::data {

Dataset load_fashion_mnist(const std::string& dir, const std::string& split) {
  GENESIS_CHECK(split == "train" || split == "test", UsageError, "fashion_mnist: unknown split '", split,
                "' (valid: train, test)");
  std::string prefix = split == "train" ? "train" : "t10k";
  std::string images = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  std::string labels = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  for (const std::string& f : {images, labels}) {
    GENESIS_CHECK(std::filesystem::exists(f), ValueError, "Fashion-MNIST file not found: ", f,
                  " (install the Debian package dataset-fashion-mnist: scripts/setup.sh does, or set data.path)");
  }
  Tensor x = read_idx(images);
  Tensor y = read_idx(labels);
  GENESIS_CHECK(x.dim() == 3 && y.dim() == 1 && x.size(0) == y.size(0), ValueError, "fashion_mnist: images ",
                x.shape(), " and labels ", y.shape(), " in ", dir, " do not match");
  // Checked here, not when a batch comes up: a bad label would otherwise stop training (or the
  // evaluation after it) hours in, and one NaN pixel makes every normalized input NaN.
  GENESIS_CHECK(y.dtype() == DType::i64, ValueError, labels, ": labels are ", dtype_name(y.dtype()),
                "; Fashion-MNIST labels are unsigned bytes (IDX type 0x08)");
  const int64_t* label = y.data<int64_t>();
  for (int64_t i = 0; i < y.numel(); ++i)
    GENESIS_CHECK(label[i] >= 0 && label[i] < kFashionMnistClasses, ValueError, labels, ": label ", label[i],
                  " at index ", i, " is outside the ", kFashionMnistClasses, " classes (0..", kFashionMnistClasses - 1,
                  "); the file is corrupt");
  GENESIS_CHECK(x.dtype() == DType::f32, ValueError, images, ": pixels are ", dtype_name(x.dtype()),
                "; Fashion-MNIST images are unsigned bytes (IDX type 0x08) or f32");
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    GENESIS_CHECK(std::isfinite(p[i]), ValueError, images, ": pixel ", i, " (image ", i / (x.size(1) * x.size(2)),
                  ") is ", p[i], "; the file is corrupt");
    p[i] /= 255.0f;
  }
  return {x.view({x.size(0), 1, x.size(1), x.size(2)}), y};
}

Normalization compute_normalization(const Dataset& ds) {
  const float* p = ds.inputs.data<float>();
  int64_t n = ds.inputs.numel();
  double sum = 0.0, sq = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    sum += p[i];
    sq += static_cast<double>(p[i]) * p[i];
  }
  double mean = sum / static_cast<double>(n);
  return {mean, std::sqrt(std::max(0.0, sq / static_cast<double>(n) - mean * mean))};
}

void normalize(Dataset& ds, Normalization n) {
  GENESIS_CHECK(n.std > 0.0, ValueError, "normalize: standard deviation must be positive (got ", n.std, ")");
  float* p = ds.inputs.data<float>();
  auto mean = static_cast<float>(n.mean), inv = static_cast<float>(1.0 / n.std);
  for (int64_t i = 0; i < ds.inputs.numel(); ++i) p[i] = (p[i] - mean) * inv;
}

void check_dataset(const Dataset& ds, const char* where) {
  GENESIS_CHECK(ds.inputs.defined() && ds.targets.defined(), ValueError, where, ": dataset has no inputs or targets");
  GENESIS_CHECK(ds.inputs.dim() >= 1 && ds.inputs.is_contiguous() && ds.inputs.device().is_cpu(), ValueError, where,
                ": inputs must be a contiguous CPU tensor with a leading example dimension, got shape ",
                ds.inputs.shape());
  const bool classes = ds.targets.dtype() == DType::i64 && ds.targets.dim() == 1;
  const bool numbers = ds.targets.dtype() == DType::f32 && ds.targets.dim() >= 1;
  GENESIS_CHECK((classes || numbers) && ds.targets.is_contiguous() && ds.targets.device().is_cpu(), ValueError, where,
                ": targets must be a contiguous CPU tensor, 1-D i64 (classes) or [N, ...] f32 (a regression), got "
                "shape ",
                ds.targets.shape(), " of ", dtype_name(ds.targets.dtype()));
  GENESIS_CHECK(ds.targets.size(0) == ds.inputs.size(0), ValueError, where, ": ", ds.inputs.size(0),
                " inputs but ", ds.targets.size(0), " targets");
}

Dataset take(const Dataset& ds, const std::vector<int64_t>& indices) {
  check_dataset(ds, "take");
  Shape xs = ds.inputs.shape(), ys = ds.targets.shape();
  xs[0] = ys[0] = static_cast<int64_t>(indices.size());
  Dataset out{empty(xs, {.dtype = ds.inputs.dtype()}), empty(ys, {.dtype = ds.targets.dtype()})};
  // Row by row, in bytes: inputs and targets of any trailing shape.
  const auto bytes_per_row = [&](const Tensor& t) {
    return static_cast<size_t>(t.numel() / std::max<int64_t>(1, ds.size())) * t.element_size();
  };
  const size_t x_row = bytes_per_row(ds.inputs), y_row = bytes_per_row(ds.targets);
  const char* x_src = static_cast<const char*>(ds.inputs.data_ptr());
  const char* y_src = static_cast<const char*>(ds.targets.data_ptr());
  char* x_dst = static_cast<char*>(out.inputs.data_ptr());
  char* y_dst = static_cast<char*>(out.targets.data_ptr());
  for (size_t i = 0; i < indices.size(); ++i) {
    GENESIS_CHECK(indices[i] >= 0 && indices[i] < ds.size(), IndexError, "take: index ", indices[i],
                  " out of range for a dataset of ", ds.size());
    const auto at = static_cast<size_t>(indices[i]);
    std::memcpy(x_dst + i * x_row, x_src + at * x_row, x_row);
    std::memcpy(y_dst + i * y_row, y_src + at * y_row, y_row);
  }
  return out;
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> validation_rows(int64_t rows, double fraction, uint64_t seed) {
  GENESIS_CHECK(fraction >= 0.0 && fraction < 1.0, UsageError, "validation fraction must be in [0, 1) (got ",
                fraction, ")");
  auto n_val = static_cast<int64_t>(std::llround(fraction * static_cast<double>(rows)));
  std::vector<int64_t> perm = permutation(rows, seed, /*stream=*/0xDA7A);
  return {{perm.begin(), perm.end() - n_val}, {perm.end() - n_val, perm.end()}};
}

std::pair<Dataset, Dataset> split_validation(const Dataset& ds, double fraction, uint64_t seed) {
  auto [train, val] = validation_rows(ds.size(), fraction, seed);
  if (val.empty()) return {ds, Dataset{}};
  return {take(ds, train), take(ds, val)};
}

}  // namespace genesis::data
