// The local launcher (libgenesis/dist/launcher.h): the torchrun environment of every rank, stderr
// lines prefixed by rank, exit codes, stopping the other ranks after a failure, forwarding the
// launcher's SIGINT/SIGTERM, and option checks. The ranks are /bin/sh scripts; the launcher's
// stderr goes to a file for the duration of each launch.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/dist/launcher.h"
#include "tests/testing.h"

using namespace genesis;
using Catch::Matchers::Contains;
using dist::LaunchOptions;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

size_t count_lines(const std::string& text, const std::string& line) {
  size_t n = 0;
  for (const std::string& l : lines_of(text)) n += l == line;
  return n;
}

// fd 2 of this process goes to a file while this lives.
class StderrToFile {
 public:
  explicit StderrToFile(const fs::path& path) : saved_(dup(STDERR_FILENO)) {
    std::fflush(stderr);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  ~StderrToFile() {
    std::fflush(stderr);
    dup2(saved_, STDERR_FILENO);
    close(saved_);
  }
  StderrToFile(const StderrToFile&) = delete;
  StderrToFile& operator=(const StderrToFile&) = delete;

 private:
  int saved_;
};

struct Outcome {
  int code = -1;
  std::string err;  // what the launcher wrote to stderr
  double seconds = 0;
};

// Runs launch_local with stderr captured; during_launch(path of the capture) runs on a thread
// alongside, when given.
Outcome launch(const LaunchOptions& options, const std::function<void(const fs::path&)>& during_launch = {}) {
  testing::TempDir dir("launcher");
  const fs::path capture = dir / "stderr";
  Outcome outcome;
  const auto start = Clock::now();
  {
    StderrToFile redirect(capture);
    std::optional<std::thread> helper;
    if (during_launch) helper.emplace(during_launch, capture);
    try {
      outcome.code = dist::launch_local(options);
    } catch (...) {
      if (helper) helper->join();
      throw;
    }
    if (helper) helper->join();
  }
  outcome.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  outcome.err = read_text(capture);
  return outcome;
}

LaunchOptions shell(int nproc, const std::string& script) {
  LaunchOptions options;
  options.nproc = nproc;
  options.command = {"/bin/sh", "-c", script};
  options.grace_s = 0.3;
  return options;
}

}  // namespace

TEST_CASE("launcher: every rank gets the torchrun environment, its stderr lines prefixed", "[launcher][cpu]") {
  const testing::ScopedEnv inherited_rank("RANK", "99");  // overridden for the children
  const testing::ScopedEnv inherited("GENESIS_LAUNCHER_TEST", "kept");
  const Outcome out =
      launch(shell(4,
                   "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $GENESIS_LAUNCHED "
                   "$GENESIS_LAUNCHER_TEST >&2"));
  INFO(out.err);
  REQUIRE(out.code == 0);
  CHECK(out.seconds < 5.0);
  const std::vector<std::string> lines = lines_of(out.err);
  CHECK(lines.size() == 4);
  std::set<int> ports;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string prefix = "[rank " + std::to_string(rank) + "] ";
    const auto line =
        std::find_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.starts_with(prefix); });
    REQUIRE(line != lines.end());
    std::istringstream fields(line->substr(prefix.size()));
    int r = -1, world = -1, local = -1, local_world = -1, port = -1, launched = -1;
    std::string addr, kept;
    fields >> r >> world >> local >> local_world >> addr >> port >> launched >> kept;
    CHECK(r == rank);
    CHECK(local == rank);
    CHECK(world == 4);
    CHECK(local_world == 4);
    CHECK(addr == "127.0.0.1");
    CHECK(port >= 1);
    CHECK(port <= 65535);
    CHECK(launched == 1);
    CHECK(kept == "kept");
    ports.insert(port);
  }
  CHECK(ports.size() == 1);  // one port for the whole world
}

TEST_CASE("launcher: an explicit master_port is passed on as it is", "[launcher][cpu]") {
  LaunchOptions options = shell(2, "echo $MASTER_PORT >&2");
  options.master_port = 29512;
  const Outcome out = launch(options);
  INFO(out.err);
  CHECK(out.code == 0);
  CHECK(count_lines(out.err, "[rank 0] 29512") == 1);
  CHECK(count_lines(out.err, "[rank 1] 29512") == 1);
}

