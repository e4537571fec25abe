#pragma once
// Neural-network functions: softmax family, normalization, embedding, dropout, one_hot.
// Half-precision inputs compute in f32 internally.
#include <optional>
#include <string_view>

#include "libgenesis/core/generator.h"
#include "libgenesis/core/tensor.h"

namespace genesis {

Tensor softmax(const Tensor& x, int64_t axis);
Tensor log_softmax(const Tensor& x, int64_t axis);
// Normalizes over the trailing dimensions given by normalized_shape; weight/bias optional.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// x / sqrt(mean(x^2) + eps) * weight over the trailing dimensions.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(), double eps = 1e-6);
// Rows of weight [num, dim] picked by integer indices of any shape -> [..., dim].
// Out-of-range indices throw IndexError. Rows equal to padding_idx get no gradient.
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);
// Zeroes elements with probability p and scales the rest by 1/(1-p) when training;
// the identity otherwise. Draws from `gen` (default_generator() when null).
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);
// [..., num_classes] i64 tensor of zeros and ones; num_classes < 0 means max(index) + 1.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

namespace detail {
// Throws IndexError naming `op` unless every value of the CPU index tensor `index` other
// than `ignore` lies in [0, bound); the message calls them `what` and the bound `bound_name`
// ("target value 7 is out of range for 5 classes"). Returns how many values were not ignored.
int64_t check_index_values(std::string_view op, const Tensor& index, int64_t bound, std::optional<int64_t> ignore,
                           std::string_view what, std::string_view bound_name);
}  // namespace detail

}  // namespace genesis
