#include "kernels/cpu/amp.h"

#include <atomic>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/loops.h"
#include "libgenesis/core/half.h"

namespace genesis::kernels::cpu {

namespace {

// One read and one write per element: memory bound.
template <class T>
void unscale_typed(T* x, int64_t n, float inv, std::atomic<bool>& found) {
  using M = std::conditional_t<std::is_same_v<T, double>, double, float>;
  parallel_for(n, 2, [&](int64_t begin, int64_t end) {
    bool local = false;
    for (int64_t i = begin; i < end; ++i) {
      const M v = static_cast<M>(x[i]);
      local |= !std::isfinite(v);
      x[i] = static_cast<T>(v * static_cast<M>(inv));
    }
    if (local) found.store(true, std::memory_order_relaxed);
  });
}

}  // namespace

void unscale_grads(std::span<const GradBuffer> grads, const float* scale, float* found_inf) {
  const float inv = inverse_scale(*scale);
  std::atomic<bool> found{false};
  for (const GradBuffer& g : grads) {
    GENESIS_DISPATCH_FLOAT(g.dtype, "unscale_grads", unscale_typed(static_cast<scalar_t*>(g.data), g.n, inv, found));
  }
  if (found.load()) *found_inf = 1.0f;
}

}  // namespace genesis::kernels::cpu
