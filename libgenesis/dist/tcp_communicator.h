#pragma once
// The `tcp` backend: CPU tensors between ranks connected to rank 0 over TCP (a star). Rank 0
// listens at MASTER_ADDR:MASTER_PORT; every other rank connects to it, says who it is, and waits
// until all have. A reduction is gathered at rank 0, summed there in rank order (so every rank
// gets the same bits, and the same bits run after run) and sent back. Made for the CPU ranks of
// one host (`genesis train --nproc-per-node N`) and for the host-side agreement of every
// distributed run (start-up, stop requests); MPI serves CPU ranks at scale.
//
// Each collective runs on a worker thread in the order issued; a frame header (collective, byte
// count) catches ranks that issue different collectives. A rank that closes its connection or
// stays silent past the timeout fails the collective with DistError naming it; rank 0 tells the
// other ranks why before it gives up.
#include <memory>

#include "libgenesis/dist/communicator.h"
#include "libgenesis/dist/env.h"

namespace genesis::dist {

// Connects this rank to the others (env.master_addr:env.master_port, env.rank, env.world_size).
// A host name that does not resolve, a port rank 0 cannot bind, or rank 0 unreachable within
// timeout_s is a UsageError (exit 2); timeout_s also bounds every later collective.
std::unique_ptr<Communicator> make_tcp_communicator(const ProcessEnv& env, double timeout_s);

}  // namespace genesis::dist
