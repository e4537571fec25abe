// View operations: new geometry over the same storage, each with its backward formula.
#include <algorithm>
#include <iterator>
#include <numeric>
#include <optional>

#include "libgenesis/autograd/record.h"
#include "libgenesis/ops/dispatch.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/prologue.h"

namespace genesis {

namespace {

// Replaces a single -1 with the size that keeps numel; validates the rest.
Shape infer_shape(const Shape& requested, int64_t numel, const char* op, const Shape& from) {
  Shape out = requested;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      GENESIS_CHECK(infer < 0, ShapeError, op, ": only one dimension can be -1 (shape ", requested, ")");
      infer = static_cast<int64_t>(i);
    } else {
      GENESIS_CHECK(out[i] >= 0, ShapeError, op, ": invalid dimension ", out[i], " in shape ", requested);
      known *= out[i];
    }
  }
  if (infer >= 0) {
    GENESIS_CHECK(known != 0 && numel % known == 0, ShapeError, op, ": cannot infer -1 in shape ", requested,
                  " for a tensor of shape ", from);
    out[static_cast<size_t>(infer)] = numel / known;
    known *= out[static_cast<size_t>(infer)];
  }
  GENESIS_CHECK(known == numel, ShapeError, op, ": shape ", requested, " is invalid for a tensor of shape ", from,
                " (", numel, " elements)");
  return out;
}

// Strides that let `shape` view memory laid out as (old_shape, old_strides), if any exist.
// The old dimensions (size-1 ones dropped) split into chunks that are each contiguous in
// themselves; a view must split every chunk into whole new dimensions.
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& shape) {
  if (numel_of(old_shape) == 0) return contiguous_strides(shape);
  struct Chunk {
    int64_t numel;
    int64_t inner_stride;
  };
  std::vector<Chunk> chunks;
  int64_t prev_stride = 0;
  for (size_t d = 0; d < old_shape.size(); ++d) {
    if (old_shape[d] == 1) continue;
    bool continues = !chunks.empty() && prev_stride == old_strides[d] * old_shape[d];
    if (continues) {
      chunks.back().numel *= old_shape[d];
      chunks.back().inner_stride = old_strides[d];
    } else {
      chunks.push_back({old_shape[d], old_strides[d]});
    }
    prev_stride = old_strides[d];
  }
  Strides out(shape.size());
  auto chunk = chunks.rbegin();
  int64_t consumed = 1;  // elements of *chunk covered by the new dimensions placed so far
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) {
      out[i] = chunk != chunks.rend() ? consumed * chunk->inner_stride : 1;
      continue;
    }
    if (chunk != chunks.rend() && consumed == chunk->numel) {
      ++chunk;
      consumed = 1;
    }
    if (chunk == chunks.rend()) return std::nullopt;
    out[i] = consumed * chunk->inner_stride;
    consumed *= shape[i];
    if (consumed > chunk->numel || chunk->numel % consumed != 0) return std::nullopt;
  }
  if (chunk != chunks.rend() && (consumed != chunk->numel || std::next(chunk) != chunks.rend())) return std::nullopt;
  return out;
}

TensorList reshape_back(const Shape& in_shape, const TensorList& g) { return {g[0].reshape(in_shape)}; }

}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  auto [self] = detail::op_prologue<OpId::view>(*this);
  Shape s = infer_shape(requested, self.numel(), "view", self.shape());
  std::optional<Strides> st = view_strides(self.shape(), self.strides(), s);
  GENESIS_CHECK(st.has_value(), ShapeError, "view: shape ", s, " is not compatible with the strides of a tensor of shape ",
                self.shape(), " (it is not contiguous); use reshape() or contiguous().view()");
  Tensor out = make_view(self, s, *st, self.offset());
  if (needs_grad({self}))
    record("view", {self}, {out}, [in = self.shape()](const TensorList& g) { return reshape_back(in, g); });
  return out;
}

Tensor Tensor::reshape(const Shape& requested) const {
  auto [self] = detail::op_prologue<OpId::reshape>(*this);
  Shape s = infer_shape(requested, self.numel(), "reshape", self.shape());
  if (view_strides(self.shape(), self.strides(), s)) return self.view(s);
  return self.clone().view(s);
}

