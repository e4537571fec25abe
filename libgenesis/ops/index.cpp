// Joining, splitting and indexing ops: argument checks, dispatch and backward formulas.
// split, chunk, repeat and flip are built on views and the copy kernel; cat (and stack) copy
// every input in one CUDA launch. The index-taking ops validate every index: on the CPU before
// the kernels run, on CUDA inside the kernels, which skip a bad index and report it for the
// next synchronization to raise (cuda::KernelFault), so the ops never wait on the device.
#include "libgenesis/ops/index.h"

#include <algorithm>
#include <string_view>

#include "kernels/cpu/index.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/prologue.h"
#include "libgenesis/ops/reduce.h"
#if GENESIS_WITH_CUDA
#include "kernels/cuda/index.h"
#endif

namespace genesis {

namespace {

// On the CPU, throws IndexError naming the first entry of the contiguous `index` outside
// [0, bound). CUDA indices are checked by the kernels that read them.
void check_indices(const char* op, const Tensor& index, int64_t axis, int64_t bound) {
  if (!index.device().is_cpu()) return;
  const int64_t position = kernels::cpu::first_out_of_range(index.dtype(), index.numel(), index.data_ptr(), bound);
  if (position < 0) return;
  const int64_t value = index.reshape({-1}).narrow(0, position, 1).to(DType::i64).data<int64_t>()[0];
  GENESIS_THROW(IndexError, op, ": index ", value, " is out of range for axis ", axis, " of size ", bound,
                value < 0 ? " (negative indices are not supported)" : "");
}

#if GENESIS_WITH_CUDA
// The fault id under which CUDA kernels report a bad index of `op` (one lookup per op name).
int fault_op(const char* op) {
  static const int gather_id = cuda::fault_op_id("gather");
  static const int index_select_id = cuda::fault_op_id("index_select");
  static const int scatter_add_id = cuda::fault_op_id("scatter_add");
  const std::string_view name(op);
  return name == "gather" ? gather_id : name == "index_select" ? index_select_id : scatter_add_id;
}
#endif

// out[p] = x[p with coordinate `axis` replaced by index[p]] over index's shape; CPU indices already
// checked, CUDA ones checked by the kernel and reported as `op`'s.
Tensor gather_checked([[maybe_unused]] const char* op, const Tensor& x, int64_t axis, const Tensor& index) {
  Tensor out = empty(index.shape(), {.dtype = x.dtype(), .device = x.device()});
  const int ndim = static_cast<int>(index.dim());
  if (x.device().is_cpu()) {
    kernels::cpu::gather(x.dtype(), index.dtype(), ndim, index.shape().data(), static_cast<int>(axis), x.data_ptr(),
                         x.strides().data(), index.data_ptr(), index.strides().data(), out.data_ptr(),
                         out.strides().data());
  } else {
    GENESIS_ON_CUDA(kernels::cuda::gather(x.dtype(), index.dtype(), ndim, index.shape().data(), static_cast<int>(axis),
                                          x.size(axis), x.data_ptr(), x.strides().data(), index.data_ptr(),
                                          index.strides().data(), out.data_ptr(), out.strides().data(),
                                          cuda::kernel_fault_slot(), fault_op(op), cuda::current_stream()));
  }
  return out;
}

// dst[p with coordinate `axis` replaced by index[p]] += src[p] over index's shape; CPU indices
// already checked, CUDA ones checked by the kernel and reported as `op`'s; dst contiguous. On
// CUDA the sort workspace comes from the caching allocator.
void scatter_add_checked([[maybe_unused]] const char* op, const Tensor& dst, int64_t axis, const Tensor& index,
                         const Tensor& src) {
  const int ndim = static_cast<int>(index.dim());
  if (dst.device().is_cpu()) {
    kernels::cpu::scatter_add(dst.dtype(), index.dtype(), ndim, index.shape().data(), static_cast<int>(axis),
                              dst.data_ptr(), dst.strides().data(), index.data_ptr(), index.strides().data(),
                              src.data_ptr(), src.strides().data());
    return;
  }
  GENESIS_ON_CUDA({
    const size_t bytes = kernels::cuda::scatter_add_workspace_bytes(index.numel(), dst.numel());
    Tensor workspace = empty({static_cast<int64_t>(bytes)}, {.dtype = DType::boolean, .device = dst.device()});
    kernels::cuda::scatter_add(dst.dtype(), index.dtype(), ndim, index.shape().data(), static_cast<int>(axis),
                               dst.size(axis), dst.data_ptr(), dst.strides().data(), dst.numel(), index.data_ptr(),
                               index.strides().data(), src.data_ptr(), src.strides().data(), workspace.data_ptr(),
                               bytes, cuda::kernel_fault_slot(), fault_op(op), cuda::current_stream());
  });
}

#if GENESIS_WITH_CUDA
// index_select's gradient: the picks are sorted once and each element of grad_x sums its own,
// rather than sorting one contribution per element of grad_out as scatter_add would.
Tensor index_select_backward_cuda(const Shape& in, DType dtype, int64_t axis, const Tensor& positions,
                                  const Tensor& grad_out) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    if (d < axis) outer *= in[static_cast<size_t>(d)];
    if (d > axis) inner *= in[static_cast<size_t>(d)];
  }
  const int64_t bound = in[static_cast<size_t>(axis)], length = positions.numel();
  Tensor gy = grad_out.to(dtype).contiguous();
  Tensor gx = empty(in, {.dtype = dtype, .device = gy.device()});
  const size_t bytes = kernels::cuda::scatter_add_workspace_bytes(length, bound);
  Tensor workspace = empty({static_cast<int64_t>(bytes)}, {.dtype = DType::boolean, .device = gy.device()});
  kernels::cuda::index_select_backward(dtype, positions.dtype(), outer, bound, inner, length, positions.data_ptr(),
                                       gy.data_ptr(), gx.data_ptr(), workspace.data_ptr(), bytes,
                                       cuda::kernel_fault_slot(), fault_op("index_select"), cuda::current_stream());
  return gx;
}

