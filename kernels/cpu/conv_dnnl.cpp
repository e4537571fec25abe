// f32 convolutions through oneDNN (kernels/cpu/conv.h: conv_dnnl_*): the primitives PyTorch
// runs on CPUs, JIT-compiled for the vector units found at run time (AVX2, AVX-512, AMX).
// genesis's tensors stay NCHW / OIHW; each call reorders its operands into the blocked layouts
// the primitive chose (nChw8c on AVX2, nChw16c on AVX-512, ...) and the result back, as
// PyTorch's mkldnn path does. A plan per shape keeps the primitives and those buffers.
#include "kernels/cpu/conv.h"

#if GENESIS_WITH_DNNL
#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "libgenesis/core/error.h"

namespace genesis::kernels::cpu {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;
using Forward = dnnl::convolution_forward;
using BackwardData = dnnl::convolution_backward_data;
using BackwardWeights = dnnl::convolution_backward_weights;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// An operand in the primitive's layout: the user's buffer itself when the layouts agree, else a
// buffer of the plan that a reorder fills (inputs) or empties (outputs).
struct Operand {
  memory::desc user, wanted;
  // wanted's storage when it differs from user, 64-byte aligned (a cache line, an AVX-512 vector)
  std::unique_ptr<void, decltype(&std::free)> buffer{nullptr, &std::free};

  Operand() = default;
  Operand(const memory::desc& user_desc, const memory::desc& wanted_desc) : user(user_desc), wanted(wanted_desc) {
    if (!reordered()) return;
    const size_t bytes = (wanted.get_size() + 63) / 64 * 64;
    buffer.reset(std::aligned_alloc(64, bytes));
    GENESIS_CHECK(buffer != nullptr, DeviceError, "conv2d: could not allocate ", bytes, " bytes for oneDNN");
  }
  bool reordered() const { return wanted != user; }
  memory wanted_memory(void* user_data) {
    return reordered() ? memory(wanted, cpu_engine(), buffer.get()) : memory(user, cpu_engine(), user_data);
  }
};

// A primitive of one direction, with its three operands: the image side (src or diff_src), the
// weights (or diff_weights) and the output side (dst or diff_dst).
template <class Primitive>
struct Pass {
  typename Primitive::primitive_desc pd;
  Primitive primitive;
  Operand src, weights, dst;
};

struct Plan {
  std::mutex mutex;  // the buffers are per plan: one call at a time
  Pass<Forward> forward;
  // Backward, made on first use (or found missing once: the caller then takes im2col). The
  // weights' primitive always sums the bias gradient too (into bias_sink when the caller wants
  // none): it reads grad_y anyway.
  enum class Backward { unmade, made, missing } backward = Backward::unmade;
  Pass<BackwardData> backward_data;
  Pass<BackwardWeights> backward_weights;
  std::vector<float> bias_sink;
};

using Key = std::array<int64_t, 16>;

Key key_of(const Conv2dShape& s, bool bias) {
  return {s.batch, s.in_channels, s.height, s.width, s.out_channels, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w,
          s.pad_h, s.pad_w, s.dilation_h, s.dilation_w, s.groups, s.out_h * 100000 + s.out_w, bias ? 1 : 0};
}

memory::dims weight_dims(const Conv2dShape& s) {
  if (s.groups == 1) return {s.out_channels, s.in_channels, s.kernel_h, s.kernel_w};
  return {s.groups, s.out_channels / s.groups, s.in_channels / s.groups, s.kernel_h, s.kernel_w};
}

// The right padding that gives out_h x out_w (oneDNN wants both sides); negative when the
// output drops input rows past the last window, which oneDNN does not take.
int64_t right_pad(int64_t out, int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  return (out - 1) * stride + (kernel - 1) * dilation + 1 - in - pad;
}

// The descriptors a shape gives: oneDNN's "any" layouts for the primitive to choose, and
// genesis's NCHW / (G)OIHW ones, and the bias (or its gradient).
struct Geometry {
  memory::dims strides, dilates, pad_l, pad_r;
  memory::desc src_any, w_any, dst_any, src_user, w_user, dst_user, bias;