Tensor Tensor::permute(const std::vector<int64_t>& axes) const {
  auto [self] = detail::op_prologue<OpId::permute>(*this);
  GENESIS_CHECK(static_cast<int64_t>(axes.size()) == self.dim(), ShapeError, "permute: ", axes.size(),
                " axes given for a tensor of ", self.dim(), " dimensions (shape ", self.shape(), ")");
  std::vector<int64_t> norm(axes.size()), inverse(axes.size());
  std::vector<bool> seen(axes.size(), false);
  Shape s(axes.size());
  Strides st(axes.size());
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = normalize_axis(axes[i], self.dim(), "permute");
    GENESIS_CHECK(!seen[static_cast<size_t>(a)], ShapeError, "permute: axis ", axes[i], " repeated");
    seen[static_cast<size_t>(a)] = true;
    norm[i] = a;
    inverse[static_cast<size_t>(a)] = static_cast<int64_t>(i);
    s[i] = self.shape()[static_cast<size_t>(a)];
    st[i] = self.strides()[static_cast<size_t>(a)];
  }
  Tensor out = make_view(self, s, st, self.offset());
  if (needs_grad({self}))
    record("permute", {self}, {out}, [inverse](const TensorList& g) { return TensorList{g[0].permute(inverse)}; });
  return out;
}

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  auto [self] = detail::op_prologue<OpId::transpose>(*this);
  std::vector<int64_t> axes(static_cast<size_t>(self.dim()));
  std::iota(axes.begin(), axes.end(), 0);
  if (self.dim() == 0) return self;
  std::swap(axes[static_cast<size_t>(normalize_axis(a, self.dim(), "transpose"))],
            axes[static_cast<size_t>(normalize_axis(b, self.dim(), "transpose"))]);
  return self.permute(axes);
}

Tensor Tensor::t() const {
  GENESIS_CHECK(dim() <= 2, ShapeError, "t(): expects a tensor of at most 2 dimensions, got shape ", shape());
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t axis, int64_t start, int64_t end, int64_t step) const {
  auto [self] = detail::op_prologue<OpId::slice>(*this);
  int64_t ax = normalize_axis(axis, self.dim(), "slice");
  GENESIS_CHECK(step > 0, ValueError, "slice: step must be positive (got ", step, ")");
  int64_t n = self.shape()[static_cast<size_t>(ax)];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = self.shape();
  Strides st = self.strides();
  s[static_cast<size_t>(ax)] = end == start ? 0 : (end - start - 1) / step + 1;
  st[static_cast<size_t>(ax)] *= step;
  Tensor out = make_view(self, s, st, self.offset() + start * self.strides()[static_cast<size_t>(ax)]);
  if (needs_grad({self})) {
    record("slice", {self}, {out},
           [in = self.shape(), dt = self.dtype(), dev = self.device(), ax, start, end, step](const TensorList& g) {
             Tensor gi = zeros(in, {.dtype = dt, .device = dev});
             gi.slice(ax, start, end, step).copy_(g[0]);
             return TensorList{gi};
           });
  }
  return out;
}

Tensor Tensor::narrow(int64_t axis, int64_t start, int64_t length) const {
  auto [self] = detail::op_prologue<OpId::narrow>(*this);
  int64_t ax = normalize_axis(axis, self.dim(), "narrow");
  int64_t n = self.shape()[static_cast<size_t>(ax)];
  if (start < 0) start += n;
  GENESIS_CHECK(start >= 0 && start <= n && length >= 0 && length <= n - start, IndexError, "narrow: start ", start,
                " and length ", length, " are out of bounds for axis ", axis, " of size ", n);
  return self.slice(ax, start, start + length);
}

Tensor Tensor::select(int64_t axis, int64_t index) const {
  auto [self] = detail::op_prologue<OpId::select>(*this);
  int64_t ax = normalize_axis(axis, self.dim(), "select");
  int64_t n = self.shape()[static_cast<size_t>(ax)];
  GENESIS_CHECK(index >= -n && index < n, IndexError, "select: index ", index, " is out of bounds for axis ", axis,
                " of size ", n);
  if (index < 0) index += n;
  Shape s = self.shape();
  Strides st = self.strides();
  s.erase(s.begin() + ax);
  st.erase(st.begin() + ax);
  Tensor out = make_view(self, s, st, self.offset() + index * self.strides()[static_cast<size_t>(ax)]);
  if (needs_grad({self})) {
    record("select", {self}, {out},
           [in = self.shape(), dt = self.dtype(), dev = self.device(), ax, index](const TensorList& g) {
             Tensor gi = zeros(in, {.dtype = dt, .device = dev});
             gi.select(ax, index).copy_(g[0]);
             return TensorList{gi};
           });
  }
  return out;
}

