#include "libgenesis/dist/tcp_communicator.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "libgenesis/core/error.h"
#include "libgenesis/dist/failure.h"
#include "libgenesis/core/half.h"

namespace genesis::dist {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHelloMagic = 0x67656e31;  // "gen1"

// What a frame carries; the header's kind must match on both ends.
enum class Kind : uint32_t { all_reduce = 1, reduce_scatter, all_gather, broadcast, barrier, abort };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::all_reduce: return "all_reduce";
    case Kind::reduce_scatter: return "reduce_scatter";
    case Kind::all_gather: return "all_gather";
    case Kind::broadcast: return "broadcast";
    case Kind::barrier: return "barrier";
    case Kind::abort: return "abort";
  }
  return "?";
}

struct FrameHeader {
  Kind kind;
  uint32_t pad = 0;
  uint64_t bytes;  // payload bytes that follow
};

// A connected socket to one peer; closes on destruction.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      close_fd();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~Socket() { close_fd(); }
  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }

 private:
  void close_fd() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
};

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// Waits until fd is ready for `events`; false at the deadline.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return true;  // let the read/write report the error
  }
}

// The peer of a transfer, for messages: "rank 1".
std::string peer_name(int rank) { return rank < 0 ? "a joining process" : "rank " + std::to_string(rank); }

void send_all(int fd, const void* data, size_t n, Clock::time_point deadline, int peer, double timeout_s) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    GENESIS_CHECK(wait_ready(fd, POLLOUT, deadline), DistError, "tcp: ", peer_name(peer), " did not take data within ",
                  timeout_s, " s (it hangs, or dist.timeout_s is too short for this step)");
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    GENESIS_CHECK(w > 0, DistError, "tcp: the connection to ", peer_name(peer), " broke (", std::strerror(errno),
                  "): it exited or crashed");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void recv_all(int fd, void* data, size_t n, Clock::time_point deadline, int peer, double timeout_s) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    GENESIS_CHECK(wait_ready(fd, POLLIN, deadline), DistError, "tcp: ", peer_name(peer), " sent nothing within ",
                  timeout_s, " s (it hangs, or dist.timeout_s is too short for this step)");
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    GENESIS_CHECK(r != 0 && !(r < 0 && errno == ECONNRESET), DistError, "tcp: ", peer_name(peer),
                  " closed its connection (it exited or crashed)");
    GENESIS_CHECK(r > 0, DistError, "tcp: reading from ", peer_name(peer), " failed: ", std::strerror(errno));
    p += r;
    n -= static_cast<size_t>(r);
  }
}

void set_socket_options(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) ::freeaddrinfo(list);
  }
};

void resolve(const ProcessEnv& env, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const std::string port = std::to_string(env.master_port);
  const int rc = ::getaddrinfo(env.master_addr.c_str(), port.c_str(), &hints, &out.list);
  GENESIS_CHECK(rc == 0, UsageError, "MASTER_ADDR=", env.master_addr, " does not resolve (", ::gai_strerror(rc),
                "); set it to the host name or address of rank 0");
}

// Rank 0: a listening socket at MASTER_ADDR:MASTER_PORT.
Socket listen_at(const ProcessEnv& env) {
  AddrInfo ai;
  resolve(env, true, ai);
  int last_errno = 0;
  for (addrinfo* a = ai.list; a; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.open()) continue;
    const int one = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.fd(), 128) == 0) return s;
    last_errno = errno;
  }
  GENESIS_THROW(UsageError, "rank 0 cannot listen at MASTER_ADDR:MASTER_PORT = ", env.master_addr, ":",
                env.master_port, " (", std::strerror(last_errno),
                "); pick a free port, or an address of rank 0's host");
}