  explicit Geometry(const Conv2dShape& s)
      : strides{s.stride_h, s.stride_w},
        dilates{s.dilation_h - 1, s.dilation_w - 1},
        pad_l{s.pad_h, s.pad_w},
        pad_r{right_pad(s.out_h, s.height, s.kernel_h, s.stride_h, s.pad_h, s.dilation_h),
              right_pad(s.out_w, s.width, s.kernel_w, s.stride_w, s.pad_w, s.dilation_w)} {
    const memory::dims src{s.batch, s.in_channels, s.height, s.width}, dst{s.batch, s.out_channels, s.out_h, s.out_w};
    const memory::dims w = weight_dims(s);
    src_any = memory::desc(src, Dt::f32, Tag::any);
    w_any = memory::desc(w, Dt::f32, Tag::any);
    dst_any = memory::desc(dst, Dt::f32, Tag::any);
    src_user = memory::desc(src, Dt::f32, Tag::nchw);
    w_user = memory::desc(w, Dt::f32, s.groups == 1 ? Tag::oihw : Tag::goihw);
    dst_user = memory::desc(dst, Dt::f32, Tag::nchw);
    bias = memory::desc({s.out_channels}, Dt::f32, Tag::x);
  }

  // The primitive of descriptor `pd` with its operands: the layouts it wants against genesis's.
  template <class Primitive>
  Pass<Primitive> pass(const typename Primitive::primitive_desc& pd, const memory::desc& src_wanted,
                       const memory::desc& weights_wanted, const memory::desc& dst_wanted) const {
    return {pd, Primitive(pd), Operand(src_user, src_wanted), Operand(w_user, weights_wanted),
            Operand(dst_user, dst_wanted)};
  }
};

std::unique_ptr<Plan> make_plan(const Conv2dShape& s, bool bias) {
  const Geometry g(s);
  const Forward::desc desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, g.src_any, g.w_any,
                           bias ? g.bias : memory::desc(), g.dst_any, g.strides, g.dilates, g.pad_l, g.pad_r);
  const Forward::primitive_desc pd(desc, cpu_engine());
  auto plan = std::make_unique<Plan>();
  plan->forward = g.pass<Forward>(pd, pd.src_desc(), pd.weights_desc(), pd.dst_desc());
  return plan;
}

// Makes the plan's backward-data and backward-weights (with diff_bias) primitives, with the
// forward's as the hint oneDNN wants; throws dnnl::error when oneDNN has no implementation.
void add_backward(Plan& plan, const Conv2dShape& s) {
  const Geometry g(s);
  const BackwardData::desc data_desc(dnnl::algorithm::convolution_direct, g.src_any, g.w_any, g.dst_any, g.strides,
                                     g.dilates, g.pad_l, g.pad_r);
  const BackwardData::primitive_desc data(data_desc, cpu_engine(), plan.forward.pd);
  plan.backward_data = g.pass<BackwardData>(data, data.diff_src_desc(), data.weights_desc(), data.diff_dst_desc());
  const BackwardWeights::desc weights_desc(dnnl::algorithm::convolution_direct, g.src_any, g.w_any, g.bias,
                                           g.dst_any, g.strides, g.dilates, g.pad_l, g.pad_r);
  const BackwardWeights::primitive_desc weights(weights_desc, cpu_engine(), plan.forward.pd);
  plan.backward_weights =
      g.pass<BackwardWeights>(weights, weights.src_desc(), weights.diff_weights_desc(), weights.diff_dst_desc());
  plan.bias_sink.resize(static_cast<size_t>(s.out_channels));
}

// The plan of a shape; null when oneDNN does not take it (the caller falls back to im2col).
Plan* plan_for(const Conv2dShape& s, bool bias) {
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<Plan>> plans;
  const Key key = key_of(s, bias);
  std::lock_guard lock(mutex);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second.get();
  std::unique_ptr<Plan> plan;
  if (right_pad(s.out_h, s.height, s.kernel_h, s.stride_h, s.pad_h, s.dilation_h) >= 0 &&
      right_pad(s.out_w, s.width, s.kernel_w, s.stride_w, s.pad_w, s.dilation_w) >= 0) {
    try {
      plan = make_plan(s, bias);
    } catch (const dnnl::error&) {
      plan.reset();  // no implementation for this shape
    }
  }
  return (plans[key] = std::move(plan)).get();
}