TEST_CASE("launcher: a failing rank's code is returned and the other ranks are stopped", "[launcher][cpu]") {
  const Outcome out = launch(shell(3, "if [ $RANK = 1 ]; then echo bye >&2; exit 3; fi; exec sleep 60"));
  INFO(out.err);
  CHECK(out.code == 3);
  CHECK(out.seconds < 5.0);  // not the 60 s of the sleeping ranks
  CHECK(count_lines(out.err, "genesis: rank 1 exited with code 3; stopping the other ranks") == 1);
  CHECK_THAT(out.err, Contains("[rank 1] bye\ngenesis: rank 1"));  // its last words come first
  CHECK(out.err.find("rank 0 exited") == std::string::npos);       // only the first failure is reported
}

TEST_CASE("launcher: a rank that ignores SIGTERM gets SIGKILL after the grace period", "[launcher][cpu]") {
  testing::TempDir dir("launcher");
  // Rank 1 fails only once rank 0 ignores SIGTERM, so the SIGKILL path is always the one taken.
  const std::string ready = (dir / "ready").string();
  const Outcome out =
      launch(shell(2, "if [ $RANK = 0 ]; then trap '' TERM; touch " + ready + "; exec sleep 60; fi; while [ ! -e " +
                          ready + " ]; do sleep 0.01; done; exit 3"));
  INFO(out.err);
  CHECK(out.code == 3);
  CHECK(out.seconds >= 0.3);
  CHECK(out.seconds < 5.0);
  CHECK(count_lines(out.err, "genesis: rank 1 exited with code 3; stopping the other ranks") == 1);
}

TEST_CASE("launcher: a rank killed by a signal gives 128 + the signal", "[launcher][cpu]") {
  const Outcome out = launch(shell(2, "if [ $RANK = 1 ]; then kill -9 $$; fi; exec sleep 60"));
  INFO(out.err);
  CHECK(out.code == 128 + 9);
  CHECK(out.seconds < 5.0);
  CHECK(count_lines(out.err, "genesis: rank 1 was killed by signal 9 (Killed); stopping the other ranks") == 1);
}

TEST_CASE("launcher: a single failing rank is reported without stopping anything", "[launcher][cpu]") {
  const Outcome out = launch(shell(1, "exit 5"));
  CHECK(out.code == 5);
  CHECK(out.err == "genesis: rank 0 exited with code 5\n");
}

TEST_CASE("launcher: a command that cannot be executed exits 127", "[launcher][cpu]") {
  LaunchOptions options;
  options.command = {"/nonexistent/genesis-launcher-test", "arg"};
  const Outcome out = launch(options);
  INFO(out.err);
  CHECK(out.code == 127);
  CHECK(count_lines(out.err,
                    "[rank 0] genesis: cannot execute /nonexistent/genesis-launcher-test: "
                    "No such file or directory") == 1);
  CHECK(count_lines(out.err, "genesis: rank 0 exited with code 127") == 1);
}

TEST_CASE("launcher: a last line without newline still comes out, prefixed", "[launcher][cpu]") {
  const Outcome out = launch(shell(2, "printf 'first\\nno newline %s' $RANK >&2"));
  INFO(out.err);
  CHECK(out.code == 0);
  for (const char* rank : {"0", "1"}) {
    CHECK(count_lines(out.err, std::string("[rank ") + rank + "] first") == 1);
    CHECK(count_lines(out.err, std::string("[rank ") + rank + "] no newline " + rank) == 1);
  }
  CHECK(out.err.ends_with("\n"));
}

TEST_CASE("launcher: a chatty rank does not hold up the others and no line is cut", "[launcher][cpu]") {
  // Rank 0 writes 50000 lines, then one line longer than the launcher's 64 KiB line limit.
  const Outcome out =
      launch(shell(2,
                   "if [ $RANK = 0 ]; then yes line | head -n 50000 >&2; head -c 100000 /dev/zero | tr '\\0' x >&2; "
                   "else echo hello >&2; fi"));
  CHECK(out.code == 0);
  CHECK(count_lines(out.err, "[rank 0] line") == 50000);
  CHECK(count_lines(out.err, "[rank 1] hello") == 1);
  size_t unprefixed = 0, xs = 0;
  for (const std::string& line : lines_of(out.err)) {
    unprefixed += !line.starts_with("[rank ");
    if (line.starts_with("[rank 0] x")) xs += line.size() - std::string("[rank 0] ").size();
  }
  CHECK(unprefixed == 0);
  CHECK(xs == 100000);  // the long line, in pieces of at most 64 KiB
}

