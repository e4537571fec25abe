#pragma once
// `genesis bench alloc`: host cost of an allocation + free pair through genesis's caching
// allocator and through the raw runtime (cudaMalloc/cudaFree, or malloc/free on the CPU),
// over the scenarios that scripts/bench/torch_ops.py --alloc replays with PyTorch.
#include <nlohmann/json.hpp>

#include "libgenesis/core/device.h"

namespace genesis::cli::bench {

// `pairs` sets the length of the simple scenarios; the others and the raw runs scale from it.
nlohmann::json run_alloc_bench(Device device, int64_t pairs);

}  // namespace genesis::cli::bench
