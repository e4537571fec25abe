#include "libgenesis/core/generator.h"

namespace genesis {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lock(mutex_);
  state_ = {seed, 0};
}

GeneratorState Generator::state() const {
  std::lock_guard lock(mutex_);
  return state_;
}

void Generator::set_state(const GeneratorState& s) {
  std::lock_guard lock(mutex_);
  state_ = s;
}

GeneratorState Generator::advance(uint64_t counters) {
  std::lock_guard lock(mutex_);
  GeneratorState s = state_;
  state_.offset += counters;
  return s;
}

Generator& default_generator() {
  static Generator g(0);
  return g;
}

}  // namespace genesis
