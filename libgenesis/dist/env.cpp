#include "libgenesis/dist/env.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "libgenesis/core/error.h"

namespace genesis::dist {

namespace {

// The variables of one launcher convention; empty names are not set by it.
struct Convention {
  const char* launcher;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
};

constexpr Convention kTorchrun{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
constexpr Convention kOpenMpi{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                              "OMPI_COMM_WORLD_LOCAL_SIZE"};
// Slurm gives tasks per node only as text like "2(x3)": the local count is not read.
constexpr Convention kSlurm{"slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", nullptr};

const char kFix[] = "; fix the launcher's environment (see docs/distributed.md)";

int parse_int(const char* name, const char* text) {
  const std::string_view s(text);
  int value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  GENESIS_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(), UsageError, name, "=", s,
                " in the environment is not an integer", kFix);
  return value;
}

// The value of `name` as an integer, or `fallback` when it is not set (or the convention has none).
int int_var(const EnvLookup& lookup, const char* name, int fallback) {
  const char* text = name ? lookup(name) : nullptr;
  return text ? parse_int(name, text) : fallback;
}

}  // namespace

std::string ProcessEnv::describe() const {
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " (local " +
         std::to_string(local_rank) + " of " + std::to_string(local_world_size) + ", " + launcher + ")";
}

ProcessEnv read_process_env(const EnvLookup& lookup, bool need_rendezvous) {
  ProcessEnv env;
  const Convention* found = nullptr;
  for (const Convention* c : {&kTorchrun, &kOpenMpi, &kSlurm}) {
    // Slurm's batch step sets SLURM_NTASKS for the whole allocation; only srun's tasks have a step count.
    const char* size = lookup(c->world_size);
    if (c == &kSlurm && !size && lookup("SLURM_PROCID") && lookup("SLURM_NTASKS") && lookup("SLURM_STEP_ID"))
      size = lookup("SLURM_NTASKS");
    if (size) {
      found = c;
      env.world_size = parse_int(c->world_size, size);
      break;
    }
  }
  if (!found) return env;
  const Convention& c = *found;
  env.launcher = c.launcher;
  GENESIS_CHECK(env.world_size >= 1, UsageError, c.world_size, "=", env.world_size,
                " in the environment: a run needs at least one process", kFix);
  GENESIS_CHECK(lookup(c.rank) || env.world_size == 1, UsageError, c.world_size, "=", env.world_size, " but ", c.rank,
                " is not set", kFix);
  env.rank = int_var(lookup, c.rank, 0);
  GENESIS_CHECK(env.rank >= 0 && env.rank < env.world_size, UsageError, c.rank, "=", env.rank, " is not below ",
                c.world_size, "=", env.world_size, kFix);
  env.local_rank = int_var(lookup, c.local_rank, env.world_size == 1 ? 0 : env.rank);
  env.local_world_size = int_var(lookup, c.local_world_size, env.world_size);
  GENESIS_CHECK(env.local_rank >= 0 && env.local_rank < env.local_world_size, UsageError, c.local_rank, "=",
                env.local_rank, " is not below the local process count ", env.local_world_size, kFix);
  if (const char* addr = lookup("MASTER_ADDR")) env.master_addr = addr;
  env.master_port = int_var(lookup, "MASTER_PORT", 0);
  if (env.world_size > 1 && need_rendezvous) {
    GENESIS_CHECK(!env.master_addr.empty(), UsageError, c.world_size, "=", env.world_size,
                  " but MASTER_ADDR is not set: the ranks meet over TCP at MASTER_ADDR:MASTER_PORT (the host of rank "
                  "0); set both",
                  kFix);
    GENESIS_CHECK(lookup("MASTER_PORT"), UsageError, "MASTER_ADDR=", env.master_addr,
                  " but MASTER_PORT is not set; set it to a free TCP port on that host", kFix);
  }
  GENESIS_CHECK(!lookup("MASTER_PORT") || (env.master_port >= 1 && env.master_port <= 65535), UsageError,
                "MASTER_PORT=", env.master_port, " is not a TCP port (1..65535)", kFix);
  return env;
}

ProcessEnv read_process_env(bool need_rendezvous) {
  return read_process_env([](const char* name) { return std::getenv(name); }, need_rendezvous);
}

}  // namespace genesis::dist
