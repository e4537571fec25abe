#include "libgenesis/dist/mpi_communicator.h"

// Compiled as C++, mpi.h would also declare MPI's removed C++ bindings (and need their library):
// genesis uses the C API only.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "libgenesis/dist/failure.h"

namespace genesis::dist {

namespace {

// Every MPI call of this backend holds this lock: MPI_THREAD_SERIALIZED lets any thread call MPI,
// one at a time (a wait() in an autograd hook's thread, a collective from the training loop).
std::mutex& mpi_mutex() {
  static std::mutex m;
  return m;
}

// Set once a collective failed or timed out: MPI_Finalize would wait for the rank that failed.
std::atomic<bool> g_failed{false};

// Buffers of collectives that never completed. MPI may still write into them, so they are never
// freed (only after a failure, when the process is about to end anyway).
std::vector<Tensor>& abandoned_buffers() {
  static auto* buffers = new std::vector<Tensor>();
  return *buffers;
}

// MPI has no 16-bit float types: f16 and bf16 travel as MPI_UINT16_T with these ops, which
// convert each pair to f32, combine and round back.
struct HalfOps {
  MPI_Op f16_sum = MPI_OP_NULL, f16_max = MPI_OP_NULL, bf16_sum = MPI_OP_NULL, bf16_max = MPI_OP_NULL;
};
HalfOps g_half_ops;

template <class Half, bool kMax>
void reduce_half(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const Half*>(in);
  auto* b = static_cast<Half*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = a[i], y = b[i];
    // max keeps a NaN from either side, so the result does not depend on the order of the pair.
    b[i] = Half(kMax ? (std::isnan(x) || x > y ? x : y) : x + y);
  }
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

void finalize_at_exit() {
  std::lock_guard lock(mpi_mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !g_failed) MPI_Finalize();
}

void init_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // Errors before MPI_Init returns go to MPI's default handler (which aborts): no code to check.
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    std::atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);  // initialized by the embedding program, which also finalizes it
  }
  GENESIS_CHECK(provided >= MPI_THREAD_SERIALIZED, DistError, "mpi: the MPI library provides thread level ", provided,
                ", below MPI_THREAD_SERIALIZED, which genesis needs (collectives are waited for from any thread)");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Op_create(reduce_half<float16, false>, 1, &g_half_ops.f16_sum);
  MPI_Op_create(reduce_half<float16, true>, 1, &g_half_ops.f16_max);
  MPI_Op_create(reduce_half<bfloat16, false>, 1, &g_half_ops.bf16_sum);
  MPI_Op_create(reduce_half<bfloat16, true>, 1, &g_half_ops.bf16_max);
}

MPI_Datatype mpi_type(DType dtype, const char* what) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::f16:
    case DType::bf16:
      return MPI_UINT16_T;
    default:
      GENESIS_THROW(DTypeError, "mpi: ", what, " takes f32, f64, bf16, f16, i32 or i64 tensors (got ",
                    dtype_name(dtype), ")");
  }
}

MPI_Op mpi_op(DType dtype, ReduceOp op, const char* what) {
  GENESIS_CHECK(op != ReduceOp::avg || is_floating(dtype), DTypeError, "mpi: ", what,
                " with avg needs a floating dtype (got ", dtype_name(dtype), ")");
  const bool max = op == ReduceOp::max;
  if (dtype == DType::f16) return max ? g_half_ops.f16_max : g_half_ops.f16_sum;
  if (dtype == DType::bf16) return max ? g_half_ops.bf16_max : g_half_ops.bf16_sum;
  return max ? MPI_MAX : MPI_SUM;
}

// Checks a tensor handed to a collective; returns its element count as MPI's int count.
int checked_count(const Tensor& t, const char* what, const char* role) {
  GENESIS_CHECK(t.defined(), ValueError, "mpi: ", what, ": ", role, " is an undefined tensor");
  GENESIS_CHECK(t.device().is_cpu(), DeviceError, "mpi: ", what, " takes CPU tensors (", role, " is on ", t.device(),
                "); CUDA tensors go through the nccl backend");
  GENESIS_CHECK(t.is_contiguous(), ValueError, "mpi: ", what, " needs a contiguous ", role, " (shape ", t.shape(),
                ", strides ", t.strides(), ")");
  mpi_type(t.dtype(), what);
  GENESIS_CHECK(t.numel() <= INT_MAX, ValueError, "mpi: ", what, " of ", t.numel(), " elements is over MPI's limit of ",
                INT_MAX, " per call; split the tensor");
  return static_cast<int>(t.numel());
}