// One launch copies every input (cast to the output dtype, made contiguous) into its columns.
void cat_cuda(const std::vector<Tensor>& tensors, int64_t axis, const Tensor& out) {
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out.size(d);
  if (outer == 0 || out.numel() == 0) return;
  const int64_t element = static_cast<int64_t>(out.element_size());
  std::vector<Tensor> pieces;
  std::vector<kernels::cuda::CatPiece> layout;
  int64_t column = 0;
  for (const Tensor& t : tensors) {
    pieces.push_back(t.to(out.dtype()).contiguous());
    const int64_t row_bytes = t.numel() / outer * element;
    layout.push_back({pieces.back().data_ptr(), row_bytes, column});
    column += row_bytes;
  }
  kernels::cuda::cat(outer, column, layout.data(), static_cast<int64_t>(layout.size()), out.data_ptr(),
                     cuda::current_stream());
}
#endif

// The index must have `bounded`'s rank and fit inside it in every dimension except `axis` (unless including_axis).
void check_index_fits(const char* op, const Tensor& index, int64_t axis, const Tensor& bounded, const char* what,
                      bool including_axis) {
  GENESIS_CHECK(index.dim() == bounded.dim(), ShapeError, op, ": index of shape ", index.shape(),
                " must have as many dimensions as the ", what, " of shape ", bounded.shape());
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (d == axis && !including_axis) continue;
    GENESIS_CHECK(index.size(d) <= bounded.size(d), ShapeError, op, ": index of shape ", index.shape(),
                  " is larger than the ", what, " of shape ", bounded.shape(), " in dimension ", d);
  }
}

// When the pieces' gradients are themselves the regions of one tensor laid out as x's pieces
// were (flash attention returns q, k and v's gradients so for a fused qkv projection), that
// tensor, viewed whole, is x's gradient: no copy.
Tensor joined_pieces(const TensorList& g, const Shape& in, int64_t axis, const std::vector<int64_t>& sizes) {
  const Tensor& first = g[0];
  if (!first.defined()) return Tensor();
  int64_t start = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const Tensor& p = g[i];
    if (!p.defined() || !p.shares_storage(first) || p.dtype() != first.dtype() || p.strides() != first.strides() ||
        p.size(axis) != sizes[i] || p.offset() != first.offset() + start * first.stride(axis))
      return Tensor();
    start += sizes[i];
  }
  auto whole = std::make_shared<TensorImpl>(first.storage(), in, first.strides(), first.offset(), first.dtype());
  // The joined view must stay inside the storage (it does when the pieces tile it).
  int64_t last = first.offset();
  for (size_t d = 0; d < in.size(); ++d) last += (in[d] - 1) * first.stride(static_cast<int64_t>(d));
  if (numel_of(in) > 0 && static_cast<size_t>(last + 1) * first.element_size() > first.storage()->nbytes())
    return Tensor();
  return Tensor(std::move(whole));
}

