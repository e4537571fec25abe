#pragma once
// A torchrun-like launcher for the ranks of one host: starts nproc copies of a command with the
// torchrun environment, prefixes their stderr lines with "[rank N] ", forwards Ctrl-C / SIGTERM to
// them, and when one rank fails stops the others (SIGTERM, then SIGKILL after a grace period) so a
// crashed rank never leaves its peers hanging in a collective.
#include <string>
#include <vector>

namespace genesis::dist {

struct LaunchOptions {
  int nproc = 1;                     // ranks to start on this host (1..1024)
  std::vector<std::string> command;  // the child's argv; command[0] is the executable path (no PATH search)
  std::string master_addr = "127.0.0.1";
  int master_port = 0;    // 0: pick a free TCP port on master_addr (bind port 0, read it back, close)
  double grace_s = 10.0;  // after one rank fails: SIGTERM to the others, SIGKILL after this long
};

// Starts nproc copies of command, each with the parent's environment plus RANK and LOCAL_RANK (both
// = i), WORLD_SIZE and LOCAL_WORLD_SIZE (= nproc), MASTER_ADDR, MASTER_PORT and GENESIS_LAUNCHED=1
// (overriding inherited values), and waits for all of them. Each child runs in its own process
// group (a terminal's Ctrl-C reaches only the launcher, which forwards it) and dies with SIGTERM if
// the launcher dies. stdout is inherited; stderr comes out line by line as "[rank N] line".
//
// Returns the exit code for the launcher: 0 when every rank exited 0, otherwise the code of the
// first rank that failed (128 + signal for a rank killed by a signal; 127 when the command could
// not be executed). While it runs, SIGINT and SIGTERM are forwarded to every live rank, once per
// signal received; ranks that then exit with 130 (or die of that signal) are not reported as
// failures. The previous signal handlers are restored on return.
//
// Throws UsageError for bad options (nproc, empty command, port, grace, an unresolvable
// master_addr), Error when the ranks cannot be started (any already started are killed first).
// One launch at a time per process.
int launch_local(const LaunchOptions& options);

}  // namespace genesis::dist
