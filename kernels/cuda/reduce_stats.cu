// CUDA var, logsumexp and norm on the engine of reduce_engine.cuh: each is one pass over the
// input with a small running state (Welford's mean and squared deviations; the running max and
// the sum of exponentials relative to it; a norm accumulator).
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/common/norm_kind.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/nn_rows.cuh"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/reduce_engine.cuh"

namespace genesis::kernels::cuda {

namespace {

template <class T>
struct VarOp {
  using A = float_acc_t<T>;
  struct Acc {
    A mean;
    A m2;  // sum of squared deviations from mean
    int64_t count;
  };
  T* out;
  int64_t correction;

  __device__ Acc identity() const { return {A(0), A(0), 0}; }
  __device__ Acc step(Acc acc, T x, int64_t) const {
    const A v = to_acc<A>(x);
    acc.count += 1;
    const A delta = v - acc.mean;
    acc.mean += delta / static_cast<A>(acc.count);
    acc.m2 += delta * (v - acc.mean);
    return acc;
  }
  // Chan et al.'s pairwise update.
  __device__ Acc combine(Acc a, Acc b) const {
    if (b.count == 0) return a;
    if (a.count == 0) return b;
    const int64_t count = a.count + b.count;
    const A delta = b.mean - a.mean;
    const A b_share = static_cast<A>(b.count) / static_cast<A>(count);
    return {a.mean + delta * b_share, a.m2 + b.m2 + delta * delta * static_cast<A>(a.count) * b_share, count};
  }
  __device__ void store(int64_t i, Acc acc) const {
    const int64_t dof = acc.count - correction > 0 ? acc.count - correction : 0;
    out[i] = from_acc<T>(acc.m2 / static_cast<A>(dof));  // 0 / 0 = NaN as on the CPU
  }
};

template <class T>
struct LogSumExpOp {
  using A = float_acc_t<T>;
  using Acc = ExpSum<A>;  // max: NaN once a NaN was seen; +-inf ends the row at that value
  T* out;

  __device__ Acc identity() const { return {-std::numeric_limits<A>::infinity(), A(0)}; }
  __device__ Acc step(Acc acc, T x, int64_t) const {
    const A v = to_acc<A>(x);
    if (v != v) {
      acc.max = v;
    } else if (v > acc.max) {
      acc.sum = acc.sum * exp(acc.max - v) + A(1);
      acc.max = v;
    } else if (isfinite(acc.max)) {
      acc.sum += exp(v - acc.max);
    }
    return acc;
  }
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.max != a.max) return a;
    if (b.max != b.max) return b;
    const A max = a.max > b.max ? a.max : b.max;
    if (!isfinite(max)) return {max, A(0)};
    return merge_at(a, b, max, [](A sum, A from, A to) { return sum * exp(from - to); });
  }
  __device__ void store(int64_t i, Acc acc) const {
    out[i] = from_acc<T>(isfinite(acc.max) ? acc.max + log(acc.sum) : acc.max);
  }
};

// The 2-norm has its own instantiation (it is the one on hot paths); the other kinds share one
// whose uniform switch costs a few instructions per element of a memory-bound loop.
template <class T, bool kL2>
struct NormOp {
  using A = float_acc_t<T>;
  using Acc = A;
  T* out;
  NormKind kind;
  A p;

  __device__ Acc identity() const {
    return !kL2 && kind == NormKind::min_abs ? std::numeric_limits<A>::infinity() : A(0);
  }
  __device__ Acc step(Acc acc, T x, int64_t) const {
    const A v = to_acc<A>(x);
    if constexpr (kL2) {
      return acc + v * v;
    } else {
      switch (kind) {
        case NormKind::max_abs: return NanMax{}(acc, fabs(v));
        case NormKind::min_abs: return NanMin{}(acc, fabs(v));
        case NormKind::count_nonzero: return acc + (v != A(0) ? A(1) : A(0));
        case NormKind::l1: return acc + fabs(v);
        default: return acc + pow(fabs(v), p);
      }
    }
  }
  __device__ Acc combine(Acc a, Acc b) const {
    if (!kL2 && kind == NormKind::max_abs) return NanMax{}(a, b);
    if (!kL2 && kind == NormKind::min_abs) return NanMin{}(a, b);
    return a + b;
  }
  __device__ void store(int64_t i, Acc acc) const {
    A result = acc;
    if (kL2) result = sqrt(acc);
    else if (kind == NormKind::general) result = pow(acc, A(1) / p);
    out[i] = from_acc<T>(result);
  }
};

}  // namespace

void var(DType dtype, ReduceShape shape, int64_t correction, const void* in, void* out, cudaStream_t stream) {
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "var", {
    reduce_engine::reduce(shape, static_cast<const scalar_t*>(in),
                          VarOp<scalar_t>{static_cast<scalar_t*>(out), correction}, stream);
  });
}

void logsumexp(DType dtype, ReduceShape shape, const void* in, void* out, cudaStream_t stream) {
  // Rows that fit in registers take the softmax kernel's two passes over them: one exp per
  // element, where the running form pays a rescale branch per element.
  if (shape.inner == 1 && logsumexp_in_registers(dtype, shape.outer, shape.extent, in, out, stream)) return;
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "logsumexp", {
    reduce_engine::reduce(shape, static_cast<const scalar_t*>(in), LogSumExpOp<scalar_t>{static_cast<scalar_t*>(out)},
                          stream);
  });
}

void norm(DType dtype, ReduceShape shape, double p, const void* in, void* out, cudaStream_t stream) {
  const NormKind kind = norm_kind(p);
  GENESIS_CUDA_DISPATCH_FLOAT(dtype, "norm", {
    using A = float_acc_t<scalar_t>;
    const auto* x = static_cast<const scalar_t*>(in);
    auto* y = static_cast<scalar_t*>(out);
    if (kind == NormKind::l2)
      reduce_engine::reduce(shape, x, NormOp<scalar_t, true>{y, kind, static_cast<A>(p)}, stream);
    else
      reduce_engine::reduce(shape, x, NormOp<scalar_t, false>{y, kind, static_cast<A>(p)}, stream);
  });
}

}  // namespace genesis::kernels::cuda