// The pieces are views of x under one node, whose backward writes x's gradient into one
// buffer: each piece's gradient copied into its region, zeros only where a piece got none
// (rather than a zero-filled input-sized buffer per piece, summed by the engine).
std::vector<Tensor> split_checked(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis) {
  std::vector<Tensor> pieces;
  {
    NoGradGuard views_only;
    int64_t start = 0;
    for (int64_t n : sizes) {
      pieces.push_back(x.narrow(axis, start, n));
      start += n;
    }
  }
  if (is_floating(x.dtype()) && needs_grad({x})) {
    record(
        "split", {x}, pieces,
        [axis, sizes, in = x.shape(), dtype = x.dtype(), device = x.device()](const TensorList& g) {
          if (Tensor joined = joined_pieces(g, in, axis, sizes); joined.defined() && joined.dtype() == dtype)
            return TensorList{joined};
          Tensor gx = empty(in, {.dtype = dtype, .device = device});
          int64_t start = 0;
          for (size_t i = 0; i < sizes.size(); ++i) {
            Tensor region = gx.narrow(axis, start, sizes[i]);
            if (g[i].defined()) {
              region.copy_(g[i]);
            } else {
              region.fill_(0.0);
            }
            start += sizes[i];
          }
          return TensorList{gx};
        },
        MissingGrads::undefined);
  }
  return pieces;
}

int64_t split_axis(const char* op, const Tensor& x, int64_t axis) {
  detail::check_defined(op, x, "input");
  GENESIS_CHECK(x.dim() >= 1, ShapeError, op, ": input must have at least one dimension");
  return normalize_axis(axis, x.dim(), op);
}