// `data` in the layout `operand` wants: the user's buffer itself, or the plan's buffer filled by
// a reorder.
memory reordered_in(dnnl::stream& stream, Operand& operand, const float* data) {
  void* handle = const_cast<float*>(data);  // oneDNN's memory takes a mutable handle; a source is only read
  memory wanted = operand.wanted_memory(handle);
  if (operand.reordered()) {
    memory user(operand.user, cpu_engine(), handle);
    dnnl::reorder(user, wanted).execute(stream, user, wanted);
  }
  return wanted;
}

// Moves a result computed in `wanted` (operand.wanted_memory(data)) to the user's buffer `data`.
void reordered_out(dnnl::stream& stream, Operand& operand, memory& wanted, float* data) {
  if (!operand.reordered()) return;
  memory user(operand.user, cpu_engine(), data);
  dnnl::reorder(wanted, user).execute(stream, wanted, user);
}

}  // namespace

bool conv_dnnl_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) {
  Plan* plan = plan_for(s, bias != nullptr);
  if (!plan) return false;
  std::lock_guard lock(plan->mutex);
  Pass<Forward>& pass = plan->forward;
  dnnl::stream stream(cpu_engine());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, reordered_in(stream, pass.src, x)},
                                       {DNNL_ARG_WEIGHTS, reordered_in(stream, pass.weights, w)},
                                       {DNNL_ARG_DST, pass.dst.wanted_memory(y)}};
  if (bias) args.insert({DNNL_ARG_BIAS, memory(pass.pd.bias_desc(), cpu_engine(), const_cast<float*>(bias))});
  pass.primitive.execute(stream, args);
  reordered_out(stream, pass.dst, args.at(DNNL_ARG_DST), y);
  stream.wait();
  return true;
}

// The backward primitives need the forward's as their hint; a forward without bias serves (the
// gradients do not depend on the bias). grad_y is reordered once when both primitives want the
// same layout of it (they do on every ISA seen so far).
bool conv_dnnl_backward(const Conv2dShape& s, const float* grad_y, const float* x, const float* w, float* grad_x,
                        float* grad_w, float* grad_bias) {
  Plan* plan = plan_for(s, false);
  if (!plan) return false;
  std::lock_guard lock(plan->mutex);
  if (plan->backward == Plan::Backward::unmade) {
    try {
      add_backward(*plan, s);
      plan->backward = Plan::Backward::made;
    } catch (const dnnl::error&) {
      plan->backward = Plan::Backward::missing;
    }
  }
  if (plan->backward == Plan::Backward::missing) return false;
  Pass<BackwardData>& data = plan->backward_data;
  Pass<BackwardWeights>& weights = plan->backward_weights;
  dnnl::stream stream(cpu_engine());
  std::optional<memory> grad_y_shared;
  if (grad_x) {
    memory gy = reordered_in(stream, data.dst, grad_y);
    memory gx = data.src.wanted_memory(grad_x);
    data.primitive.execute(stream, {{DNNL_ARG_DIFF_DST, gy},
                                    {DNNL_ARG_WEIGHTS, reordered_in(stream, data.weights, w)},
                                    {DNNL_ARG_DIFF_SRC, gx}});
    reordered_out(stream, data.src, gx, grad_x);
    if (data.dst.wanted == weights.dst.wanted) grad_y_shared = gy;
  }
  if (grad_w) {
    memory gw = weights.weights.wanted_memory(grad_w);
    float* bias = grad_bias ? grad_bias : plan->bias_sink.data();
    weights.primitive.execute(
        stream, {{DNNL_ARG_DIFF_DST, grad_y_shared ? *grad_y_shared : reordered_in(stream, weights.dst, grad_y)},
                 {DNNL_ARG_SRC, reordered_in(stream, weights.src, x)},
                 {DNNL_ARG_DIFF_WEIGHTS, gw},
                 {DNNL_ARG_DIFF_BIAS, memory(weights.pd.diff_bias_desc(), cpu_engine(), bias)}});
    reordered_out(stream, weights.weights, gw, grad_w);
  }
  stream.wait();
  return true;
}

std::string conv_dnnl_implementation(const Conv2dShape& s) {
  Plan* plan = plan_for(s, false);
  if (!plan) return "";
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " " +
         plan->forward.pd.impl_info_str();
}

}  // namespace genesis::kernels::cpu

#endif  // GENESIS_WITH_DNNL
