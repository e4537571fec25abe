// The update loops run on the widest vector unit (with_cpu_isa) without fused multiply-adds
// (this file is compiled with -ffp-contract=off): every product and sum rounds as the CUDA
// kernels' (compiled with --fmad=false) do, so both devices give the same bits.
#include "kernels/cpu/optim.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/loops.h"

namespace genesis::kernels::cpu {

namespace {

template <class T, bool kDecoupled, bool kAmsgrad>
void adam_loop(int64_t begin, int64_t end, T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
               T* __restrict v_max, T b1, T b2, T eps, T step_size, T bc2_sqrt, T decay, T wd) {
  for (int64_t i = begin; i < end; ++i) {
    T grad = g[i];
    T param = p[i];
    if constexpr (kDecoupled) {
      param *= decay;
    } else {
      grad += wd * param;
    }
    T mi = b1 * m[i] + (T(1) - b1) * grad;
    T vi = b2 * v[i] + (T(1) - b2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    T second = vi;
    if constexpr (kAmsgrad) {
      second = std::max(v_max[i], vi);
      v_max[i] = second;
    }
    T denom = std::sqrt(second) / bc2_sqrt + eps;
    p[i] = param - step_size * mi / denom;
  }
}

template <class T>
void adam_typed(int64_t n, T* p, const T* g, T* m, T* v, T* v_max, const AdamStep& s) {
  const T b1 = static_cast<T>(s.beta1), b2 = static_cast<T>(s.beta2), eps = static_cast<T>(s.eps);
  const T step_size = static_cast<T>(s.lr / s.bias_correction1);
  const T bc2_sqrt = static_cast<T>(std::sqrt(s.bias_correction2));
  const T decay = static_cast<T>(1.0 - s.lr * s.weight_decay);
  const T wd = static_cast<T>(s.weight_decay);
  parallel_for(n, 16, [&](int64_t begin, int64_t end) {
    with_cpu_isa([&] {
      // One loop per (decoupled, amsgrad): without branches inside, the compiler vectorizes it.
      if (s.decoupled && !s.amsgrad) {
        adam_loop<T, true, false>(begin, end, p, g, m, v, v_max, b1, b2, eps, step_size, bc2_sqrt, decay, wd);
      } else if (s.decoupled) {
        adam_loop<T, true, true>(begin, end, p, g, m, v, v_max, b1, b2, eps, step_size, bc2_sqrt, decay, wd);
      } else if (!s.amsgrad) {
        adam_loop<T, false, false>(begin, end, p, g, m, v, v_max, b1, b2, eps, step_size, bc2_sqrt, decay, wd);
      } else {
        adam_loop<T, false, true>(begin, end, p, g, m, v, v_max, b1, b2, eps, step_size, bc2_sqrt, decay, wd);
      }
    });
  });
}

template <class T, bool kMomentum>
void sgd_loop(int64_t begin, int64_t end, T* __restrict p, const T* __restrict g, T* __restrict buf, T lr, T mom,
              T damp, T wd, bool first_step, bool nesterov) {
  for (int64_t i = begin; i < end; ++i) {
    T d = g[i] + wd * p[i];
    if constexpr (kMomentum) {
      T b = first_step ? d : mom * buf[i] + damp * d;
      buf[i] = b;
      d = nesterov ? d + mom * b : b;
    }
    p[i] -= lr * d;
  }
}

template <class T>
void sgd_typed(int64_t n, T* p, const T* g, T* buf, const SgdStep& s) {
  const T lr = static_cast<T>(s.lr), mom = static_cast<T>(s.momentum), damp = static_cast<T>(1.0 - s.dampening);
  const T wd = static_cast<T>(s.weight_decay);
  parallel_for(n, 8, [&](int64_t begin, int64_t end) {
    with_cpu_isa([&] {
      if (s.momentum != 0.0) {
        sgd_loop<T, true>(begin, end, p, g, buf, lr, mom, damp, wd, s.first_step, s.nesterov);
      } else {
        sgd_loop<T, false>(begin, end, p, g, buf, lr, mom, damp, wd, s.first_step, s.nesterov);
      }
    });
  });
}

// c = b1 m + (1 - b1) g;  p = p (1 - lr wd) - lr sign(c);  m = b2 m + (1 - b2) g
template <class T>
void lion_loop(int64_t begin, int64_t end, T* __restrict p, const T* __restrict g, T* __restrict m, T b1, T b2, T lr,
               T decay) {
  for (int64_t i = begin; i < end; ++i) {
    T c = b1 * m[i] + (T(1) - b1) * g[i];
    T sign = c > T(0) ? T(1) : (c < T(0) ? T(-1) : T(0));
    p[i] = p[i] * decay - lr * sign;
    m[i] = b2 * m[i] + (T(1) - b2) * g[i];
  }
}

template <class T>
void lion_typed(int64_t n, T* p, const T* g, T* m, const LionStep& s) {
  const T b1 = static_cast<T>(s.beta1), b2 = static_cast<T>(s.beta2), lr = static_cast<T>(s.lr);
  const T decay = static_cast<T>(1.0 - s.lr * s.weight_decay);
  parallel_for(n, 8, [&](int64_t begin, int64_t end) {
    with_cpu_isa([&] { lion_loop<T>(begin, end, p, g, m, b1, b2, lr, decay); });
  });
}

bool skipped(const StepGate& gate) {
  return gate.skip_if && *gate.skip_if != 0.0f;
}

// Advances the gate's count of applied updates after an update.
void advance(const StepGate& gate) {
  if (gate.step) ++*gate.step;
}

}  // namespace

void lion_step(DType dtype, int64_t n, void* p, const void* g, void* m, const LionStep& s, const StepGate& gate) {
  if (skipped(gate)) return;
  GENESIS_DISPATCH_F32_F64(dtype, "lion_step (parameters must be f32 or f64)", {
    lion_typed(n, static_cast<scalar_t*>(p), static_cast<const scalar_t*>(g), static_cast<scalar_t*>(m), s);
  });
  advance(gate);
}

void adam_step(DType dtype, int64_t n, void* p, const void* g, void* m, void* v, void* v_max, const AdamStep& s,
               const StepGate& gate) {
  if (skipped(gate)) return;
  AdamStep at = s;
  if (gate.step) {
    at.bias_correction1 = bias_correction(s.beta1, *gate.step + 1);
    at.bias_correction2 = bias_correction(s.beta2, *gate.step + 1);
  }
  GENESIS_DISPATCH_F32_F64(dtype, "adam_step (parameters must be f32 or f64)", {
    adam_typed(n, static_cast<scalar_t*>(p), static_cast<const scalar_t*>(g), static_cast<scalar_t*>(m),
               static_cast<scalar_t*>(v), static_cast<scalar_t*>(v_max), at);
  });
  advance(gate);
}

void sgd_step(DType dtype, int64_t n, void* p, const void* g, void* momentum_buffer, const SgdStep& s,
              const StepGate& gate) {
  if (skipped(gate)) return;
  SgdStep at = s;
  if (gate.step) at.first_step = *gate.step == 0;
  GENESIS_DISPATCH_F32_F64(dtype, "sgd_step (parameters must be f32 or f64)", {
    sgd_typed(n, static_cast<scalar_t*>(p), static_cast<const scalar_t*>(g), static_cast<scalar_t*>(momentum_buffer),
              at);
  });
  advance(gate);
}

}  // namespace genesis::kernels::cpu
