#pragma once
// The `nccl` backend: CUDA tensors of one GPU per rank. Collectives run on the communicator's
// own stream, after an event of the compute stream (the current stream when issued); wait()
// makes the current stream wait for them, so the host never blocks. The unique id of the NCCL
// communicator travels over the host communicator from rank 0.
//
// A watchdog thread polls the running collectives: one not finished within timeout_s, or an
// asynchronous NCCL error (a peer died), aborts the communicator and ends the process with exit
// code 1 and a line naming the collective -- the compute thread may be blocked in a CUDA call
// that would otherwise wait forever (PyTorch's watchdog does the same).
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
