#pragma once
// Where this process stands in a distributed run, read from the environment its launcher set:
//   torchrun-style   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//                    (also what `genesis train --nproc-per-node N` sets for its ranks);
//   OpenMPI          OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE;
//   Slurm (srun)     SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS), SLURM_LOCALID.
// The first convention present wins, in that order. None present: a single process.
#include <functional>
#include <string>

namespace genesis::dist {

struct ProcessEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;  // the TCP rendezvous; empty when the launcher gave none
  int master_port = 0;
  std::string launcher = "none";  // "none", "torchrun", "openmpi" or "slurm"

  bool distributed() const { return world_size > 1; }
  // "rank 1 of 4 (local 1 of 2, torchrun)"
  std::string describe() const;
};

// getenv-like: the variable's value or nullptr.
using EnvLookup = std::function<const char*(const char* name)>;

// Reads and checks the variables. A variable that is not an integer, WORLD_SIZE < 1, RANK outside
// [0, WORLD_SIZE), a missing MASTER_ADDR/MASTER_PORT where a TCP rendezvous is needed, or a port
// outside 1..65535 is a UsageError (exit 2) naming the variable and its value. `need_rendezvous`:
// the ranks find each other over TCP (false under an MPI launcher when MPI carries the set-up).
ProcessEnv read_process_env(const EnvLookup& lookup, bool need_rendezvous);
ProcessEnv read_process_env(bool need_rendezvous);  // the process's own environment

}  // namespace genesis::dist
