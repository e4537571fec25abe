#pragma once
// The ranks of one distributed run, as the trainer sees them: who this process is, a host
// communicator (CPU tensors: start-up and stop agreement, evaluation sums; tcp, or mpi under
// mpirun) and the communicator that carries the gradients (nccl for CUDA parameters, otherwise
// the host one).
#include <memory>
#include <string>

#include "libgenesis/core/device.h"
#include "libgenesis/dist/communicator.h"
#include "libgenesis/dist/env.h"

namespace genesis::dist {

class ProcessGroup {
 public:
  ProcessGroup(ProcessEnv env, std::unique_ptr<Communicator> host, std::unique_ptr<Communicator> device);
  ~ProcessGroup();

  const ProcessEnv& env() const { return env_; }
  int rank() const { return env_.rank; }
  int size() const { return env_.world_size; }
  Communicator& host() { return *host_; }
  Communicator& gradients() { return device_ ? *device_ : *host_; }

  // True on every rank when any rank passes true (a host all-reduce).
  bool any(bool flag);
  // Sums `values` over the ranks, in place (host doubles).
  void sum(std::vector<double>& values);

 private:
  ProcessEnv env_;
  std::unique_ptr<Communicator> host_;
  std::unique_ptr<Communicator> device_;  // null: the host communicator carries the gradients
};

// The environment of this process (read_process_env), with the rendezvous required unless MPI
// can carry the set-up (started by mpirun, genesis built with MPI).
ProcessEnv process_env();

// The backend that carries the gradients on `device` for recipe value `backend` ("auto", "tcp",
// "mpi", "nccl"); a combination that cannot work (tcp or mpi with CUDA, nccl with the CPU, mpi
// without mpirun or without MPI in the build) is a UsageError naming dist.backend.
std::string resolve_backend(const std::string& backend, Device device, const ProcessEnv& env);

// Joins the run's ranks (a barrier over all of them). `device` is this rank's device (for CUDA,
// cuda:LOCAL_RANK, current on this thread).
std::unique_ptr<ProcessGroup> join_process_group(const ProcessEnv& env, const std::string& backend, Device device,
                                                 double timeout_s);

}  // namespace genesis::dist
