#pragma once
// The `nccl` backend: CUDA tensors of one GPU per rank. Collectives run on the communicator's
// own stream, after an event of the compute stream (the current stream when issued); wait()
// makes the current stream wait for them, so the host never blocks. The unique id of the NCCL
// communicator travels over the host communicator from rank 0.
//
// A watchdog follows the running collectives: an asynchronous NCCL error, a collective still
// running after 2 s while the host communicator sees a peer's connection closed (naming it), or
// one not finished within timeout_s ends the process with exit code 1 and one line, after a
// communicator abort -- the compute thread may be blocked in a CUDA call that would otherwise
// wait forever (PyTorch's watchdog does the same). Its deciding thread makes no CUDA or NCCL call,
// since those may block too; a second thread polls CUDA for it.
#include <memory>

#include "libgenesis/core/device.h"
#include "libgenesis/dist/communicator.h"

namespace genesis::dist {

#if GENESIS_WITH_NCCL
inline constexpr bool kNcclAvailable = true;
// `device` is this rank's GPU; `host` carries the unique id (a collective on every rank).
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, Device device, double timeout_s);
#else
inline constexpr bool kNcclAvailable = false;
#endif

}  // namespace genesis::dist
