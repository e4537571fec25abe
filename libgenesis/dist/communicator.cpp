#include "libgenesis/dist/communicator.h"

#include <cstring>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/core/storage.h"
#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis::dist {

namespace {

// A collective on narrower copies: wait() completes it, then writes the result back (widened) as
// the plain collectives write theirs: into the memory, without bumping the tensor's version, so
// that a ZeRO-3 regather leaves the views a forward saved for its backward valid. It holds the
// copies until then (the collective reads and writes them).
class CastBackWork final : public Work {
 public:
  CastBackWork(WorkHandle inner, Tensor wire_in, Tensor wire_out, Tensor result)
      : inner_(std::move(inner)), wire_in_(std::move(wire_in)), wire_out_(std::move(wire_out)), result_(std::move(result)) {
    GENESIS_CHECK(result_.is_contiguous(), ValueError, "collective: the result tensor must be contiguous");
  }
  void wait() override {
    if (!inner_) return;
    inner_->wait();
    NoGradGuard no_grad;
    const Tensor wide = wire_out_.to(result_.dtype()).contiguous();
    const size_t bytes = static_cast<size_t>(wide.numel()) * dtype_size(wide.dtype());
#if GENESIS_WITH_CUDA
    if (result_.device().is_cuda())
      cuda::memcpy(result_.data_ptr(), result_.device(), wide.data_ptr(), wide.device(), bytes);
    else
#endif
      std::memcpy(result_.data_ptr(), wide.data_ptr(), bytes);
    inner_.reset();
    wire_in_ = wire_out_ = Tensor();
  }

 private:
  WorkHandle inner_;
  Tensor wire_in_, wire_out_, result_;
};

}  // namespace

void check_wire_dtype(const Tensor& t, DType wire, const char* what) {
  GENESIS_CHECK(is_floating(t.dtype()) && is_floating(wire), ValueError, what, ": the wire dtype ", dtype_name(wire),
                " needs floating tensors, not ", dtype_name(t.dtype()));
}

WorkHandle Communicator::all_reduce_as(Tensor& tensor, ReduceOp op, DType wire) {
  if (wire == tensor.dtype()) return all_reduce(tensor, op);
  check_wire_dtype(tensor, wire, "all_reduce");
  NoGradGuard no_grad;
  Tensor narrow = tensor.to(wire);
  WorkHandle inner = all_reduce(narrow, op);
  return std::make_shared<CastBackWork>(std::move(inner), Tensor(), narrow, tensor);
}

WorkHandle Communicator::reduce_scatter_as(const Tensor& input, Tensor& output, ReduceOp op, DType wire) {
  if (wire == input.dtype()) return reduce_scatter(input, output, op);
  check_wire_dtype(input, wire, "reduce_scatter");
  NoGradGuard no_grad;
  Tensor narrow_in = input.to(wire);
  Tensor narrow_out = empty(output.shape(), {.dtype = wire, .device = output.device()});
  WorkHandle inner = reduce_scatter(narrow_in, narrow_out, op);
  return std::make_shared<CastBackWork>(std::move(inner), narrow_in, narrow_out, output);
}

WorkHandle Communicator::all_gather_as(const Tensor& input, Tensor& output, DType wire) {
  if (wire == input.dtype()) return all_gather(input, output);
  check_wire_dtype(input, wire, "all_gather");
  NoGradGuard no_grad;
  Tensor narrow_in = input.to(wire);
  Tensor narrow_out = empty(output.shape(), {.dtype = wire, .device = output.device()});
  WorkHandle inner = all_gather(narrow_in, narrow_out);
  return std::make_shared<CastBackWork>(std::move(inner), narrow_in, narrow_out, output);
}

}  // namespace genesis::dist