TEST_CASE("launcher: SIGINT and SIGTERM of the launcher are forwarded to every rank", "[launcher][cpu]") {
  const int sig = GENERATE(SIGINT, SIGTERM);
  INFO("signal " << sig);
  // Each rank says when its trap is set; the signal is raised in this process only then.
  const auto raise_when_ready = [sig](const fs::path& capture) {
    for (int i = 0; i < 1000; ++i) {  // up to ~10 s, then give up (the test fails on its timing)
      const std::string text = read_text(capture);
      if (count_lines(text, "[rank 0] ready") + count_lines(text, "[rank 1] ready") == 2) {
        raise(sig);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  // kill -9: a TERM could reach the background job before it drops the shell's trap (dash) and be lost.
  const Outcome out = launch(shell(2,
                                   "trap 'kill -9 $! 2>/dev/null; echo stopping >&2; exit 130' INT TERM; "
                                   "sleep 30 & echo ready >&2; wait"),
                             raise_when_ready);
  INFO(out.err);
  CHECK(out.code == 130);
  CHECK(out.seconds < 5.0);
  CHECK(count_lines(out.err, "[rank 0] stopping") == 1);  // once per signal received
  CHECK(count_lines(out.err, "[rank 1] stopping") == 1);
  CHECK(out.err.find("genesis: rank") == std::string::npos);  // a requested stop is no failure
}

TEST_CASE("launcher: the signal handlers are restored and the ranks start with default SIGPIPE", "[launcher][cpu]") {
  constexpr int kSignals[] = {SIGINT, SIGTERM, SIGCHLD, SIGPIPE};
  struct sigaction before[4], after[4];
  struct sigaction default_pipe {
  }, saved_pipe{};
  default_pipe.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &default_pipe, &saved_pipe);
  for (int i = 0; i < 4; ++i) sigaction(kSignals[i], nullptr, &before[i]);
  const Outcome out = launch(shell(1, "kill -PIPE $$"));
  for (int i = 0; i < 4; ++i) sigaction(kSignals[i], nullptr, &after[i]);
  sigaction(SIGPIPE, &saved_pipe, nullptr);
  CHECK(out.code == 128 + SIGPIPE);  // not ignored in the rank, though the launcher ignored it
  for (int i = 0; i < 4; ++i) {
    INFO("signal " << kSignals[i]);
    CHECK(after[i].sa_handler == before[i].sa_handler);
    // glibc installs every handler with SA_RESTORER, which the kernel then reports back even
    // for the restored default: compare the flags a caller sets.
    constexpr int kRestorer = 0x04000000;
    CHECK((after[i].sa_flags & ~kRestorer) == (before[i].sa_flags & ~kRestorer));
  }
}

TEST_CASE("launcher: bad options are usage errors", "[launcher][cpu]") {
  LaunchOptions good = shell(1, "true");
  auto with = [&](auto change) {
    LaunchOptions options = good;
    change(options);
    return options;
  };
  CHECK_THROWS_AS(dist::launch_local(with([](LaunchOptions& o) { o.nproc = 0; })), UsageError);
  CHECK_THROWS_AS(dist::launch_local(with([](LaunchOptions& o) { o.nproc = 1025; })), UsageError);
  CHECK_THROWS_AS(dist::launch_local(with([](LaunchOptions& o) { o.command.clear(); })), UsageError);
  CHECK_THROWS_AS(dist::launch_local(with([](LaunchOptions& o) { o.command = {""}; })), UsageError);
  CHECK_THROWS_AS(dist::launch_local(with([](LaunchOptions& o) { o.master_port = 70000; })), UsageError);
  CHECK_THROWS_AS(dist::launch_local(with([](LaunchOptions& o) { o.grace_s = -1; })), UsageError);
  // Not an address of this host (TEST-NET-1): no port can be picked on it.
  CHECK_THROWS_AS(dist::launch_local(with([](LaunchOptions& o) { o.master_addr = "192.0.2.1"; })), UsageError);
  CHECK_THROWS_WITH(dist::launch_local(with([](LaunchOptions& o) { o.nproc = 0; })),
                    "launch: nproc must be in 1..1024, got 0");
}
