#pragma once
// In-memory supervised datasets (inputs + class or number targets) and the Fashion-MNIST loader.
#include <cstdint>
#include <string>
#include <utility>

#include "libgenesis/core/tensor.h"

namespace genesis::data {

struct Dataset {
  Tensor inputs;   // [N, ...] f32, contiguous, CPU
  Tensor targets;  // [N] i64 class indices, or [N, ...] f32 (a regression's numbers); CPU
  int64_t size() const { return inputs.defined() ? inputs.size(0) : 0; }
};

struct Normalization {
  double mean = 0.0;
  double std = 1.0;
};

// Fashion-MNIST from the IDX files of Debian's dataset-fashion-mnist package.
// split: "train" (60000) or "test" (10000). Images become [N, 1, 28, 28] f32 in [0, 1].
// Throws ValueError naming the file and the first bad index on a label outside 0..9, labels
// that are not integers, or a pixel that is not finite.
Dataset load_fashion_mnist(const std::string& dir, const std::string& split);
// Mean and standard deviation of all input values.
Normalization compute_normalization(const Dataset& ds);
// (x - mean) / std in place.
void normalize(Dataset& ds, Normalization n);
// Splits off the last `fraction` of a seeded permutation as validation: {train, val}.
std::pair<Dataset, Dataset> split_validation(const Dataset& ds, double fraction, uint64_t seed);
// The row indices of that split of `rows` rows: {train, val}.
std::pair<std::vector<int64_t>, std::vector<int64_t>> validation_rows(int64_t rows, double fraction, uint64_t seed);
// Throws ValueError (naming `where`) unless inputs are contiguous CPU [N, ...] and targets
// contiguous, i64 [N] or f32 [N, ...].
void check_dataset(const Dataset& ds, const char* where);
// Rows `indices` of ds (a copy).
Dataset take(const Dataset& ds, const std::vector<int64_t>& indices);

// Default location of the Fashion-MNIST files installed by dataset-fashion-mnist.
inline constexpr int64_t kFashionMnistClasses = 10;
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

}  // namespace genesis::data