Tensor triangle(const char* op, bool lower, const Tensor& x, int64_t diagonal) {
  detail::check_defined(op, x, "input");
  GENESIS_CHECK(x.dim() >= 2, ShapeError, op, ": input must have at least 2 dimensions, got shape ", x.shape());
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() > 0) {
    NoGradGuard forward_only;
    Tensor xc = x.contiguous();
    const int64_t rows = x.size(-2), cols = x.size(-1), batch = x.numel() / (rows * cols);
    if (x.device().is_cpu()) {
      kernels::cpu::triangle(x.dtype(), lower, batch, rows, cols, diagonal, xc.data_ptr(), out.data_ptr());
    } else {
      GENESIS_ON_CUDA(kernels::cuda::triangle(x.dtype(), lower, batch, rows, cols, diagonal, xc.data_ptr(),
                                              out.data_ptr(), cuda::current_stream()));
    }
  }
  if (is_floating(x.dtype()) && needs_grad({x})) {
    record(op, {x}, {out},
           [op, lower, diagonal](const TensorList& g) { return TensorList{triangle(op, lower, g[0], diagonal)}; });
  }
  return out;
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors_arg, int64_t axis) {
  const detail::OpListArgs args = detail::op_prologue_list<OpId::cat>(tensors_arg);
  const std::vector<Tensor>& tensors = args.tensors;
  GENESIS_CHECK(!tensors.empty(), ValueError, "cat: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i)
    detail::check_defined("cat", tensors[i], detail::concat("tensors[", i, "]"));
  const Tensor& first = tensors[0];
  GENESIS_CHECK(first.dim() >= 1, ShapeError, "cat: zero-dimensional tensors cannot be concatenated");
  const int64_t ax = normalize_axis(axis, first.dim(), "cat");
  DType dtype = first.dtype();
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    bool matches = t.dim() == first.dim();
    for (int64_t d = 0; matches && d < t.dim(); ++d) matches = d == ax || t.size(d) == first.size(d);
    GENESIS_CHECK(matches, ShapeError, "cat: tensor ", i, " has shape ", t.shape(), " but tensor 0 has shape ",
                  first.shape(), "; shapes must match except along axis ", ax);
    dtype = promote_types(dtype, t.dtype());
    sizes.push_back(t.size(ax));
  }
  Shape shape = first.shape();
  shape[static_cast<size_t>(ax)] = 0;
  for (int64_t n : sizes) shape[static_cast<size_t>(ax)] += n;
  Tensor out = empty(shape, {.dtype = dtype, .device = first.device()});
  {
    NoGradGuard forward_only;
    if (out.device().is_cpu()) {
      int64_t start = 0;
      for (size_t i = 0; i < tensors.size(); ++i) {
        out.narrow(ax, start, sizes[i]).copy_(tensors[i]);
        start += sizes[i];
      }
    } else {
      GENESIS_ON_CUDA(cat_cuda(tensors, ax, out));
    }
  }
  if (is_floating(dtype) && needs_grad(tensors)) {
    std::vector<DType> dtypes;
    for (const Tensor& t : tensors) dtypes.push_back(t.dtype());
    record("cat", tensors, {out}, [ax, sizes, dtypes](const TensorList& g) {
      TensorList grads;
      int64_t start = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        grads.push_back(is_floating(dtypes[i]) ? g[0].narrow(ax, start, sizes[i]).to(dtypes[i]) : Tensor());
        start += sizes[i];
      }
      return grads;
    });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors_arg, int64_t axis) {
  const detail::OpListArgs args = detail::op_prologue_list<OpId::stack>(tensors_arg);
  const std::vector<Tensor>& tensors = args.tensors;
  GENESIS_CHECK(!tensors.empty(), ValueError, "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    detail::check_defined("stack", tensors[i], detail::concat("tensors[", i, "]"));
    GENESIS_CHECK(tensors[i].shape() == tensors[0].shape(), ShapeError, "stack: tensor ", i, " has shape ",
                  tensors[i].shape(), " but tensor 0 has shape ", tensors[0].shape(), "; all shapes must be equal");
  }
  const int64_t ax = normalize_axis(axis, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> unsqueezed;
  for (const Tensor& t : tensors) unsqueezed.push_back(t.unsqueeze(ax));
  return cat(unsqueezed, ax);
}

std::vector<Tensor> split(const Tensor& x_arg, int64_t size, int64_t axis) {
  auto [x] = detail::op_prologue<OpId::split>(x_arg);
  const int64_t ax = split_axis("split", x, axis);
  GENESIS_CHECK(size > 0, ValueError, "split: size must be positive (got ", size, ")");
  const int64_t n = x.size(ax);
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += size) sizes.push_back(std::min(size, n - start));
  if (sizes.empty()) sizes.push_back(0);  // an empty axis splits into one empty piece
  return split_checked(x, sizes, ax);
}

std::vector<Tensor> split(const Tensor& x_arg, const std::vector<int64_t>& sizes, int64_t axis) {
  auto [x] = detail::op_prologue<OpId::split>(x_arg);
  const int64_t ax = split_axis("split", x, axis);
  int64_t total = 0;
  for (int64_t n : sizes) {
    GENESIS_CHECK(n >= 0, ValueError, "split: sizes must be non-negative (got ", shape_str(sizes), ")");
    total += n;
  }
  GENESIS_CHECK(total == x.size(ax), ShapeError, "split: sizes ", shape_str(sizes), " sum to ", total, " but axis ", ax,
                " of the input of shape ", x.shape(), " has size ", x.size(ax));
  return split_checked(x, sizes, ax);
}

std::vector<Tensor> chunk(const Tensor& x_arg, int64_t chunks, int64_t axis) {
  auto [x] = detail::op_prologue<OpId::chunk>(x_arg);
  const int64_t ax = split_axis("chunk", x, axis);
  GENESIS_CHECK(chunks > 0, ValueError, "chunk: the number of chunks must be positive (got ", chunks, ")");
  const int64_t size = std::max<int64_t>((x.size(ax) + chunks - 1) / chunks, 1);
  return split(x, size, ax);
}

