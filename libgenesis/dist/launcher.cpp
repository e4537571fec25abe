#include "libgenesis/dist/launcher.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "libgenesis/core/error.h"
#include "libgenesis/core/threads.h"

extern char** environ;

namespace genesis::dist {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxProcs = 1024;
// A rank's stderr line longer than this without a newline goes out in pieces, so that a rank
// printing binary junk cannot make the launcher hold unbounded memory.
constexpr size_t kMaxLine = 64 * 1024;
constexpr int kDrainReads = 64;  // of up to 64 KiB each: more than a pipe holds

// The write end of the running launch's self-pipe (-1 when none runs): the only global state. The
// handler writes the signal's number there and the poll loop does the rest, so nothing but
// write() runs in signal context.
std::atomic<int> g_signal_pipe{-1};

extern "C" void on_launcher_signal(int sig) {
  const int saved_errno = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  const int fd = g_signal_pipe.load();
  // Non-blocking: a failed write means a full pipe, and the loop has 64 KiB of wake-ups to read.
  if (fd >= 0) {
    [[maybe_unused]] const ssize_t written = write(fd, &byte, 1);
  }
  errno = saved_errno;
}

std::string errno_text() {
  return std::strerror(errno);
}

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    reset(std::exchange(other.fd_, -1));
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  Fd read, write;
};

// Close-on-exec, so that no child (ours, or one another thread forks) keeps a launcher pipe open.
Pipe make_pipe() {
  int fds[2];
  GENESIS_CHECK(pipe2(fds, O_CLOEXEC) == 0, Error, "launch: cannot create a pipe: ", errno_text());
  return Pipe{Fd(fds[0]), Fd(fds[1])};
}

void set_nonblocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our stderr is closed or broken: there is nowhere left to report to
    text.remove_prefix(static_cast<size_t>(n));
  }
}

// ---- options ----------------------------------------------------------------------------------

void validate(const LaunchOptions& options) {
  GENESIS_CHECK(options.nproc >= 1 && options.nproc <= kMaxProcs, UsageError, "launch: nproc must be in 1..", kMaxProcs,
                ", got ", options.nproc);
  GENESIS_CHECK(!options.command.empty() && !options.command[0].empty(), UsageError, "launch: no command to run");
  GENESIS_CHECK(options.master_port >= 0 && options.master_port <= 65535, UsageError,
                "launch: master_port must be in 0..65535 (0: pick a free one), got ", options.master_port);
  GENESIS_CHECK(std::isfinite(options.grace_s) && options.grace_s >= 0, UsageError,
                "launch: grace_s must be a number of seconds >= 0, got ", options.grace_s);
}

int port_of(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
}

// Asks the kernel for a free port on addr. The port is free again when this returns, so another
// process may take it before rank 0 listens on it: the same small race as torchrun's port 0.
int pick_free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(addr.c_str(), "0", &hints, &found);
  GENESIS_CHECK(rc == 0, UsageError, "launch: master_addr '", addr, "' does not resolve: ", gai_strerror(rc));
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(found, freeaddrinfo);
  int error = 0;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const Fd sock(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    if (sock && bind(sock.get(), a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(sock.get(), reinterpret_cast<sockaddr*>(&bound), &length) == 0)
      return port_of(bound);
    error = errno;
  }
  GENESIS_THROW(UsageError, "launch: cannot bind a port on master_addr '", addr, "' (", std::strerror(error),
                "); give an address of this host, or master_port");
}

// ---- the child's side -------------------------------------------------------------------------

// The parent's environment without the names the launcher sets, then those, as "NAME=value".
std::vector<std::string> child_environment(const LaunchOptions& options, int port, int rank) {
  std::vector<std::pair<std::string, std::string>> own = {{"RANK", std::to_string(rank)},
                                                          {"LOCAL_RANK", std::to_string(rank)},
                                                          {"WORLD_SIZE", std::to_string(options.nproc)},
                                                          {"LOCAL_WORLD_SIZE", std::to_string(options.nproc)},
                                                          {"MASTER_ADDR", options.master_addr},
                                                          {"MASTER_PORT", std::to_string(port)},
                                                          {"GENESIS_LAUNCHED", "1"}};
  // The launcher sampled a free host before any rank existed; ranks that share it spin briefly
  // (core/threads.h), unless the user chose the wait policy.
  if (options.nproc > 1 && wait_policy().source == kWaitSourceFreeHost) {
    own.emplace_back("GOMP_SPINCOUNT", kSpinCountShared);
    own.emplace_back("GENESIS_WAIT_POLICY", "shared");
  }
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string_view name = text.substr(0, text.find('='));
    if (std::none_of(std::begin(own), std::end(own), [&](const auto& var) { return var.first == name; }))
      env.emplace_back(text);
  }
  for (const auto& [name, value] : own) env.push_back(name + "=" + value);
  return env;
}

