#pragma once
// What a process does when a collective fails for good (a peer gone, a timeout, ranks that issued
// different collectives). The exception alone is not enough in a program that then ends: while it
// unwinds, teardown can wait on work that depends on the lost peer (CUDA frees behind an NCCL
// kernel that never finishes), so its message would never be printed and the process would hang.
// With exit_on_failure set (the CLI sets it), the first failure prints its one line at once and
// arms a deadline that ends the process with exit 1 after kFailureGraceS, whatever the unwinding
// does. Off by default: a library user gets the DistError and decides.
#include <string>

namespace genesis::dist {

inline constexpr double kFailureGraceS = 5.0;

void set_exit_on_failure(bool on);
// Called where a collective's failure is found: prints "genesis: error: MESSAGE" and arms the
// deadline when exit_on_failure is set (once per process; later calls do nothing).
void report_failure(const std::string& message);
// Prints "genesis: error: MESSAGE" once per process, whatever exit_on_failure says: for a
// watchdog that ends the process itself. Returns whether this call printed it.
bool announce_failure(const std::string& message);
// Whether a failure's line was printed (the CLI's handlers then print none: errors that follow,
// such as CUDA faults of an aborted NCCL kernel, are consequences).
bool failure_reported();

}  // namespace genesis::dist