Tensor Tensor::expand(const Shape& target) const {
  auto [self] = detail::op_prologue<OpId::expand>(*this);
  GENESIS_CHECK(static_cast<int64_t>(target.size()) >= self.dim(), ShapeError, "expand: target shape ", target,
                " has fewer dimensions than the tensor's shape ", self.shape());
  size_t lead = target.size() - static_cast<size_t>(self.dim());
  Shape s(target.size());
  Strides st(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    if (i < lead) {
      GENESIS_CHECK(target[i] >= 0, ShapeError, "expand: -1 is not allowed in new leading dimensions (", target, ")");
      s[i] = target[i];
      st[i] = 0;
      continue;
    }
    int64_t cur = self.shape()[i - lead];
    int64_t want = target[i] == -1 ? cur : target[i];
    GENESIS_CHECK(want >= 0, ShapeError, "expand: invalid size ", target[i], " in target shape ", target);
    GENESIS_CHECK(cur == want || cur == 1, ShapeError, "expand: cannot expand shape ", self.shape(), " to ", target,
                  " (dimension ", i, ": ", cur, " vs ", want, ")");
    s[i] = want;
    st[i] = cur == want ? self.strides()[i - lead] : 0;
  }
  if (s == self.shape()) return self;
  Tensor out = make_view(self, s, st, self.offset());
  if (needs_grad({self}))
    record("expand", {self}, {out}, [in = self.shape()](const TensorList& g) { return TensorList{sum_to(g[0], in)}; });
  return out;
}

Tensor Tensor::squeeze() const {
  auto [self] = detail::op_prologue<OpId::squeeze>(*this);
  Shape s;
  for (int64_t d : self.shape())
    if (d != 1) s.push_back(d);
  return self.view(s);
}

Tensor Tensor::squeeze(int64_t axis) const {
  auto [self] = detail::op_prologue<OpId::squeeze>(*this);
  int64_t ax = normalize_axis(axis, self.dim(), "squeeze");
  if (self.shape()[static_cast<size_t>(ax)] != 1) return self;
  Shape s = self.shape();
  s.erase(s.begin() + ax);
  return self.view(s);
}

Tensor Tensor::unsqueeze(int64_t axis) const {
  auto [self] = detail::op_prologue<OpId::unsqueeze>(*this);
  int64_t ax = normalize_axis(axis, self.dim() + 1, "unsqueeze");
  Shape s = self.shape();
  s.insert(s.begin() + ax, 1);
  Strides st = self.strides();
  int64_t inner = ax < self.dim() ? self.strides()[static_cast<size_t>(ax)] * self.shape()[static_cast<size_t>(ax)] : 1;
  st.insert(st.begin() + ax, inner);
  Tensor out = make_view(self, s, st, self.offset());
  if (needs_grad({self}))
    record("unsqueeze", {self}, {out}, [in = self.shape()](const TensorList& g) { return reshape_back(in, g); });
  return out;
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  auto [self] = detail::op_prologue<OpId::flatten>(*this);
  if (self.dim() == 0) return self.reshape({1});
  int64_t s0 = normalize_axis(start, self.dim(), "flatten"), s1 = normalize_axis(end, self.dim(), "flatten");
  GENESIS_CHECK(s0 <= s1, ShapeError, "flatten: start axis ", start, " comes after end axis ", end);
  Shape s(self.shape().begin(), self.shape().begin() + s0);
  int64_t merged = 1;
  for (int64_t d = s0; d <= s1; ++d) merged *= self.shape()[static_cast<size_t>(d)];
  s.push_back(merged);
  s.insert(s.end(), self.shape().begin() + s1 + 1, self.shape().end());
  return self.reshape(s);
}

}  // namespace genesis
