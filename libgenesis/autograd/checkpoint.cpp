#include "libgenesis/autograd/checkpoint.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libgenesis/autograd/autocast.h"
#include "libgenesis/autograd/engine.h"
#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/autograd/record.h"
#include "libgenesis/core/error.h"
#include "libgenesis/core/generator.h"

namespace genesis {

namespace {

// What a checkpoint with keep_products kept: the results of each expensive op, in call order.
struct Products {
  struct Entry {
    std::string op;
    TensorList results;
  };
  std::vector<Entry> entries;
};

// The products of the checkpoint whose forward (replay false) or recomputation (replay true)
// runs on this thread; none outside one, and none inside an op that keeps its results (its own
// GEMMs are part of it).
struct ActiveProducts {
  Products* products = nullptr;
  bool replay = false;
  size_t next = 0;       // replay: the next entry to hand back
  bool forward = false;  // inside a checkpoint's forward (with or without products)
};
thread_local ActiveProducts t_active;

class ProductsScope {
 public:
  ProductsScope(Products* products, bool replay, bool forward) : previous_(t_active) {
    t_active = {products, replay, 0, forward};
  }
  ~ProductsScope() { t_active = previous_; }
  ProductsScope(const ProductsScope&) = delete;
  ProductsScope& operator=(const ProductsScope&) = delete;

 private:
  ActiveProducts previous_;
};

// The state a recomputation runs in, for its lifetime: grad mode on, the forward's autocast
// dtype, the default generator at its state of the forward (dropout draws the same masks) and the
// forward's kept products handed back in turn. It restores what it found, the generator included,
// so the run's later draws do not move.
class Recomputation {
 public:
  Recomputation(const GeneratorState& draws, std::optional<DType> autocast, Products* products)
      : grad_(grad_enabled()), autocast_(autocast_dtype()), draws_(default_generator().state()), active_(t_active) {
    set_grad_enabled(true);
    set_autocast_dtype(autocast);
    default_generator().set_state(draws);
    t_active = {products, true, 0, false};
  }
  ~Recomputation() {
    set_grad_enabled(grad_);
    set_autocast_dtype(autocast_);
    default_generator().set_state(draws_);
    t_active = active_;
  }
  Recomputation(const Recomputation&) = delete;
  Recomputation& operator=(const Recomputation&) = delete;

 private:
  bool grad_;
  std::optional<DType> autocast_;
  GeneratorState draws_;
  ActiveProducts active_;
};

// Where the nested backward delivers the gradient of one recomputed input: the engine sums what
// reaches it, as it would for the input's own producer, with no cast and no accumulation.
class InputGradient final : public Node {
 public:
  InputGradient() : Node("CheckpointInput", 1) {}
  TensorList apply(TensorList&& grads) override {
    grad = std::move(grads[0]);
    return {};
  }
  Tensor grad;
};

TensorList detached(const TensorList& tensors) {
  TensorList out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) out.push_back(t.defined() ? t.detach() : Tensor());
  return out;
}

}  // namespace

TensorList checkpoint(const CheckpointFunction& fn, const TensorList& inputs, const CheckpointOptions& options) {
  if (!grad_enabled() || !(options.inner_requires_grad || needs_grad(inputs))) return fn(inputs);
  const GeneratorState draws = default_generator().state();
  const std::optional<DType> autocast = autocast_dtype();
  std::shared_ptr<Products> products = options.keep_products ? std::make_shared<Products>() : nullptr;
  TensorList outputs;
  {
    NoGradGuard no_graph;
    ProductsScope keep(products.get(), false, true);
    outputs = detached(fn(inputs));
  }
  std::vector<bool> input_requires_grad;
  TensorList kept_inputs;
  for (const Tensor& in : inputs) {
    input_requires_grad.push_back(in.defined() && in.requires_grad());
    kept_inputs.push_back(saved(in));
  }
  if (products) {
    for (const Products::Entry& e : products->entries)
      for (const Tensor& t : e.results) saved(t);  // version notes: counted and checked like the inputs
  }
  record(
      "checkpoint", inputs, outputs,
      [fn, kept_inputs, input_requires_grad, draws, autocast, products](const TensorList& grads) {
        TensorList leaves = detached(kept_inputs);
        std::vector<std::shared_ptr<InputGradient>> ends(leaves.size());
        for (size_t i = 0; i < leaves.size(); ++i) {
          if (!input_requires_grad[i]) continue;
          ends[i] = std::make_shared<InputGradient>();
          AutogradMeta& meta = leaves[i].impl_ptr()->autograd_meta();
          meta.requires_grad = true;
          meta.grad_fn = ends[i];
          meta.output_nr = 0;
        }
        TensorList recomputed;
        {
          Recomputation as_in_forward(draws, autocast, products.get());
          recomputed = fn(leaves);
          GENESIS_CHECK(!products || t_active.next == products->entries.size(), AutogradError,
                        "checkpoint: the recomputation took ", t_active.next, " of the ",
                        products ? products->entries.size() : 0,
                        " kept results: the function computed something else the second time (it must read no "
                        "state that changes between forward and backward)");
        }
        GENESIS_CHECK(recomputed.size() == grads.size(), AutogradError, "checkpoint: the recomputation returned ",
                      recomputed.size(), " outputs, the forward ", grads.size());
        TensorList roots, root_grads;
        for (size_t i = 0; i < recomputed.size(); ++i) {
          if (!grads[i].defined() || !recomputed[i].defined() || !recomputed[i].requires_grad()) continue;
          roots.push_back(recomputed[i]);
          root_grads.push_back(grads[i]);
        }
        if (!roots.empty()) run_backward(roots, root_grads, /*retain_graph=*/false);
        TensorList input_grads(leaves.size());
        for (size_t i = 0; i < leaves.size(); ++i)
          if (ends[i]) input_grads[i] = std::move(ends[i]->grad);
        return input_grads;
      },
      MissingGrads::undefined);
  return outputs;
}

TensorList kept_or_computed(const char* op, const std::function<TensorList()>& compute) {
  ActiveProducts& active = t_active;
  if (!active.products) return compute();
  if (active.replay) {
    const std::vector<Products::Entry>& entries = active.products->entries;
    GENESIS_CHECK(active.next < entries.size() && entries[active.next].op == op, AutogradError,
                  "checkpoint: the recomputation called ", op, " where the forward called ",
                  active.next < entries.size() ? entries[active.next].op : std::string("nothing more"),
                  " (the function must compute the same thing when called again)");
    return detached(entries[active.next++].results);
  }
  TensorList results;
  {
    ProductsScope inside_op(nullptr, false, active.forward);
    results = compute();
  }
  active.products->entries.push_back({op, detached(results)});
  return results;
}

bool in_checkpoint_forward() { return t_active.forward; }

}  // namespace genesis
