#include "kernels/cpu/loss.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/row_reduce.h"

namespace genesis::kernels::cpu {

namespace {

// Row r = (o, i) reads its classes at base + c * inner: contiguous when inner == 1, and
// neighbouring rows share cache lines otherwise.
int64_t row_base(const ClassRows& s, int64_t r) {
  return (r / s.inner) * s.classes * s.inner + r % s.inner;
}

template <class T, class I>
void cross_entropy_typed(ClassRows s, const T* x, const I* target, int64_t ignore_index, double smoothing,
                         acc_t<T>* loss, acc_t<T>* lse_out) {
  using A = acc_t<T>;
  const A eps = static_cast<A>(smoothing);
  parallel_for(s.outer * s.inner, s.classes * 4, [&](int64_t begin, int64_t end) {
    // The row's logits gathered contiguously, then overwritten by their exps.
    std::vector<A> values(static_cast<size_t>(s.classes));
    A* buf = values.data();
    for (int64_t r = begin; r < end; ++r) {
      const auto t = static_cast<int64_t>(target[r]);
      if (t == ignore_index) {
        loss[r] = 0;
        lse_out[r] = 0;
        continue;
      }
      const T* xr = x + row_base(s, r);
      for (int64_t c = 0; c < s.classes; ++c) buf[c] = static_cast<A>(xr[c * s.inner]);
      const A m = row_max(buf, s.classes);
      const A sum_x = eps == A(0) ? A(0) : row_sum(buf, s.classes);
      const A target_logit = buf[t];
      for (int64_t c = 0; c < s.classes; ++c) buf[c] = std::exp(buf[c] - m);
      const A lse = m + std::log(row_sum(buf, s.classes));
      const A nll = lse - target_logit;
      loss[r] = eps == A(0) ? nll : (A(1) - eps) * nll + eps * (lse - sum_x / static_cast<A>(s.classes));
      lse_out[r] = lse;
    }
  });
}

template <class T, class I>
void cross_entropy_backward_typed(ClassRows s, const T* x, const I* target, const acc_t<T>* lse, int64_t ignore_index,
                                  double smoothing, const T* grad_loss, int64_t grad_stride, double scale, T* gx) {
  using A = acc_t<T>;
  const A eps = static_cast<A>(smoothing);
  const A uniform = eps / static_cast<A>(s.classes);
  parallel_for(s.outer * s.inner, s.classes * 3, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t base = row_base(s, r);
      const auto t = static_cast<int64_t>(target[r]);
      if (t == ignore_index) {
        for (int64_t c = 0; c < s.classes; ++c) gx[base + c * s.inner] = T(0);
        continue;
      }
      const A g = static_cast<A>(grad_loss[r * grad_stride]) * static_cast<A>(scale);
      for (int64_t c = 0; c < s.classes; ++c) {
        const int64_t k = base + c * s.inner;
        A d = std::exp(static_cast<A>(x[k]) - lse[r]) - uniform;
        if (c == t) d -= A(1) - eps;
        gx[k] = static_cast<T>(d * g);
      }
    }
  });
}

template <class T, class I>
void nll_loss_typed(ClassRows s, const T* lp, const I* target, int64_t ignore_index, acc_t<T>* loss) {
  parallel_for(s.outer * s.inner, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const auto t = static_cast<int64_t>(target[r]);
      loss[r] = t == ignore_index ? acc_t<T>(0) : -static_cast<acc_t<T>>(lp[row_base(s, r) + t * s.inner]);
    }
  });
}

template <class T, class I>
void nll_loss_backward_typed(ClassRows s, const I* target, int64_t ignore_index, const T* grad_loss,
                             int64_t grad_stride, double scale, T* gx) {
  using A = acc_t<T>;
  parallel_for(s.outer * s.inner, s.classes, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t base = row_base(s, r);
      for (int64_t c = 0; c < s.classes; ++c) gx[base + c * s.inner] = T(0);
      const auto t = static_cast<int64_t>(target[r]);
      if (t != ignore_index) {
        gx[base + t * s.inner] = static_cast<T>(-static_cast<A>(grad_loss[r * grad_stride]) * static_cast<A>(scale));
      }
    }
  });
}

}  // namespace

void cross_entropy(DType dtype, DType target_dtype, ClassRows shape, const void* logits, const void* target,
                   int64_t ignore_index, double label_smoothing, void* loss, void* lse) {
  GENESIS_DISPATCH_FLOAT(dtype, "cross_entropy", {
    using T = scalar_t;
    using A = acc_t<T>;
    GENESIS_DISPATCH_INDEX(target_dtype, "cross_entropy", {
      cross_entropy_typed(shape, static_cast<const T*>(logits), static_cast<const scalar_t*>(target), ignore_index,
                          label_smoothing, static_cast<A*>(loss), static_cast<A*>(lse));
    });
  });
}

void cross_entropy_backward(DType dtype, DType target_dtype, ClassRows shape, const void* logits, const void* target,
                            const void* lse, int64_t ignore_index, double label_smoothing, const void* grad_loss,
                            int64_t grad_stride, double scale, void* grad_logits) {
  GENESIS_DISPATCH_FLOAT(dtype, "cross_entropy backward", {
    using T = scalar_t;
    using A = acc_t<T>;
    GENESIS_DISPATCH_INDEX(target_dtype, "cross_entropy backward", {
      cross_entropy_backward_typed(shape, static_cast<const T*>(logits), static_cast<const scalar_t*>(target),
                                   static_cast<const A*>(lse), ignore_index, label_smoothing,
                                   static_cast<const T*>(grad_loss), grad_stride, scale, static_cast<T*>(grad_logits));
    });
  });
}

void nll_loss(DType dtype, DType target_dtype, ClassRows shape, const void* log_probs, const void* target,
              int64_t ignore_index, void* loss) {
  GENESIS_DISPATCH_FLOAT(dtype, "nll_loss", {
    using T = scalar_t;
    GENESIS_DISPATCH_INDEX(target_dtype, "nll_loss", {
      nll_loss_typed(shape, static_cast<const T*>(log_probs), static_cast<const scalar_t*>(target), ignore_index,
                     static_cast<acc_t<T>*>(loss));
    });
  });
}

void nll_loss_backward(DType dtype, DType target_dtype, ClassRows shape, const void* target, int64_t ignore_index,
                       const void* grad_loss, int64_t grad_stride, double scale, void* grad_log_probs) {
  GENESIS_DISPATCH_FLOAT(dtype, "nll_loss backward", {
    using T = scalar_t;
    GENESIS_DISPATCH_INDEX(target_dtype, "nll_loss backward", {
      nll_loss_backward_typed(shape, static_cast<const scalar_t*>(target), ignore_index,
                              static_cast<const T*>(grad_loss), grad_stride, scale, static_cast<T*>(grad_log_probs));
    });
  });
}

}  // namespace genesis::kernels::cpu