// execve's view of strings: pointers into them, then a null.
std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (const std::string& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

void write_child_error(const char* what, const char* path, int error) {
  const char* reason = strerrordesc_np(error);  // unlike strerror: no locale, no allocation
  for (const char* part : {"genesis: ", what, " ", path, ": ", reason ? reason : "unknown error", "\n"})
    if (write(STDERR_FILENO, part, std::strlen(part)) < 0) break;
}

// For the duration of a launch: SIGINT, SIGTERM and SIGCHLD write their number to a self-pipe
// that the poll loop watches, and SIGPIPE is ignored (a closed stderr must not kill the launcher
// while it has ranks to stop). The destructor restores the previous dispositions.
class SignalScope {
 public:
  SignalScope();
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  int fd() const { return pipe_.read.get(); }
  // In a forked child before exec (async-signal-safe): what exec makes of the previous
  // dispositions (handled -> default, ignored stays ignored), done already now. Otherwise every
  // rank would start with SIGPIPE ignored, and a signal arriving before exec would run a handler
  // of the launcher's process (ours, or the one it had before) inside the child.
  void reset_in_child() const {
    for (size_t i = 0; i < std::size(kSignals); ++i) {
      const bool ignored = !(previous_[i].sa_flags & SA_SIGINFO) && previous_[i].sa_handler == SIG_IGN;
      struct sigaction as_exec {};
      as_exec.sa_handler = ignored ? SIG_IGN : SIG_DFL;
      sigaction(kSignals[i], &as_exec, nullptr);
    }
  }

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGCHLD, SIGPIPE};
  Pipe pipe_;
  struct sigaction previous_[std::size(kSignals)]{};
};

SignalScope::SignalScope() : pipe_(make_pipe()) {
  set_nonblocking(pipe_.read.get());
  set_nonblocking(pipe_.write.get());  // the handler must never block
  int none = -1;
  GENESIS_CHECK(g_signal_pipe.compare_exchange_strong(none, pipe_.write.get()), Error,
                "launch: another launch is already running in this process");
  struct sigaction handle {};
  handle.sa_handler = on_launcher_signal;
  sigemptyset(&handle.sa_mask);
  handle.sa_flags = SA_RESTART | SA_NOCLDSTOP;  // other threads' system calls go on; stopped ranks do not wake us
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  for (size_t i = 0; i < std::size(kSignals); ++i)
    sigaction(kSignals[i], kSignals[i] == SIGPIPE ? &ignore : &handle, &previous_[i]);
}

SignalScope::~SignalScope() {
  for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
  g_signal_pipe.store(-1);
}

// Blocks the launcher's signals in this thread around fork, so that none of our handlers runs in
// the child before reset_in_child.
class BlockedSignals {
 public:
  BlockedSignals() {
    sigset_t block;
    sigemptyset(&block);
    for (int sig : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&block, sig);
    pthread_sigmask(SIG_BLOCK, &block, &previous_);
  }
  ~BlockedSignals() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  BlockedSignals(const BlockedSignals&) = delete;
  BlockedSignals& operator=(const BlockedSignals&) = delete;
  const sigset_t& previous() const { return previous_; }

 private:
  sigset_t previous_;
};

struct ChildPlan {
  char* const* argv;
  char* const* envp;
  int stderr_fd;
  pid_t parent;
  const SignalScope* signals;
  const sigset_t* mask;
};

// The child between fork and exec. The launcher may have other threads (holding locks), so only
// async-signal-safe calls here; everything else was prepared before fork.
[[noreturn]] void become_rank(const ChildPlan& plan) {
  setpgid(0, 0);  // out of the terminal's foreground group: Ctrl-C reaches the launcher, which forwards it
  prctl(PR_SET_PDEATHSIG, SIGTERM);        // die with the launcher (its launching thread, which outlives us)...
  if (getppid() != plan.parent) _exit(1);  // ...even when it died before prctl
  dup2(plan.stderr_fd, STDERR_FILENO);
  plan.signals->reset_in_child();
  pthread_sigmask(SIG_SETMASK, plan.mask, nullptr);
  execve(plan.argv[0], plan.argv, plan.envp);
  write_child_error("cannot execute", plan.argv[0], errno);
  _exit(127);
}

