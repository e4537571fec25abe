#include "libgenesis/autograd/autocast_weights.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/core/storage.h"

namespace genesis::autocast_weights {

namespace {

struct Entry {
  std::weak_ptr<Storage> storage;
  int64_t offset = 0;
  Shape shape;
  Strides strides;
  Tensor copy;           // the parameter's values in copy.dtype(), laid out as the parameter
  uint64_t version = 0;  // the parameter storage's version the copy holds
};

std::mutex g_mutex;
std::unordered_map<const Storage*, Entry> g_entries;  // by the parameter's storage
std::atomic<bool> g_registered{false};  // whether g_entries has any (read without the lock)

// The entry of t's storage whose parameter t lies within, or null.
Entry* entry_of(const Tensor& t) {
  if (g_entries.empty() || !t.defined()) return nullptr;
  auto it = g_entries.find(t.storage().get());
  if (it == g_entries.end() || it->second.storage.expired()) return nullptr;
  return &it->second;
}

// Whether t covers the whole parameter of `e`: the same first element and as many elements.
bool covers(const Entry& e, const Tensor& t) {
  return t.offset() == e.offset && t.numel() == numel_of(e.shape);
}

// Whether every element t views lies within the parameter of `e`.
bool within(const Entry& e, const Tensor& t) {
  if (t.numel() == 0) return false;
  int64_t last = t.offset();
  for (size_t d = 0; d < t.shape().size(); ++d) {
    if (t.strides()[d] < 0) return false;
    last += (t.shape()[d] - 1) * t.strides()[d];
  }
  return t.offset() >= e.offset && last < e.offset + numel_of(e.shape);
}

}  // namespace

Registration::Registration(const std::vector<Tensor>& params) {
  std::lock_guard lock(g_mutex);
  g_entries.clear();
  std::unordered_map<const Storage*, int> holders;  // parameters per storage
  for (const Tensor& p : params)
    if (p.defined()) ++holders[p.storage().get()];
  for (const Tensor& p : params) {
    if (!p.defined() || !is_floating(p.dtype()) || !p.is_contiguous() || p.numel() == 0) continue;
    // A storage holding several parameters (a flat buffer) has one version for all: none is kept.
    if (holders[p.storage().get()] > 1) continue;
    g_entries[p.storage().get()] = Entry{.storage = p.storage(), .offset = p.offset(), .shape = p.shape(),
                                         .strides = p.strides(), .copy = Tensor(), .version = 0};
  }
  g_registered.store(!g_entries.empty(), std::memory_order_release);
}

Registration::~Registration() {
  std::lock_guard lock(g_mutex);
  g_registered.store(false, std::memory_order_release);
  g_entries.clear();
}

namespace {

// The current copy of t's parameter in `target`, viewed as t views the parameter; else undefined.
Tensor find(const Tensor& t, DType target) {
  std::lock_guard lock(g_mutex);
  const Entry* e = entry_of(t);
  if (!e || !e->copy.defined() || e->copy.dtype() != target || e->version != t.storage()->version() || !within(*e, t))
    return Tensor();
  // The copy is laid out as the parameter (contiguous from its first element): t's view of the
  // parameter, moved to the copy's storage.
  NoGradGuard view_only;
  return make_view(e->copy, t.shape(), t.strides(), e->copy.offset() + (t.offset() - e->offset));
}

// Keeps `cast` (Tensor::to of source) as the copy of source's parameter when source covers it.
void keep(const Tensor& source, const Tensor& cast) {
  std::lock_guard lock(g_mutex);
  Entry* e = entry_of(source);
  if (!e || !covers(*e, source) || cast.numel() != source.numel()) return;
  // Tensor::to casts a permutation of a contiguous tensor in memory order into a buffer of its
  // own: from that buffer's first element on lie the parameter's elements in the parameter's order.
  if (cast.offset() != 0 || cast.storage()->nbytes() < static_cast<size_t>(cast.numel()) * cast.element_size()) return;
  NoGradGuard view_only;
  e->copy = make_view(cast.detach(), e->shape, e->strides, 0);
  e->version = source.storage()->version();
}

}  // namespace

Tensor cast(const Tensor& t, DType target) {
  if (!g_registered.load(std::memory_order_acquire)) return t.to(target);  // the common path: no lock
  if (Tensor copy = find(t, target); copy.defined()) {
    if (is_floating(target) && needs_grad({t})) {
      const DType source = t.dtype();
      record("to_dtype", {t}, {copy}, [source](const TensorList& g) { return TensorList{g[0].to(source)}; });
    }
    return copy;
  }
  Tensor out = t.to(target);
  keep(t, out);
  return out;
}

Refresh refresh(const Tensor& param) {
  std::lock_guard lock(g_mutex);
  Entry* e = entry_of(param);
  if (!e || !e->copy.defined()) return {};
  const bool current = e->version == param.storage()->version() && covers(*e, param) &&
                       e->copy.dtype() == DType::bf16 && param.dtype() == DType::f32;
  if (!current) {
    e->copy = Tensor();  // stale: freed now, cast again on the next use
    return {};
  }
  return {e->copy.data_ptr(), param};
}

void Refresh::mark_written() const {
  if (!data) return;
  std::lock_guard lock(g_mutex);
  Entry* e = entry_of(param);
  if (!e || !e->copy.defined()) return;
  e->version = param.storage()->version();
  e->copy.storage()->bump_version();  // graphs that saved the old copy are stale, as the parameter's
}

}  // namespace genesis::autocast_weights
