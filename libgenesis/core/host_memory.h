#pragma once
// What the CPU allocator has handed out: the bytes of the live host storages and their peak
// since start-up or the last reset (CUDA's figures are cuda::memory_stats). A test compares the
// activation memory of two ways to run a step by it, without timing anything.
#include <cstddef>

namespace genesis {

struct HostMemoryStats {
  size_t allocated = 0;       // bytes of live host storages (as requested, before rounding)
  size_t peak_allocated = 0;  // the most `allocated` has been
};

HostMemoryStats host_memory_stats();
// Sets peak_allocated to what is allocated now.
void reset_host_peak_memory();

}  // namespace genesis
