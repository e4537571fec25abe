#include "libgenesis/dist/process_group.h"

#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/dist/mpi_communicator.h"
#include "libgenesis/dist/nccl_communicator.h"
#include "libgenesis/dist/tcp_communicator.h"
#include "libgenesis/ops/factory.h"

namespace genesis::dist {

namespace {

bool mpi_carries_setup() { return started_by_mpi() && mpi_available(); }

}  // namespace

ProcessGroup::ProcessGroup(ProcessEnv env, std::unique_ptr<Communicator> host, std::unique_ptr<Communicator> device)
    : env_(std::move(env)), host_(std::move(host)), device_(std::move(device)) {}

ProcessGroup::~ProcessGroup() = default;

bool ProcessGroup::any(bool flag) {
  Tensor t = full({1}, flag ? 1.0 : 0.0, {.dtype = DType::i32});
  host_->all_reduce(t, ReduceOp::max)->wait();
  return t.data<int32_t>()[0] != 0;
}

void ProcessGroup::sum(std::vector<double>& values) {
  if (values.empty()) return;
  Tensor t = empty({static_cast<int64_t>(values.size())}, {.dtype = DType::f64});
  std::copy(values.begin(), values.end(), t.data<double>());
  host_->all_reduce(t, ReduceOp::sum)->wait();
  std::copy(t.data<double>(), t.data<double>() + values.size(), values.begin());
}

ProcessEnv process_env() { return read_process_env(/*need_rendezvous=*/!mpi_carries_setup()); }

std::string resolve_backend(const std::string& backend, Device device, const ProcessEnv& env) {
  if (device.is_cuda()) {
    GENESIS_CHECK(backend == "auto" || backend == "nccl", UsageError, "dist.backend = \"", backend,
                  "\" carries CPU tensors but the run trains on ", device.str(),
                  "; use dist.backend = \"nccl\" (or \"auto\") for CUDA");
    return "nccl";
  }
  GENESIS_CHECK(backend != "nccl", UsageError,
                "dist.backend = \"nccl\" carries CUDA tensors but the run trains on the CPU; use \"auto\", \"tcp\" or "
                "\"mpi\"");
  if (backend == "mpi" || (backend == "auto" && env.launcher == "openmpi" && mpi_available())) {
    GENESIS_CHECK(mpi_available(), UsageError,
                  "dist.backend = \"mpi\" but genesis was built without MPI (install libopenmpi-dev and configure "
                  "with -DGENESIS_MPI=ON), or use dist.backend = \"tcp\"");
    GENESIS_CHECK(started_by_mpi(), UsageError,
                  "dist.backend = \"mpi\" needs ranks started by mpirun (mpirun -np N genesis train ...); "
                  "`--nproc-per-node` ranks use dist.backend = \"tcp\"");
    return "mpi";
  }
  return "tcp";
}

std::unique_ptr<ProcessGroup> join_process_group(const ProcessEnv& env, const std::string& backend, Device device,
                                                 double timeout_s) {
  const std::string resolved = resolve_backend(backend, device, env);
  std::unique_ptr<Communicator> host =
      mpi_carries_setup() ? make_mpi_communicator(timeout_s) : make_tcp_communicator(env, timeout_s);
  GENESIS_CHECK(host->rank() == env.rank && host->size() == env.world_size, UsageError, "the launcher says ",
                env.describe(), " but ", host->backend(), " says rank ", host->rank(), " of ", host->size());
  std::unique_ptr<Communicator> gradients;
  if (resolved == "nccl") {
#if GENESIS_WITH_NCCL
    gradients = make_nccl_communicator(*host, device, timeout_s);
#else
    GENESIS_THROW(UsageError, "dist.backend = \"nccl\": genesis was built without NCCL (it comes with the CUDA "
                              "toolkit: configure with GENESIS_CUDA=ON where nccl.h is found)");
#endif
  }
  return std::make_unique<ProcessGroup>(env, std::move(host), std::move(gradients));
}

}  // namespace genesis::dist