Tensor index_select(const Tensor& x_arg, int64_t axis, const Tensor& index_arg) {
  auto [x, index] = detail::op_prologue<OpId::index_select>(x_arg, index_arg);
  detail::check_defined("index_select", x, "input");
  detail::check_defined("index_select", index, "index");
  detail::check_index_dtype("index_select", index);
  GENESIS_CHECK(x.dim() >= 1, ShapeError, "index_select: input must have at least one dimension");
  GENESIS_CHECK(index.dim() <= 1, ShapeError, "index_select: index must be 1-D, got shape ", index.shape());
  const int64_t ax = normalize_axis(axis, x.dim(), "index_select");
  Tensor positions = index.contiguous().reshape({-1});
  check_indices("index_select", positions, ax, x.size(ax));
  // The 1-D index broadcast over the output turns index_select into a gather.
  Shape line(static_cast<size_t>(x.dim()), 1), shape = x.shape();
  line[static_cast<size_t>(ax)] = shape[static_cast<size_t>(ax)] = positions.numel();
  Tensor spread = positions.view(line).expand(shape);
  Tensor out;
  {
    NoGradGuard forward_only;
    out = gather_checked("index_select", x, ax, spread);
  }
  if (is_floating(x.dtype()) && needs_grad({x})) {
    record("index_select", {x}, {out},
           [ax, in = x.shape(), dtype = x.dtype(), positions = saved(positions),
            spread = saved(spread)](const TensorList& g) {
             if (!g[0].device().is_cpu()) {
               GENESIS_ON_CUDA(return TensorList{index_select_backward_cuda(in, dtype, ax, positions, g[0])});
             }
             Tensor gx = zeros(in, {.dtype = dtype});
             scatter_add_checked("index_select", gx, ax, spread, g[0].to(dtype));
             return TensorList{gx};
           });
  }
  return out;
}

Tensor gather(const Tensor& x_arg, int64_t axis, const Tensor& index_arg) {
  auto [x, index] = detail::op_prologue<OpId::gather>(x_arg, index_arg);
  detail::check_defined("gather", x, "input");
  detail::check_defined("gather", index, "index");
  detail::check_index_dtype("gather", index);
  GENESIS_CHECK(x.dim() >= 1, ShapeError, "gather: input must have at least one dimension");
  const int64_t ax = normalize_axis(axis, x.dim(), "gather");
  check_index_fits("gather", index, ax, x, "input", false);
  Tensor positions = index.contiguous();
  check_indices("gather", positions, ax, x.size(ax));
  Tensor out;
  {
    NoGradGuard forward_only;
    out = gather_checked("gather", x, ax, positions);
  }
  if (is_floating(x.dtype()) && needs_grad({x})) {
    record("gather", {x}, {out},
           [ax, in = x.shape(), dtype = x.dtype(), positions = saved(positions)](const TensorList& g) {
             Tensor gx = zeros(in, {.dtype = dtype, .device = g[0].device()});
             scatter_add_checked("gather", gx, ax, positions, g[0].to(dtype));
             return TensorList{gx};
           });
  }
  return out;
}

Tensor scatter_add(const Tensor& x_arg, int64_t axis, const Tensor& index_arg, const Tensor& src_arg) {
  auto [x, index, src] = detail::op_prologue<OpId::scatter_add>(x_arg, index_arg, src_arg);
  detail::check_defined("scatter_add", x, "input");
  detail::check_defined("scatter_add", index, "index");
  detail::check_defined("scatter_add", src, "src");
  detail::check_index_dtype("scatter_add", index);
  detail::check_same_dtype("scatter_add", x, src);
  GENESIS_CHECK(x.dim() >= 1, ShapeError, "scatter_add: input must have at least one dimension");
  const int64_t ax = normalize_axis(axis, x.dim(), "scatter_add");
  check_index_fits("scatter_add", index, ax, x, "input", false);
  check_index_fits("scatter_add", index, ax, src, "src", true);
  Tensor positions = index.contiguous();
  check_indices("scatter_add", positions, ax, x.size(ax));
  Tensor out;
  {
    NoGradGuard forward_only;
    out = x.clone();
    scatter_add_checked("scatter_add", out, ax, positions, src);
  }
  if (is_floating(x.dtype()) && needs_grad({x, src})) {
    record("scatter_add", {x, src}, {out},
           [ax, src_shape = src.shape(), positions = saved(positions)](const TensorList& g) {
             Tensor picked = gather_checked("scatter_add", g[0], ax, positions);
             if (picked.shape() == src_shape) return TensorList{g[0], picked};
             // src entries beyond the index's extent were never added: their gradient is zero.
             Tensor gsrc = zeros(src_shape, {.dtype = picked.dtype(), .device = picked.device()});
             Tensor region = gsrc;
             for (int64_t d = 0; d < picked.dim(); ++d) region = region.narrow(d, 0, picked.size(d));
             region.copy_(picked);
             return TensorList{g[0], gsrc};
           });
  }
  return out;
}