size_t byte_size(const Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

bool overlap(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const char*>(a.data_ptr());
  const auto* pb = static_cast<const char*>(b.data_ptr());
  return pa < pb + byte_size(b) && pb < pa + byte_size(a);
}

// avg is a sum divided on the host once it arrived, in the tensor's dtype.
void divide_in_place(const Tensor& t, int divisor) {
  GENESIS_DISPATCH_FLOAT(t.dtype(), "mpi avg", {
    auto* p = static_cast<scalar_t*>(t.data_ptr());
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<scalar_t>(static_cast<acc_t<scalar_t>>(p[i]) / divisor);
  });
}

// What a communicator and its Work handles share (a Work may outlive its communicator).
struct CommState {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  double timeout_s = 0;

  [[noreturn]] void fail(const std::string& message) {
    {
      std::lock_guard lock(failure_mutex);
      if (failure.empty()) failure = message;
    }
    g_failed = true;
    report_failure(message);
    throw DistError(message);
  }
  bool failed() const {
    std::lock_guard lock(failure_mutex);
    return !failure.empty();
  }
  void check_usable() const {
    std::lock_guard lock(failure_mutex);
    GENESIS_CHECK(failure.empty(), DistError, "mpi: the communicator is unusable after an earlier failure: ", failure);
  }
  void check_call(int code, const char* call) {
    if (code != MPI_SUCCESS) fail(detail::concat("mpi: ", call, " failed on rank ", rank, ": ", mpi_error_text(code)));
  }

 private:
  mutable std::mutex failure_mutex;
  std::string failure;  // the first failure; once set the ranks are out of step and every collective refuses
};

// Waits for a request, polling MPI_Test until it completes or the communicator's timeout passes.
void wait_for(CommState& state, MPI_Request& request, const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(state.timeout_s));
  for (;;) {
    int done = 0;
    int code = MPI_SUCCESS;
    {
      std::lock_guard lock(mpi_mutex());
      code = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    }
    state.check_call(code, "MPI_Test");
    if (done) return;
    const auto now = Clock::now();
    if (now >= deadline) {
      state.fail(detail::concat("mpi: ", what, " did not complete within ", state.timeout_s, " s on rank ", state.rank,
                                " of ", state.size, " (a rank died or hangs)"));
    }
    // MPI progresses a nonblocking collective only inside MPI calls: poll tightly for the first
    // milliseconds (most collectives finish there), then leave the cores to other threads between polls.
    if (now - start < std::chrono::milliseconds(10)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

class MpiWork : public Work {
 public:
  MpiWork(std::shared_ptr<CommState> state, MPI_Request request, std::string what, std::vector<Tensor> buffers,
          Tensor average)
      : state_(std::move(state)),
        request_(request),
        what_(std::move(what)),
        buffers_(std::move(buffers)),
        average_(std::move(average)) {}

  // A Work dropped without wait() is waited for here: MPI must not write into freed buffers. A
  // failure then only marks the communicator, whose next collective reports it.
  ~MpiWork() override {
    try {
      wait();
    } catch (...) {
    }
  }

  void wait() override {
    if (done_) return;
    try {
      state_->check_usable();
      wait_for(*state_, request_, what_);
    } catch (const DistError&) {
      std::lock_guard lock(mpi_mutex());
      auto& abandoned = abandoned_buffers();
      abandoned.insert(abandoned.end(), buffers_.begin(), buffers_.end());
      buffers_.clear();
      average_ = Tensor();
      throw;
    }
    done_ = true;
    if (average_.defined()) divide_in_place(average_, state_->size);
    buffers_.clear();
    average_ = Tensor();
  }

 private:
  std::shared_ptr<CommState> state_;
  MPI_Request request_;
  std::string what_;             // "all_reduce of 4 bytes", for the timeout message
  std::vector<Tensor> buffers_;  // kept alive until the collective completed
  Tensor average_;               // avg: the result to divide by the size once it arrived
  bool done_ = false;
};

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(double timeout_s) : state_(std::make_shared<CommState>()) {
    GENESIS_CHECK(std::isfinite(timeout_s) && timeout_s > 0, ValueError,
                  "mpi: the timeout must be a positive number of seconds (got ", timeout_s, ")");
    state_->timeout_s = timeout_s;
    std::lock_guard lock(mpi_mutex());
    static std::once_flag once;
    std::call_once(once, init_mpi);
    state_->check_call(MPI_Comm_dup(MPI_COMM_WORLD, &state_->comm), "MPI_Comm_dup");
    state_->check_call(MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    MPI_Comm_rank(state_->comm, &state_->rank);
    MPI_Comm_size(state_->comm, &state_->size);
  }

  ~MpiCommunicator() override {
    std::lock_guard lock(mpi_mutex());
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !state_->failed()) MPI_Comm_free(&state_->comm);
  }

  int rank() const override { return state_->rank; }
  int size() const override { return state_->size; }
  std::string_view backend() const override { return "mpi"; }

  WorkHandle all_reduce(Tensor& tensor, ReduceOp op) override {
    const int count = checked_count(tensor, "all_reduce", "the tensor");
    const MPI_Datatype type = mpi_type(tensor.dtype(), "all_reduce");
    const MPI_Op mpi_reduce = mpi_op(tensor.dtype(), op, "all_reduce");
    return issue("MPI_Iallreduce", describe("all_reduce", tensor), {tensor}, op == ReduceOp::avg ? tensor : Tensor(),
                 [&](MPI_Request* request) {
                   return MPI_Iallreduce(MPI_IN_PLACE, tensor.data_ptr(), count, type, mpi_reduce, state_->comm,
                                         request);
                 });
  }

  WorkHandle reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    checked_count(input, "reduce_scatter", "input");
    const int count = checked_count(output, "reduce_scatter", "output");
    check_same_dtype(input, output, "reduce_scatter");
    GENESIS_CHECK(input.numel() == output.numel() * size(), ShapeError, "mpi: reduce_scatter's input holds ",
                  input.numel(), " elements, not ", size(), " chunks of output's ", output.numel());
    GENESIS_CHECK(!overlap(input, output), ValueError, "mpi: reduce_scatter's input and output overlap in memory");
    const MPI_Datatype type = mpi_type(input.dtype(), "reduce_scatter");
    const MPI_Op mpi_reduce = mpi_op(input.dtype(), op, "reduce_scatter");
    return issue("MPI_Ireduce_scatter_block", describe("reduce_scatter", input), {input, output},
                 op == ReduceOp::avg ? output : Tensor(), [&](MPI_Request* request) {
                   return MPI_Ireduce_scatter_block(input.data_ptr(), output.data_ptr(), count, type, mpi_reduce,
                                                    state_->comm, request);
                 });
  }

  WorkHandle all_gather(const Tensor& input, Tensor& output) override {
    const int count = checked_count(input, "all_gather", "input");
    checked_count(output, "all_gather", "output");
    check_same_dtype(input, output, "all_gather");
    GENESIS_CHECK(output.numel() == input.numel() * size(), ShapeError, "mpi: all_gather's output holds ",
                  output.numel(), " elements, not ", size(), " chunks of input's ", input.numel());
    // An input that is this rank's chunk of the output (a shard viewing the full buffer) is gathered
    // in place; any other overlap is an error.
    const auto* chunk = static_cast<const char*>(output.data_ptr()) + static_cast<size_t>(rank()) * byte_size(input);
    const bool in_place = input.numel() > 0 && input.data_ptr() == chunk;
    GENESIS_CHECK(in_place || !overlap(input, output), ValueError,
                  "mpi: all_gather's input overlaps the output without being this rank's chunk of it");
    const MPI_Datatype type = mpi_type(input.dtype(), "all_gather");
    return issue("MPI_Iallgather", describe("all_gather", output), {input, output}, Tensor(),
                 [&](MPI_Request* request) {
                   return MPI_Iallgather(in_place ? MPI_IN_PLACE : input.data_ptr(), count, type, output.data_ptr(),
                                         count, type, state_->comm, request);
                 });
  }

  WorkHandle broadcast(Tensor& tensor, int root) override {
    const int count = checked_count(tensor, "broadcast", "the tensor");
    GENESIS_CHECK(root >= 0 && root < size(), ValueError, "mpi: broadcast from root ", root, " but the ranks are 0..",
                  size() - 1);
    const MPI_Datatype type = mpi_type(tensor.dtype(), "broadcast");
    return issue("MPI_Ibcast", describe("broadcast", tensor), {tensor}, Tensor(), [&](MPI_Request* request) {
      return MPI_Ibcast(tensor.data_ptr(), count, type, root, state_->comm, request);
    });
  }

  void barrier() override {
    // Through MPI_Ibarrier, so that a dead or hung rank ends in the timeout, not in a hang.
    issue("MPI_Ibarrier", "barrier", {}, Tensor(), [&](MPI_Request* request) {
      return MPI_Ibarrier(state_->comm, request);
    })->wait();
  }

 private:
  static void check_same_dtype(const Tensor& input, const Tensor& output, const char* what) {
    GENESIS_CHECK(input.dtype() == output.dtype(), DTypeError, "mpi: ", what, "'s input is ", dtype_name(input.dtype()),
                  " but its output is ", dtype_name(output.dtype()));
  }

  // "all_reduce of 4004 bytes": what a timeout message names.
  static std::string describe(const char* what, const Tensor& t) {
    return detail::concat(what, " of ", byte_size(t), " bytes");
  }

  // Starts a collective (start(request) makes the MPI call) and returns its Work handle.
  template <class Start>
  WorkHandle issue(const char* call, std::string what, std::vector<Tensor> buffers, Tensor average, Start&& start) {
    state_->check_usable();
    MPI_Request request = MPI_REQUEST_NULL;
    int code = MPI_SUCCESS;
    {
      std::lock_guard lock(mpi_mutex());
      code = start(&request);
    }
    state_->check_call(code, call);
    return std::make_shared<MpiWork>(state_, request, std::move(what), std::move(buffers), std::move(average));
  }

  std::shared_ptr<CommState> state_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(double timeout_s) {
  return std::make_unique<MpiCommunicator>(timeout_s);
}

}  // namespace genesis::dist