// ---- the launcher's side ----------------------------------------------------------------------

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return detail::concat("was killed by signal ", sig, " (", strsignal(sig), ")");
  }
  return detail::concat("exited with code ", exit_code(status));
}

struct Rank {
  pid_t pid = -1;
  bool running = false;
  Fd err;               // read end of its stderr pipe, closed at EOF
  std::string pending;  // stderr bytes not yet written: the start of an unfinished line
};

// One launch_local call: starts the ranks, then one poll loop relays their stderr, forwards our
// signals, reaps exits (SIGCHLD wakes it) and, after a failure, stops the others.
class Launch {
 public:
  Launch(const LaunchOptions& options, int port) : options_(options), port_(port), ranks_(options.nproc) {}
  ~Launch();
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;
  int run();

 private:
  void start(int rank);
  void loop();
  int poll_timeout_ms() const;
  void forward_signals();
  void reap();
  void on_exit(int rank, int status);
  bool expected_stop(int status) const;
  void stop_others();
  void kill_after_grace();
  void send_running(int sig);
  bool any_running() const;
  bool read_stderr(int rank);
  void drain(int rank);
  void write_lines(int rank, bool at_eof);

  const LaunchOptions& options_;
  const int port_;
  SignalScope signals_;  // declared before ranks_: handlers stay until every rank is reaped
  std::vector<Rank> ranks_;
  int result_ = 0;                            // exit code of the first rank that failed
  bool stop_requested_ = false;               // we forwarded SIGINT or SIGTERM
  bool stopping_ = false;                     // a rank failed and the others were sent SIGTERM
  std::optional<Clock::time_point> kill_at_;  // when the others get SIGKILL
};

// Only reached with ranks running when something threw: leave no orphans behind.
Launch::~Launch() {
  for (Rank& rank : ranks_) {
    if (!rank.running) continue;
    kill(rank.pid, SIGKILL);
    waitpid(rank.pid, nullptr, 0);
  }
}

int Launch::run() {
  for (int rank = 0; rank < options_.nproc; ++rank) start(rank);
  loop();
  for (int rank = 0; rank < options_.nproc; ++rank) {
    drain(rank);
    // A grandchild may still hold the pipe open: flush what we have and stop listening.
    write_lines(rank, /*at_eof=*/true);
    ranks_[rank].err.reset();
  }
  return result_;
}

void Launch::start(int rank) {
  // Everything the child needs is built before fork: it must not allocate.
  const std::vector<std::string> env = child_environment(options_, port_, rank);
  const std::vector<char*> argv = c_strings(options_.command), envp = c_strings(env);
  Pipe err = make_pipe();
  set_nonblocking(err.read.get());
  const pid_t parent = getpid();
  const BlockedSignals blocked;
  const pid_t pid = fork();
  GENESIS_CHECK(pid >= 0, Error, "launch: cannot start rank ", rank, ": fork failed: ", errno_text());
  if (pid == 0) become_rank({argv.data(), envp.data(), err.write.get(), parent, &signals_, &blocked.previous()});
  ranks_[rank].pid = pid;
  ranks_[rank].running = true;
  ranks_[rank].err = std::move(err.read);  // err.write closes here: the child holds the only write end
}

void Launch::loop() {
  std::vector<pollfd> fds;
  std::vector<int> owner;  // fds[i + 1] is ranks_[owner[i]].err
  while (any_running()) {
    fds.assign(1, pollfd{signals_.fd(), POLLIN, 0});
    owner.clear();
    for (int rank = 0; rank < options_.nproc; ++rank) {
      if (!ranks_[rank].err) continue;
      fds.push_back(pollfd{ranks_[rank].err.get(), POLLIN, 0});
      owner.push_back(rank);
    }
    const int ready = poll(fds.data(), fds.size(), poll_timeout_ms());
    GENESIS_CHECK(ready >= 0 || errno == EINTR, Error, "launch: poll failed: ", errno_text());
    for (size_t i = 1; ready > 0 && i < fds.size(); ++i)
      if (fds[i].revents != 0) read_stderr(owner[i - 1]);  // one read each: a chatty rank cannot starve the others
    forward_signals();
    reap();
    kill_after_grace();
  }
}

// Sleep until something happens (SIGCHLD arrives through the self-pipe), or until the grace
// period of a failed launch runs out.
int Launch::poll_timeout_ms() const {
  if (!kill_at_) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*kill_at_ - Clock::now()).count();
  return static_cast<int>(std::clamp<decltype(left)>(left, 0, INT_MAX));
}