Tensor tril(const Tensor& x_arg, int64_t diagonal) {
  auto [x] = detail::op_prologue<OpId::tril>(x_arg);
  return triangle("tril", true, x, diagonal);
}
Tensor triu(const Tensor& x_arg, int64_t diagonal) {
  auto [x] = detail::op_prologue<OpId::triu>(x_arg);
  return triangle("triu", false, x, diagonal);
}

Tensor repeat(const Tensor& x_arg, const std::vector<int64_t>& repeats) {
  auto [x] = detail::op_prologue<OpId::repeat>(x_arg);
  detail::check_defined("repeat", x, "input");
  GENESIS_CHECK(static_cast<int64_t>(repeats.size()) >= x.dim(), ShapeError, "repeat: ", repeats.size(),
                " repeat counts given for the input of shape ", x.shape(), "; at least one per dimension is needed");
  for (int64_t r : repeats)
    GENESIS_CHECK(r >= 0, ValueError, "repeat: repeat counts must be non-negative (got ", shape_str(repeats), ")");
  // Tiles become extra stride-0 dimensions in front of each repeated dimension, copied out at once.
  const size_t lead = repeats.size() - static_cast<size_t>(x.dim());
  Shape padded(lead, 1);
  padded.insert(padded.end(), x.shape().begin(), x.shape().end());
  Shape tiled, shape;
  Strides tiled_strides;
  Axes tile_axes;
  Tensor out;
  {
    NoGradGuard forward_only;
    Tensor source = x.reshape(padded);
    for (size_t d = 0; d < repeats.size(); ++d) {
      if (repeats[d] != 1) {
        tile_axes.push_back(static_cast<int64_t>(tiled.size()));
        tiled.push_back(repeats[d]);
        tiled_strides.push_back(0);
      }
      tiled.push_back(padded[d]);
      tiled_strides.push_back(source.strides()[d]);
      shape.push_back(repeats[d] * padded[d]);
    }
    GENESIS_CHECK(static_cast<int64_t>(tiled.size()) <= kMaxTensorDims, ShapeError, "repeat: repeating ",
                  shape_str(repeats), " over the input of shape ", x.shape(), " needs more than ", kMaxTensorDims,
                  " intermediate dimensions");
    out = make_view(source, tiled, tiled_strides, source.offset()).clone().view(shape);
  }
  if (is_floating(x.dtype()) && needs_grad({x})) {
    record("repeat", {x}, {out}, [tiled, tile_axes, in = x.shape()](const TensorList& g) {
      Tensor folded = g[0].reshape(tiled);
      return TensorList{(tile_axes.empty() ? folded : sum(folded, tile_axes)).reshape(in)};
    });
  }
  return out;
}

Tensor flip(const Tensor& x_arg, const std::vector<int64_t>& axes) {
  auto [x] = detail::op_prologue<OpId::flip>(x_arg);
  detail::check_defined("flip", x, "input");
  std::vector<bool> flipped(static_cast<size_t>(std::max<int64_t>(x.dim(), 1)), false);
  for (int64_t a : axes) {
    const size_t ax = static_cast<size_t>(normalize_axis(a, x.dim(), "flip"));
    GENESIS_CHECK(!flipped[ax], ValueError, "flip: axis ", a, " is repeated in ", shape_str(axes));
    flipped[ax] = true;
  }
  // A view that walks the flipped axes backwards (negative strides), copied out contiguously.
  Strides strides = x.strides();
  int64_t offset = x.offset();
  for (size_t d = 0; d < strides.size(); ++d) {
    if (!flipped[d] || x.shape()[d] == 0) continue;
    offset += (x.shape()[d] - 1) * strides[d];
    strides[d] = -strides[d];
  }
  Tensor out;
  {
    NoGradGuard forward_only;
    out = make_view(x, x.shape(), strides, offset).clone();
  }
  if (is_floating(x.dtype()) && needs_grad({x})) {
    record("flip", {x}, {out}, [axes](const TensorList& g) { return TensorList{flip(g[0], axes)}; });
  }
  return out;
}

}  // namespace genesis
