#include "kernels/cpu/random.h"

#include <cmath>

#include "kernels/common/philox.h"
#include "kernels/cpu/loops.h"

namespace genesis::kernels::cpu {

void random_fill(RandomKind kind, DType dtype, int64_t n, void* out, uint64_t seed, uint64_t offset, double a,
                 double b) {
  GENESIS_DISPATCH_ALL(dtype, "random", {
    scalar_t* o = static_cast<scalar_t*>(out);
    parallel_for((n + 3) / 4, 16, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        Philox4 r = philox4x32_10(offset + static_cast<uint64_t>(c), 0, seed);
        for (int lane = 0; lane < 4; ++lane) {
          int64_t i = c * 4 + lane;
          if (i >= n) break;
          double v = 0.0;
          switch (kind) {
            case RandomKind::uniform: v = a + (b - a) * (1.0 - static_cast<double>(uint_to_unit_float(r.v[lane]))); break;
            case RandomKind::normal: {
              int base = lane & ~1;
              double u1 = uint_to_unit_float(r.v[base]), u2 = uint_to_unit_float(r.v[base + 1]);
              double radius = std::sqrt(-2.0 * std::log(u1));
              double angle = 6.283185307179586 * u2;
              v = a + b * radius * ((lane & 1) ? std::sin(angle) : std::cos(angle));
              break;
            }
            case RandomKind::randint: {
              auto range = static_cast<uint64_t>(b - a);
              v = a + static_cast<double>((static_cast<uint64_t>(r.v[lane]) * range) >> 32);
              break;
            }
            case RandomKind::bernoulli: v = uint_to_unit_float(r.v[lane]) <= a ? 1.0 : 0.0; break;
          }
          if constexpr (std::is_same_v<scalar_t, bool>) {
            o[i] = v != 0.0;
          } else {
            o[i] = static_cast<scalar_t>(static_cast<acc_t<scalar_t>>(v));
          }
        }
      }
    });
  });
}

}  // namespace genesis::kernels::cpu
