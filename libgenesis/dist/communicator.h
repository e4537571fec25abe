#pragma once
// Collectives between the ranks of a data-parallel run. One interface, three backends:
//   tcp   CPU tensors over sockets between the ranks (genesis's own; what `--nproc-per-node`
//         CPU ranks use, needing nothing installed),
//   mpi   CPU tensors through MPI (ranks started by mpirun; built when GENESIS_MPI finds it),
//   nccl  CUDA tensors through NCCL (on its own stream, ordered against the compute stream by
//         events).
// Every collective is asynchronous and returns a Work handle; wait() makes its result usable (on
// the host for CPU tensors; for CUDA tensors the current stream is ordered after it, the host does
// not block). Collectives must be issued in the same order on every rank. A rank that dies, closes
// its connection or does not answer within the communicator's timeout makes wait() throw
// DistError naming it, never hang.
#include <memory>
#include <string>
#include <string_view>

#include "libgenesis/core/tensor.h"

namespace genesis::dist {

enum class ReduceOp { sum, avg, max };

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};
using WorkHandle = std::shared_ptr<Work>;

// Tensors given to collectives are contiguous and hold the same shape and dtype on every rank
// (f32, f64, bf16, f16, i32 or i64; avg for floating types only). They must stay alive until
// wait() returns.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view backend() const = 0;

  // In place: every rank ends with the reduction of all ranks' tensors.
  virtual WorkHandle all_reduce(Tensor& tensor, ReduceOp op) = 0;
  // input holds size() equal chunks of output's numel, in rank order; rank r's output becomes the
  // reduction of every rank's chunk r.
  virtual WorkHandle reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) = 0;
  // output holds size() chunks of input's numel; chunk r becomes rank r's input.
  virtual WorkHandle all_gather(const Tensor& input, Tensor& output) = 0;
  // all_reduce and reduce_scatter with the data on the wire in `wire`, a narrower floating type
  // (bf16 for f32 gradients: half the bytes): each rank's values are rounded to it, reduced in it,
  // and the result is written back in the tensor's own dtype. wire == the tensor's dtype is the
  // plain collective. The backends' default casts on the calling thread's stream and casts back
  // in wait(); nccl does both on its own stream, beside the work that follows.
  virtual WorkHandle all_reduce_as(Tensor& tensor, ReduceOp op, DType wire);
  virtual WorkHandle reduce_scatter_as(const Tensor& input, Tensor& output, ReduceOp op, DType wire);
  // all_gather with the data on the wire in `wire` (ZeRO-3's bf16 parameter gathers): input is
  // rounded to it, and output receives every rank's rounded values, own chunk included, widened
  // back in wait(). wire == input's dtype is the plain collective.
  virtual WorkHandle all_gather_as(const Tensor& input, Tensor& output, DType wire);
  // In place: every rank ends with root's tensor.
  virtual WorkHandle broadcast(Tensor& tensor, int root) = 0;
  // Returns when every rank has called it (host-side; throws DistError on a dead rank or timeout).
  virtual void barrier() = 0;
  // The peers this rank can tell are gone, for messages ("rank 1 closed its connection (it exited
  // or crashed)"); empty when none is, or when the backend cannot tell. Safe to call from another
  // thread while collectives run.
  virtual std::string lost_peers() const { return {}; }
};

// Throws ValueError unless a collective of t's dtype may travel as `wire` (both floating).
void check_wire_dtype(const Tensor& t, DType wire, const char* what);

}  // namespace genesis::dist
