#pragma once
// Optimizers over parameter groups, updated in place under NoGradGuard with fused kernels:
// kernels/cpu/optim.h per CPU parameter, kernels/cuda/optim.h for CUDA parameters, which
// share one multi-tensor launch per (group, step count, dtypes). Update formulas follow
// PyTorch's SGD, Adam and AdamW.
// State (per-parameter slots and the step count) is exported by name for checkpoints.
// Offloaded (offload_to_host), the state lives in host memory and the update runs on the CPU,
// the parameters and gradients streamed through it in chunks (optim/offload.h).
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/cpu/optim.h"  // StepGate
#include "libgenesis/core/named_tensor.h"
#include "libgenesis/core/tensor.h"
#include "libgenesis/optim/offload.h"

namespace genesis {

struct ParamGroup {
  std::vector<NamedTensor> params;
  double lr = 1e-3;       // current learning rate (schedulers write it every step)
  double base_lr = 1e-3;  // the recipe's learning rate for this group
  double weight_decay = 0.0;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update to every parameter that has a gradient. `skip_if` (a one-element f32
  // tensor on the parameters' device, e.g. amp::GradScaler::found_inf()) decides on the device:
  // while it holds a nonzero value the step is a no-op for parameters and state, with no host
  // read. A parameter's first gated step starts a device-side count of its applied updates,
  // which from then on gives adam's bias corrections and sgd's first step (so a skipped step
  // does not advance them) and is what state() exports as "<name>.step".
  //
  // `clip_norm` (defined: the gradients' global norm, one f32 element on their device, as
  // clip_grad_norm(params, 0) returns it) clips by norm within the step: every gradient counts
  // as multiplied by min(1, max_norm / (clip_norm + 1e-6)), the values clip_grad_norm would have
  // stored. CUDA updates fold the factor into their read of the gradient (no pass over the
  // gradients; .grad keeps its unclipped values); elsewhere the gradients are scaled first.
  void step(const Tensor& skip_if = Tensor(), const Tensor& clip_norm = Tensor(), double max_norm = 0.0);
  // Zeroes every gradient, keeping its storage (PyTorch's set_to_none=False): the next backward
  // writes into the same buffers (Tensor::zero_grad_: no fill pass; the first gradient is
  // copied in, later ones added), which data-parallel training can bucket. set_to_none drops
  // them instead (the next backward allocates new ones).
  void zero_grad(bool set_to_none = false);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  int64_t step_count() const { return step_count_; }  // step() calls, skipped ones included
  virtual std::string_view name() const = 0;

  // Per-parameter state as "<param name>.<slot>" tensors plus "<param name>.step" (i64,
  // 0-d), like PyTorch's per-parameter state. load_state checks names and shapes and
  // names any mismatch. The optimizer's own step count travels separately (trainer.json).
  // After gated steps, state() reads the device-side counts (a host read).
  std::vector<NamedTensor> state() const;
  void load_state(const std::vector<NamedTensor>& state, int64_t step_count);
  // Slots this optimizer keeps per parameter (e.g. {"exp_avg", "exp_avg_sq"}), as state() names them.
  virtual std::vector<std::string> slot_names() const = 0;

  // Optimizer offload (ZeRO-Offload's idea; dist.offload_optimizer): from now on the state lives
  // in host memory and step() runs the update with the CPU kernels, streaming each parameter and
  // its gradient through host buffers of chunk_bytes (optim/offload.h) and writing the updated
  // parameter back. The parameters stay where they are. Device memory then holds no optimizer
  // state: 8 bytes per f32 parameter for Adam(W) move to the host. Updates of f32 parameters
  // equal the device's bit for bit (the CPU and CUDA update kernels round alike; f64 ones agree
  // within 1e-13). skip_if is read on the host (one synchronization) and a clipping norm scales
  // the gradients on their device first. Parameters must be f32 or f64 (what the CPU kernels
  // update). Call before the first step or load_state; CPU parameters take the same path (the
  // tests check the chunking that way).
  void offload_to_host(int64_t chunk_bytes = int64_t{64} << 20);
  bool offloaded() const { return exchange_ != nullptr; }

 protected:
  struct ParamState {
    std::vector<Tensor> slots;  // allocated on the parameter's first update
    int64_t steps = 0;          // updates applied to this parameter (bias corrections use it),
                                // or attempted once applied_steps exists
    Tensor applied_steps;       // i64 0-d on the parameter's device, from its first gated step
  };
  // One parameter's update: its gradient is contiguous, of the parameter's dtype (backward
  // accumulates into a .grad of the parameter's dtype) except that f32 CUDA parameters keep
  // f16/bf16 gradients given through set_grad (the kernels widen them).
  // `gate` is to be passed to the update kernels (kernels/cpu/optim.h StepGate).
  struct ParamUpdate {
    Tensor param;
    Tensor grad;
    ParamState* state;
    kernels::StepGate gate;
    const float* clip_norm = nullptr;  // CUDA updates: clip by this norm as the gradient is read
    float max_norm = 0.0f;
    // param and grad are elements [offset, offset + numel) of the parameter whose slots
    // state holds (an offloaded chunk); slot(s) points at the same elements of slot s.
    int64_t offset = 0;
    // A CUDA f32 parameter's autocast copy (autograd/autocast_weights.h) to write with the update,
    // or null; set only where writes_autocast_copies() says the update does.
    void* low = nullptr;
    void* slot(size_t s) const {
      return static_cast<char*>(state->slots[s].data_ptr()) + offset * static_cast<int64_t>(dtype_size(param.dtype()));
    }
  };
  // Updates parameters of one group that share a device, dtypes and a step count (state.steps
  // already counting this update).
  virtual void update(ParamGroup& group, std::span<ParamUpdate> batch) = 0;
  // Whether update() writes ParamUpdate::low for CUDA f32 parameters (the fused AdamW step).
  virtual bool writes_autocast_copies() const { return false; }

 private:
  // step() when offloaded: the gate read on the host, the update chunk by chunk on the CPU.
  void offloaded_step(const Tensor& skip_if, const Tensor& clip_norm, double max_norm);
  // p's gradient for this step (undefined: p takes no update), its layout checked; at p's first
  // update its state gets its slots, on `home`.
  Tensor gradient_to_apply(const NamedTensor& p, ParamState& state, Device home) const;

  std::vector<ParamGroup> groups_;
  std::vector<ParamState> states_;  // states_[i] belongs to the i-th parameter in group order
  int64_t step_count_ = 0;
  std::unique_ptr<HostExchange> exchange_;  // set when offloaded
};

struct SgdOptions {
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
};

struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  bool amsgrad = false;
  bool decoupled_weight_decay = true;  // true: AdamW, false: Adam (L2 added to the gradient)
};

struct LionOptions {
  double beta1 = 0.9, beta2 = 0.99;
};

std::unique_ptr<Optimizer> make_sgd(std::vector<ParamGroup> groups, SgdOptions options = {});
// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"): the update is the
// sign of an interpolation of momentum and gradient; weight decay is decoupled.
std::unique_ptr<Optimizer> make_lion(std::vector<ParamGroup> groups, LionOptions options = {});
std::unique_ptr<Optimizer> make_adam(std::vector<ParamGroup> groups, AdamOptions options = {});

// Scales all gradients so their global L2 norm is at most max_norm; returns the norm
// before clipping as a 0-d f32 tensor (no host synchronization). max_norm <= 0 only
// measures. Contiguous CUDA gradients on one device take two or three multi-tensor launches.
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
// Multiplies each gradient by min(1, max_norm / (norm + 1e-6)) on its device with no host read
// (norm: one f32 element, e.g. clip_grad_norm(params, 0)): contiguous CUDA gradients on norm's
// device by the clipping kernel (each product rounded once to the gradient's dtype), others by
// tensor ops.
void scale_grads_by_clip(const std::vector<Tensor>& grads, const Tensor& norm, double max_norm);
// Clamps every gradient element to [-value, value].
void clip_grad_value(const std::vector<Tensor>& params, double value);

}  // namespace genesis
