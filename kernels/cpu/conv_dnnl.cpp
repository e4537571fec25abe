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
#include <string>
#include <unordered_map>
#include <vector>

#include "libgenesis/core/error.h"

namespace genesis::kernels::cpu {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

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

struct Plan {
  std::mutex mutex;  // the buffers are per plan: one call at a time
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  Operand src, weights, dst;
  // Backward, made on first use.
  bool has_backward = false;
  dnnl::convolution_backward_data::primitive_desc data_pd;
  dnnl::convolution_backward_data data;
  dnnl::convolution_backward_weights::primitive_desc weights_pd;
  dnnl::convolution_backward_weights weights_prim;
  Operand diff_src, data_weights, data_diff_dst;  // backward data
  Operand bw_src, diff_weights, bw_diff_dst;      // backward weights
  bool with_bias = false;
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
// genesis's NCHW / (G)OIHW ones.
struct Geometry {
  memory::dims strides, dilates, pad_l, pad_r;
  memory::desc src_any, w_any, dst_any, src_user, w_user, dst_user;

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
  }
};

std::unique_ptr<Plan> make_plan(const Conv2dShape& s, bool bias) {
  const Geometry g(s);
  const memory::desc bias_md = bias ? memory::desc({s.out_channels}, Dt::f32, Tag::x) : memory::desc();
  auto plan = std::make_unique<Plan>();
  plan->with_bias = bias;
  plan->fwd_pd = dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                      g.src_any, g.w_any, bias_md, g.dst_any, g.strides, g.dilates, g.pad_l, g.pad_r),
      cpu_engine());
  plan->fwd = dnnl::convolution_forward(plan->fwd_pd);
  plan->src = Operand(g.src_user, plan->fwd_pd.src_desc());
  plan->weights = Operand(g.w_user, plan->fwd_pd.weights_desc());
  plan->dst = Operand(g.dst_user, plan->fwd_pd.dst_desc());
  return plan;
}

void add_backward(Plan& plan, const Conv2dShape& s) {
  if (plan.has_backward) return;
  const Geometry g(s);
  plan.data_pd = dnnl::convolution_backward_data::primitive_desc(
      dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, g.src_any, g.w_any, g.dst_any,
                                            g.strides, g.dilates, g.pad_l, g.pad_r),
      cpu_engine(), plan.fwd_pd);
  plan.data = dnnl::convolution_backward_data(plan.data_pd);
  plan.diff_src = Operand(g.src_user, plan.data_pd.diff_src_desc());
  plan.data_weights = Operand(g.w_user, plan.data_pd.weights_desc());
  plan.data_diff_dst = Operand(g.dst_user, plan.data_pd.diff_dst_desc());

  plan.weights_pd = dnnl::convolution_backward_weights::primitive_desc(
      dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, g.src_any, g.w_any, g.dst_any,
                                               g.strides, g.dilates, g.pad_l, g.pad_r),
      cpu_engine(), plan.fwd_pd);
  plan.weights_prim = dnnl::convolution_backward_weights(plan.weights_pd);
  plan.bw_src = Operand(g.src_user, plan.weights_pd.src_desc());
  plan.diff_weights = Operand(g.w_user, plan.weights_pd.diff_weights_desc());
  plan.bw_diff_dst = Operand(g.dst_user, plan.weights_pd.diff_dst_desc());
  plan.has_backward = true;
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

// Runs `prim` with its operands moved into the wanted layouts: inputs reordered in before,
// outputs reordered out after.
void run(dnnl::primitive& prim, std::vector<std::pair<int, std::pair<Operand*, void*>>> inputs,
         std::vector<std::pair<int, std::pair<Operand*, void*>>> outputs,
         std::vector<std::pair<int, memory>> extra = {}) {
  dnnl::stream stream(cpu_engine());
  std::unordered_map<int, memory> args;
  for (auto& [arg, operand] : inputs) {
    auto [op, data] = operand;
    memory wanted = op->wanted_memory(data);
    if (op->reordered()) {
      memory user(op->user, cpu_engine(), data);
      dnnl::reorder(user, wanted).execute(stream, user, wanted);
    }
    args.insert({arg, wanted});
  }
  for (auto& [arg, operand] : outputs) args.insert({arg, operand.first->wanted_memory(operand.second)});
  for (auto& [arg, mem] : extra) args.insert({arg, mem});
  prim.execute(stream, args);
  for (auto& [arg, operand] : outputs) {
    auto [op, data] = operand;
    if (!op->reordered()) continue;
    memory user(op->user, cpu_engine(), data);
    dnnl::reorder(args.at(arg), user).execute(stream, args.at(arg), user);
  }
  stream.wait();
}

// Runs `body` on the shape's plan with its backward primitives made; false when oneDNN does not
// take the shape. The backward primitives need the forward's plan as their hint; a forward
// without bias serves (the data and weight gradients do not depend on the bias).
template <class Body>
bool with_backward(const Conv2dShape& s, Body&& body) {
  Plan* plan = plan_for(s, false);
  if (!plan) return false;
  std::lock_guard lock(plan->mutex);
  try {
    add_backward(*plan, s);
  } catch (const dnnl::error&) {
    return false;
  }
  body(*plan);
  return true;
}

}  // namespace

bool conv_dnnl_forward(const Conv2dShape& s, const float* x, const float* w, const float* bias, float* y) {
  Plan* plan = plan_for(s, bias != nullptr);
  if (!plan) return false;
  std::lock_guard lock(plan->mutex);
  std::vector<std::pair<int, memory>> extra;
  if (bias)
    extra.push_back({DNNL_ARG_BIAS, memory(plan->fwd_pd.bias_desc(), cpu_engine(), const_cast<float*>(bias))});
  run(plan->fwd,
      {{DNNL_ARG_SRC, {&plan->src, const_cast<float*>(x)}}, {DNNL_ARG_WEIGHTS, {&plan->weights, const_cast<float*>(w)}}},
      {{DNNL_ARG_DST, {&plan->dst, y}}}, extra);
  return true;
}

bool conv_dnnl_backward_input(const Conv2dShape& s, const float* grad_y, const float* w, float* grad_x) {
  return with_backward(s, [&](Plan& plan) {
    run(plan.data,
        {{DNNL_ARG_DIFF_DST, {&plan.data_diff_dst, const_cast<float*>(grad_y)}},
         {DNNL_ARG_WEIGHTS, {&plan.data_weights, const_cast<float*>(w)}}},
        {{DNNL_ARG_DIFF_SRC, {&plan.diff_src, grad_x}}});
  });
}

bool conv_dnnl_backward_weight(const Conv2dShape& s, const float* x, const float* grad_y, float* grad_w) {
  return with_backward(s, [&](Plan& plan) {
    run(plan.weights_prim,
        {{DNNL_ARG_SRC, {&plan.bw_src, const_cast<float*>(x)}},
         {DNNL_ARG_DIFF_DST, {&plan.bw_diff_dst, const_cast<float*>(grad_y)}}},
        {{DNNL_ARG_DIFF_WEIGHTS, {&plan.diff_weights, grad_w}}});
  });
}

std::string conv_dnnl_implementation(const Conv2dShape& s) {
  Plan* plan = plan_for(s, false);
  if (!plan) return "";
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " " +
         plan->fwd_pd.impl_info_str();
}

}  // namespace genesis::kernels::cpu

#endif  // GENESIS_WITH_DNNL
