#pragma once
// The mpi backend of Communicator: CPU tensors through MPI's nonblocking collectives, for ranks
// started by mpirun. Built when CMake's GENESIS_MPI finds MPI (GENESIS_WITH_MPI=1); without it
// make_mpi_communicator throws a UsageError saying how to build with MPI, so callers need no #if.
//
// MPI is initialized once per process (MPI_THREAD_SERIALIZED or better: every MPI call of this
// backend holds one lock, so any thread may issue or wait) and finalized at exit. After a
// collective fails or times out, the ranks no longer agree on what was issued: that communicator
// refuses further collectives, and the process skips MPI_Finalize at exit (it would wait for the
// dead or hung rank forever); mpirun then ends the other ranks.
#include <cstdlib>
#include <memory>

#include "libgenesis/core/error.h"
#include "libgenesis/dist/communicator.h"

namespace genesis::dist {

// True when this process was started by an MPI launcher (Open MPI's mpirun, MPICH/Intel hydra,
// a PMIx or PMI launcher such as srun --mpi=...). Reads the environment only; usable without MPI.
inline bool started_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(name)) return true;
  }
  return false;
}

// True when genesis was built with the mpi backend.
inline bool mpi_available() {
#if GENESIS_WITH_MPI
  return true;
#else
  return false;
#endif
}

// A communicator over all the ranks of the MPI job (a duplicate of MPI_COMM_WORLD), with MPI
// initialized on the first call; every rank makes its communicators in the same order. A wait() or
// barrier() that does not complete within timeout_s seconds throws DistError; so does an MPI error
// (with MPI's text for it). A timeout_s that is not a positive number is a ValueError.
#if GENESIS_WITH_MPI
std::unique_ptr<Communicator> make_mpi_communicator(double timeout_s);
#else
inline std::unique_ptr<Communicator> make_mpi_communicator(double /*timeout_s*/) {
  GENESIS_THROW(UsageError,
                "genesis was built without MPI (configure with -DGENESIS_MPI=ON after installing "
                "libopenmpi-dev)");
}
#endif

}  // namespace genesis::dist