// Ranks > 0: connects to rank 0, retrying while it starts, until the deadline.
Socket connect_to_root(const ProcessEnv& env, Clock::time_point deadline, double timeout_s) {
  std::string last_error = "no address";
  while (Clock::now() < deadline) {
    AddrInfo ai;
    resolve(env, false, ai);
    for (addrinfo* a = ai.list; a; a = a->ai_next) {
      Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!s.open()) continue;
      if (::connect(s.fd(), a->ai_addr, a->ai_addrlen) == 0) return s;
      last_error = std::strerror(errno);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  GENESIS_THROW(UsageError, "rank ", env.rank, " could not reach rank 0 at MASTER_ADDR:MASTER_PORT = ", env.master_addr,
                ":", env.master_port, " within ", timeout_s, " s (", last_error,
                "); check MASTER_ADDR and that rank 0 started");
}

struct Hello {
  uint32_t magic;
  uint32_t world_size;
  uint32_t rank;
};

// ---- reductions, summed in rank order ----

// acc (in the accumulation type) op= src; `first` copies.
template <class T, class Acc>
void accumulate(Acc* acc, const T* src, size_t n, ReduceOp op, bool first) {
  for (size_t i = 0; i < n; ++i) {
    const Acc v = static_cast<Acc>(src[i]);
    acc[i] = first ? v : op == ReduceOp::max ? std::max(acc[i], v) : acc[i] + v;
  }
}

// Reduces world_size buffers of n elements of dtype (given in rank order) into out.
void reduce_buffers(const std::vector<const void*>& inputs, void* out, size_t n, DType dtype, ReduceOp op) {
  const auto divisor = static_cast<double>(inputs.size());
  auto run = [&]<class T, class Acc>(T*, Acc*) {
    std::vector<Acc> acc(n);
    for (size_t r = 0; r < inputs.size(); ++r) accumulate(acc.data(), static_cast<const T*>(inputs[r]), n, op, r == 0);
    T* dst = static_cast<T*>(out);
    for (size_t i = 0; i < n; ++i)
      dst[i] = static_cast<T>(op == ReduceOp::avg ? static_cast<Acc>(static_cast<double>(acc[i]) / divisor) : acc[i]);
  };
  switch (dtype) {
    case DType::f32: run(static_cast<float*>(nullptr), static_cast<double*>(nullptr)); break;
    case DType::f64: run(static_cast<double*>(nullptr), static_cast<double*>(nullptr)); break;
    case DType::bf16: run(static_cast<bfloat16*>(nullptr), static_cast<float*>(nullptr)); break;
    case DType::f16: run(static_cast<float16*>(nullptr), static_cast<float*>(nullptr)); break;
    case DType::i32: run(static_cast<int32_t*>(nullptr), static_cast<int64_t*>(nullptr)); break;
    case DType::i64: run(static_cast<int64_t*>(nullptr), static_cast<int64_t*>(nullptr)); break;
    default: throw_unsupported_dtype("tcp collective", dtype);
  }
}

// ---- the worker that runs collectives in order ----

class TcpWork final : public Work {
 public:
  explicit TcpWork(std::shared_future<void> done) : done_(std::move(done)) {}
  void wait() override { done_.get(); }

 private:
  std::shared_future<void> done_;
};

class TcpCommunicator final : public Communicator {
 public:
  TcpCommunicator(const ProcessEnv& env, double timeout_s) : rank_(env.rank), size_(env.world_size), timeout_s_(timeout_s) {
    const Clock::time_point deadline = Clock::now() + timeout();
    peers_.resize(static_cast<size_t>(size_));
    if (size_ > 1 && rank_ == 0) accept_all(env, deadline);
    if (size_ > 1 && rank_ > 0) join(env, deadline);
    worker_ = std::thread([this] { run_jobs(); });
  }

  ~TcpCommunicator() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "tcp"; }

  std::string lost_peers() const override {
    std::string lost;
    for (size_t r = 0; r < peers_.size(); ++r) {
      if (!peers_[r].open()) continue;
      // A peek that reads nothing: 0 bytes means the peer closed its end; EAGAIN means it is there.
      char byte = 0;
      const ssize_t n = ::recv(peers_[r].fd(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE)))
        lost += (lost.empty() ? "" : "; ") + peer_name(static_cast<int>(r)) + " closed its connection (it exited or crashed)";
    }
    return lost;
  }

  WorkHandle all_reduce(Tensor& tensor, ReduceOp op) override {
    check_tensor(tensor, "all_reduce", op);
    return enqueue([this, t = tensor, op] {
      const size_t bytes = nbytes(t);
      announce(Kind::all_reduce, bytes);
      std::vector<char> result = gather_reduce(Kind::all_reduce, t.data_ptr(), t.numel(), t.dtype(), op, bytes);
      if (rank_ == 0) {
        std::memcpy(t.data_ptr(), result.data(), bytes);
        for (int r = 1; r < size_; ++r) send_frame(r, Kind::all_reduce, t.data_ptr(), bytes);
      } else {
        recv_frame(0, Kind::all_reduce, t.data_ptr(), bytes);
      }
    });
  }

  WorkHandle reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    check_tensor(input, "reduce_scatter", op);
    check_tensor(output, "reduce_scatter", op);
    GENESIS_CHECK(input.dtype() == output.dtype() && input.numel() == output.numel() * size_, ValueError,
                  "reduce_scatter: input of ", input.numel(), " elements for ", size_, " ranks needs an output of ",
                  input.numel() / std::max(size_, 1), " elements of its dtype");
    return enqueue([this, in = input, out = output, op] {
      const size_t chunk = nbytes(out);
      announce(Kind::reduce_scatter, nbytes(in));
      std::vector<char> result = gather_reduce(Kind::reduce_scatter, in.data_ptr(), in.numel(), in.dtype(), op, nbytes(in));
      if (rank_ == 0) {
        for (int r = 1; r < size_; ++r) send_frame(r, Kind::reduce_scatter, result.data() + chunk * r, chunk);
        std::memcpy(out.data_ptr(), result.data(), chunk);
      } else {
        recv_frame(0, Kind::reduce_scatter, out.data_ptr(), chunk);
      }
    });
  }

  WorkHandle all_gather(const Tensor& input, Tensor& output) override {
    check_tensor(input, "all_gather", ReduceOp::sum);
    check_tensor(output, "all_gather", ReduceOp::sum);
    GENESIS_CHECK(input.dtype() == output.dtype() && output.numel() == input.numel() * size_, ValueError,
                  "all_gather: output of ", output.numel(), " elements for ", size_, " ranks of ", input.numel(),
                  " elements each");
    return enqueue([this, in = input, out = output] {
      const size_t chunk = nbytes(in);
      announce(Kind::all_gather, chunk);
      char* all = static_cast<char*>(out.data_ptr());
      if (rank_ == 0) {
        if (in.data_ptr() != all) std::memcpy(all, in.data_ptr(), chunk);  // in place: rank 0's chunk is there
        for (int r = 1; r < size_; ++r) recv_frame(r, Kind::all_gather, all + chunk * r, chunk);
        for (int r = 1; r < size_; ++r) send_frame(r, Kind::all_gather, all, chunk * size_);
      } else {
        send_frame(0, Kind::all_gather, in.data_ptr(), chunk);
        recv_frame(0, Kind::all_gather, all, chunk * size_);
      }
    });
  }

  WorkHandle broadcast(Tensor& tensor, int root) override {
    check_tensor(tensor, "broadcast", ReduceOp::sum);
    GENESIS_CHECK(root >= 0 && root < size_, ValueError, "broadcast: root ", root, " is not a rank (0..", size_ - 1, ")");
    return enqueue([this, t = tensor, root] {
      const size_t bytes = nbytes(t);
      announce(Kind::broadcast, bytes);
      if (rank_ == 0) {
        if (root != 0) recv_frame(root, Kind::broadcast, t.data_ptr(), bytes);
        for (int r = 1; r < size_; ++r)
          if (r != root) send_frame(r, Kind::broadcast, t.data_ptr(), bytes);
      } else if (rank_ == root) {
        send_frame(0, Kind::broadcast, t.data_ptr(), bytes);
      } else {
        recv_frame(0, Kind::broadcast, t.data_ptr(), bytes);
      }
    });
  }

  void barrier() override {
    enqueue([this] {
      announce(Kind::barrier, 1);  // rank 0 has heard from every rank: release them
      char byte = 1;
      if (rank_ == 0) {
        for (int r = 1; r < size_; ++r) send_frame(r, Kind::barrier, &byte, 1);
      } else {
        recv_frame(0, Kind::barrier, &byte, 1);
      }
    })->wait();
  }

 private:
  std::chrono::steady_clock::duration timeout() const {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  }

  static size_t nbytes(const Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

  static void check_tensor(const Tensor& t, const char* what, ReduceOp op) {
    GENESIS_CHECK(t.defined() && t.device().is_cpu(), DeviceError, "tcp ", what,
                  ": the tcp backend carries CPU tensors (CUDA tensors go through nccl)");
    GENESIS_CHECK(t.is_contiguous(), ValueError, "tcp ", what, ": the tensor must be contiguous");
    GENESIS_CHECK(op != ReduceOp::avg || is_floating(t.dtype()), DTypeError, "tcp ", what, ": avg of ",
                  dtype_name(t.dtype()), " values; use sum");
  }

  void accept_all(const ProcessEnv& env, Clock::time_point deadline) {
    Socket listener = listen_at(env);
    for (int joined = 1; joined < size_;) {
      GENESIS_CHECK(wait_ready(listener.fd(), POLLIN, deadline), DistError, "tcp: only ", joined, " of ", size_,
                    " ranks joined within ", timeout_s_, " s (the others did not start, or cannot reach ",
                    env.master_addr, ":", env.master_port, ")");
      Socket s(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!s.open()) continue;
      set_socket_options(s.fd());
      Hello hello{};
      recv_all(s.fd(), &hello, sizeof hello, deadline, -1, timeout_s_);
      GENESIS_CHECK(hello.magic == kHelloMagic, DistError, "tcp: a connection to ", env.master_addr, ":",
                    env.master_port, " is not a genesis rank (another program uses MASTER_PORT?)");
      GENESIS_CHECK(static_cast<int>(hello.world_size) == size_, UsageError, "rank ", hello.rank,
                    " was started with WORLD_SIZE=", hello.world_size, " and rank 0 with ", size_,
                    "; start every rank with the same world size");
      const auto r = static_cast<int>(hello.rank);
      GENESIS_CHECK(r > 0 && r < size_ && !peers_[static_cast<size_t>(r)].open(), UsageError, "two processes claim rank ",
                    r, " (or rank 0); give every process its own RANK");
      peers_[static_cast<size_t>(r)] = std::move(s);
      ++joined;
    }
    char ok = 1;
    for (int r = 1; r < size_; ++r) send_all(peer(r), &ok, 1, deadline, r, timeout_s_);
  }

  void join(const ProcessEnv& env, Clock::time_point deadline) {
    Socket s = connect_to_root(env, deadline, timeout_s_);
    set_socket_options(s.fd());
    const Hello hello{kHelloMagic, static_cast<uint32_t>(size_), static_cast<uint32_t>(rank_)};
    send_all(s.fd(), &hello, sizeof hello, deadline, 0, timeout_s_);
    char ok = 0;
    recv_all(s.fd(), &ok, 1, deadline, 0, timeout_s_);
    peers_[0] = std::move(s);
  }

  int peer(int r) const { return peers_[static_cast<size_t>(r)].fd(); }

  void send_frame(int to, Kind kind, const void* data, size_t bytes) {
    const Clock::time_point deadline = Clock::now() + timeout();
    const FrameHeader h{kind, 0, bytes};
    send_all(peer(to), &h, sizeof h, deadline, to, timeout_s_);
    send_all(peer(to), data, bytes, deadline, to, timeout_s_);
  }

  void recv_frame(int from, Kind kind, void* data, size_t bytes) {
    const Clock::time_point deadline = Clock::now() + timeout();
    FrameHeader h{};
    recv_all(peer(from), &h, sizeof h, deadline, from, timeout_s_);
    if (h.kind == Kind::abort) {
      std::string why(h.bytes, '\0');
      recv_all(peer(from), why.data(), why.size(), deadline, from, timeout_s_);
      GENESIS_THROW(DistError, why);
    }
    GENESIS_CHECK(h.kind == kind && h.bytes == bytes, DistError, "tcp: ", peer_name(from), " issued ",
                  kind_name(h.kind), " of ", h.bytes, " bytes where ", peer_name(rank_), " issued ", kind_name(kind),
                  " of ", bytes, " bytes: every rank must issue the same collectives in the same order");
    recv_all(peer(from), data, bytes, deadline, from, timeout_s_);
  }

  // Every collective opens with each rank telling rank 0 what it issued, so that ranks which issue
  // different collectives fail at once, naming both, rather than wait on each other.
  void announce(Kind kind, size_t bytes) {
    const Clock::time_point deadline = Clock::now() + timeout();
    if (rank_ != 0) {
      const FrameHeader h{kind, 0, bytes};
      send_all(peer(0), &h, sizeof h, deadline, 0, timeout_s_);
      return;
    }
    for (int r = 1; r < size_; ++r) {
      FrameHeader h{};
      recv_all(peer(r), &h, sizeof h, deadline, r, timeout_s_);
      GENESIS_CHECK(h.kind == kind && h.bytes == bytes, DistError, "tcp: ", peer_name(r), " issued ", kind_name(h.kind),
                    " of ", h.bytes, " bytes where rank 0 issued ", kind_name(kind), " of ", bytes,
                    " bytes: every rank must issue the same collectives in the same order");
    }
  }

  // Rank 0 receives every rank's buffer and returns the reduction; the others send theirs and
  // return nothing.
  std::vector<char> gather_reduce(Kind kind, const void* mine, int64_t numel, DType dtype, ReduceOp op, size_t bytes) {
    if (rank_ != 0) {
      send_frame(0, kind, mine, bytes);
      return {};
    }
    std::vector<std::vector<char>> received(static_cast<size_t>(size_));
    std::vector<const void*> inputs{mine};
    for (int r = 1; r < size_; ++r) {
      received[static_cast<size_t>(r)].resize(bytes);
      recv_frame(r, kind, received[static_cast<size_t>(r)].data(), bytes);
      inputs.push_back(received[static_cast<size_t>(r)].data());
    }
    std::vector<char> result(bytes);
    reduce_buffers(inputs, result.data(), static_cast<size_t>(numel), dtype, op);
    return result;
  }

  // Rank 0, after a failure: tells the other ranks why (best effort) so they stop with the reason.
  void tell_others(const std::string& why) {
    if (rank_ != 0) return;
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(1);
    for (int r = 1; r < size_; ++r) {
      try {
        const FrameHeader h{Kind::abort, 0, why.size()};
        send_all(peer(r), &h, sizeof h, deadline, r, 1.0);
        send_all(peer(r), why.data(), why.size(), deadline, r, 1.0);
      } catch (const DistError&) {  // that rank is gone too
      }
    }
  }

  WorkHandle enqueue(std::function<void()> job) {
    auto promise = std::make_shared<std::promise<void>>();
    std::shared_future<void> done = promise->get_future().share();
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back([this, job = std::move(job), promise] {
        try {
          if (failure_) std::rethrow_exception(failure_);
          job();
          promise->set_value();
        } catch (...) {
          if (!failure_) {
            failure_ = std::current_exception();
            try {
              throw;
            } catch (const DistError& e) {
              report_failure(e.what());
              tell_others(e.what());
            } catch (const std::exception& e) {
              tell_others(e.what());
            }
          }
          promise->set_exception(failure_);
        }
      });
    }
    cv_.notify_all();
    return std::make_shared<TcpWork>(std::move(done));
  }

  void run_jobs() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  int rank_, size_;
  double timeout_s_;
  std::vector<Socket> peers_;  // rank 0: one per other rank; the others: peers_[0] only
  std::exception_ptr failure_;  // the first failure; every later collective rethrows it
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
};

}  // namespace

std::unique_ptr<Communicator> make_tcp_communicator(const ProcessEnv& env, double timeout_s) {
  GENESIS_CHECK(timeout_s > 0, ValueError, "tcp communicator: timeout_s must be > 0");
  return std::make_unique<TcpCommunicator>(env, timeout_s);
}

}  // namespace genesis::dist