void Launch::forward_signals() {
  unsigned char received[64];
  ssize_t n;
  while ((n = read(signals_.fd(), received, sizeof received)) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      if (received[i] != SIGINT && received[i] != SIGTERM) continue;  // SIGCHLD only wakes us up
      stop_requested_ = true;
      send_running(received[i]);
    }
  }
}

void Launch::reap() {
  for (int rank = 0; rank < options_.nproc; ++rank) {
    if (!ranks_[rank].running) continue;
    int status = 0;
    const pid_t got = waitpid(ranks_[rank].pid, &status, WNOHANG);
    if (got == 0 || (got < 0 && errno == EINTR)) continue;
    // got < 0 (ECHILD): someone else in this process reaped it; count that as a failure.
    on_exit(rank, got > 0 ? status : W_EXITCODE(1, 0));
  }
}

void Launch::on_exit(int rank, int status) {
  ranks_[rank].running = false;
  drain(rank);  // its last words come before our verdict
  const int code = exit_code(status);
  if (code == 0) return;
  if (result_ == 0) result_ = code;
  if (stopping_ || expected_stop(status)) return;
  const bool others = any_running();
  write_all(STDERR_FILENO, detail::concat("genesis: rank ", rank, " ", describe_exit(status),
                                          others ? "; stopping the other ranks" : "", "\n"));
  if (others) stop_others();
}

// After we forwarded Ctrl-C or SIGTERM, a rank exiting 130 (a clean stop) or dying of the signal
// did what it was asked. Its peers are left to finish their own clean stop: a second signal
// would make them give it up.
bool Launch::expected_stop(int status) const {
  if (!stop_requested_) return false;
  if (WIFSIGNALED(status)) return WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGTERM;
  return exit_code(status) == 130;
}

// The others would otherwise wait forever in a collective for the rank that is gone.
void Launch::stop_others() {
  stopping_ = true;
  send_running(SIGTERM);
  const double grace = std::min(options_.grace_s, 1e9);  // keeps the time point finite
  kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace));
}

void Launch::kill_after_grace() {
  if (!kill_at_ || Clock::now() < *kill_at_) return;
  send_running(SIGKILL);
  kill_at_.reset();
}

// Only to ranks not yet reaped: the pid of a reaped one may already belong to another process.
void Launch::send_running(int sig) {
  for (const Rank& rank : ranks_)
    if (rank.running) kill(rank.pid, sig);
}

bool Launch::any_running() const {
  return std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& rank) { return rank.running; });
}

// One read of what rank's stderr pipe holds. Returns whether reading again may give more.
bool Launch::read_stderr(int rank) {
  Rank& r = ranks_[rank];
  char buffer[64 * 1024];
  const ssize_t n = read(r.err.get(), buffer, sizeof buffer);
  if (n > 0) {
    r.pending.append(buffer, static_cast<size_t>(n));
    write_lines(rank, /*at_eof=*/false);
    return true;
  }
  if (n < 0 && errno == EINTR) return true;
  if (n < 0 && errno == EAGAIN) return false;  // nothing now; the rank (or a grandchild) may write more
  write_lines(rank, /*at_eof=*/true);          // EOF: the last line may lack its newline
  r.err.reset();
  return false;
}

// Reads what an exited rank left in its pipe. Bounded: a grandchild that inherited the pipe may
// keep writing forever.
void Launch::drain(int rank) {
  for (int reads = 0; reads < kDrainReads && ranks_[rank].err; ++reads)
    if (!read_stderr(rank)) break;
}

// Writes rank's complete lines, each prefixed with "[rank N] ", in one write: lines of different
// ranks never mix. At EOF, or when a line outgrows kMaxLine, the unfinished rest goes out too.
void Launch::write_lines(int rank, bool at_eof) {
  std::string& pending = ranks_[rank].pending;
  const size_t newline = pending.rfind('\n');
  size_t end = newline == std::string::npos ? 0 : newline + 1;
  if (end < pending.size() && (at_eof || pending.size() - end >= kMaxLine)) {
    pending += '\n';
    end = pending.size();
  }
  if (end == 0) return;
  const std::string prefix = detail::concat("[rank ", rank, "] ");
  std::string out;
  for (size_t begin = 0; begin < end;) {
    const size_t line_end = pending.find('\n', begin) + 1;
    out += prefix;
    out.append(pending, begin, line_end - begin);
    begin = line_end;
  }
  pending.erase(0, end);
  write_all(STDERR_FILENO, out);
}

}  // namespace

int launch_local(const LaunchOptions& options) {
  validate(options);
  const int port = options.master_port != 0 ? options.master_port : pick_free_port(options.master_addr);
  Launch launch(options, port);
  return launch.run();
}

}  // namespace genesis::dist
