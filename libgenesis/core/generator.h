#pragma once
// Seedable random-number generator state for the counter-based Philox kernels. A draw of
// n values consumes a contiguous counter range, so (seed, offset) is the whole state: save
// it in checkpoints, restore it, and the next draws repeat exactly.
#include <cstdint>
#include <mutex>

namespace genesis {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // counters consumed so far (one counter = four 32-bit values)
  friend bool operator==(const GeneratorState&, const GeneratorState&) = default;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : state_{seed, 0} {}
  void manual_seed(uint64_t seed);
  GeneratorState state() const;
  void set_state(const GeneratorState& s);
  // Reserves `counters` counters and returns the state to draw them from.
  GeneratorState advance(uint64_t counters);

 private:
  mutable std::mutex mutex_;
  GeneratorState state_;
};

// The process-wide generator used when no generator is passed.
Generator& default_generator();
inline void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace genesis
