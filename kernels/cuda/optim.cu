// Multi-tensor optimizer kernels: a launch covers up to kMaxTensorsPerLaunch tensors cut into
// chunks; blocks stride over the chunks of all of them. Each element is
// read and written once (parameter, gradient, state), so the step is memory bound.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/multi_tensor.cuh"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/packs.cuh"
#include "libgenesis/core/error.h"

namespace genesis::kernels::cuda {

namespace {

constexpr int kUpdateChunk = 8192;  // optimizer updates: 8 packs of 4 floats per thread
constexpr int kOptimBlock = 256;

// The pointers of one launch, passed by value in the kernel arguments (under 4 KiB).
struct TensorTable {
  void* param[kMaxTensorsPerLaunch];
  const void* grad[kMaxTensorsPerLaunch];
  void* slots[3][kMaxTensorsPerLaunch];
  int64_t n[kMaxTensorsPerLaunch];
  int64_t chunk_start[kMaxTensorsPerLaunch + 1];  // first chunk of each tensor; [count] = all chunks
  int64_t* step[kMaxTensorsPerLaunch];            // applied-update counts (StepGate::step), or null
  void* low[kMaxTensorsPerLaunch];                // bf16 copies of f32 parameters (OptimTensor::low), or null
  int count;
};

// Calls visit(table) for consecutive groups of at most kMaxTensorsPerLaunch tensors with elements.
template <class Visit>
void for_each_update_table(std::span<const OptimTensor> tensors, Visit&& visit) {
  for_each_table<TensorTable, kUpdateChunk>(
      tensors,
      [](TensorTable& table, int i, const OptimTensor& t) {
        table.param[i] = t.param;
        table.grad[i] = t.grad;
        for (int s = 0; s < 3; ++s) table.slots[s][i] = t.slots[s];
        table.step[i] = t.step;
        table.low[i] = t.low;
      },
      visit);
}

__device__ __forceinline__ bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// One block per chunk of kUpdateChunk elements (the hardware scheduler balances the blocks);
// each thread updates 16-byte packs of every buffer when all of them are aligned, elements
// otherwise and in a tensor's ragged end. update(param, grad, slot0, slot1, slot2, has_slot0)
// works on registers: absent slots get a dummy and are neither read nor written. A set
// *skip_if makes the launch a no-op; a tensor with a step count updates as step *step + 1.
template <class T, class G, class Update>
__global__ void __launch_bounds__(kOptimBlock)
    multi_tensor_update(TensorTable table, Update step_update, const float* skip_if, GradClip clip) {
  if (skip_if && *skip_if != 0.0f) return;
  const T coef = clip.norm ? static_cast<T>(fminf(1.0f, clip.max_norm / (*clip.norm + 1e-6f))) : T(1);
  constexpr int kWidth = kPack<T>;  // elements of T in 16 bytes
  const int64_t chunks = table.chunk_start[table.count];
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    const auto [t, begin, end] = table_chunk<kUpdateChunk>(table, chunk);
    const Update update = table.step[t] ? step_update.at_step(*table.step[t] + 1) : step_update;
    T* p = static_cast<T*>(table.param[t]);
    const G* g = static_cast<const G*>(table.grad[t]);
    T* slot[3] = {static_cast<T*>(table.slots[0][t]), static_cast<T*>(table.slots[1][t]),
                  static_cast<T*>(table.slots[2][t])};
    // The bf16 copy of an f32 parameter, written with the same rounding as Tensor::to's cast.
    __nv_bfloat16* low = std::is_same_v<T, float> ? static_cast<__nv_bfloat16*>(table.low[t]) : nullptr;
    bool vectorized = aligned_to(p, 16) && aligned_to(g, sizeof(G) * kWidth);
#pragma unroll
    for (T* s : slot) vectorized = vectorized && (!s || aligned_to(s, 16));
    int64_t scalar_begin = begin;
    if (vectorized) {
      using TPack = Pack<T, kWidth>;
      using GPack = Pack<G, kWidth>;
      const int64_t packed_end = begin + (end - begin) / kWidth * kWidth;
      for (int64_t i = begin + threadIdx.x * kWidth; i < packed_end; i += blockDim.x * kWidth) {
        TPack pv = *reinterpret_cast<const TPack*>(p + i);
        const GPack gv = *reinterpret_cast<const GPack*>(g + i);
        TPack sv[3] = {};
#pragma unroll
        for (int s = 0; s < 3; ++s)
          if (slot[s]) sv[s] = *reinterpret_cast<const TPack*>(slot[s] + i);
#pragma unroll
        for (int l = 0; l < kWidth; ++l)
          update(pv.v[l], cast_value<T>(gv.v[l]) * coef, sv[0].v[l], sv[1].v[l], sv[2].v[l], slot[0] != nullptr);
        *reinterpret_cast<TPack*>(p + i) = pv;
#pragma unroll
        for (int s = 0; s < 3; ++s)
          if (slot[s]) *reinterpret_cast<TPack*>(slot[s] + i) = sv[s];
        if (low) {
#pragma unroll
          for (int l = 0; l < kWidth; ++l) low[i + l] = cast_value<__nv_bfloat16>(pv.v[l]);
        }
      }
      scalar_begin = packed_end;
    }
    for (int64_t i = scalar_begin + threadIdx.x; i < end; i += blockDim.x) {
      T pv = p[i], sv[3] = {};
#pragma unroll
      for (int s = 0; s < 3; ++s)
        if (slot[s]) sv[s] = slot[s][i];
      update(pv, cast_value<T>(g[i]) * coef, sv[0], sv[1], sv[2], slot[0] != nullptr);
      p[i] = pv;
      if (low) low[i] = cast_value<__nv_bfloat16>(pv);
#pragma unroll
      for (int s = 0; s < 3; ++s)
        if (slot[s]) slot[s][i] = sv[s];
    }
  }
}

// After an update launch whose tensors have step counts: each advances unless the step was skipped.
__global__ void advance_steps(TensorTable table, const float* skip_if) {
  if (skip_if && *skip_if != 0.0f) return;
  if (threadIdx.x < table.count && table.step[threadIdx.x]) ++*table.step[threadIdx.x];
}

// The constants of each update are computed on the host exactly as kernels/cpu/optim.cpp does
// (on the device from the same formulas for a step number read there: at_step).
template <class T>
struct AdamUpdate {
  T b1, b2, eps, step_size, bc2_sqrt, decay, wd;
  bool decoupled, amsgrad;
  double lr, beta1, beta2;
  explicit AdamUpdate(const AdamStep& s)
      : b1(static_cast<T>(s.beta1)),
        b2(static_cast<T>(s.beta2)),
        eps(static_cast<T>(s.eps)),
        step_size(static_cast<T>(s.lr / s.bias_correction1)),
        bc2_sqrt(static_cast<T>(std::sqrt(s.bias_correction2))),
        decay(static_cast<T>(1.0 - s.lr * s.weight_decay)),
        wd(static_cast<T>(s.weight_decay)),
        decoupled(s.decoupled),
        amsgrad(s.amsgrad),
        lr(s.lr),
        beta1(s.beta1),
        beta2(s.beta2) {}
  __device__ AdamUpdate at_step(int64_t t) const {
    AdamUpdate u = *this;
    u.step_size = static_cast<T>(lr / bias_correction(beta1, t));
    u.bc2_sqrt = static_cast<T>(sqrt(bias_correction(beta2, t)));
    return u;
  }
  __device__ void operator()(T& p, T grad, T& m, T& v, T& v_max, bool) const {
    T param = p;
    if (decoupled) {
      param *= decay;
    } else {
      grad += wd * param;
    }
    const T mi = b1 * m + (T(1) - b1) * grad;
    const T vi = b2 * v + (T(1) - b2) * grad * grad;
    m = mi;
    v = vi;
    T second = vi;
    if (amsgrad) {
      second = v_max > vi ? v_max : vi;
      v_max = second;
    }
    const T denom = sqrt(second) / bc2_sqrt + eps;
    p = param - step_size * mi / denom;
  }
};

template <class T>
struct SgdUpdate {
  T lr, momentum, damp, wd;
  bool nesterov, first_step;
  explicit SgdUpdate(const SgdStep& s)
      : lr(static_cast<T>(s.lr)),
        momentum(static_cast<T>(s.momentum)),
        damp(static_cast<T>(1.0 - s.dampening)),
        wd(static_cast<T>(s.weight_decay)),
        nesterov(s.nesterov),
        first_step(s.first_step) {}
  __device__ SgdUpdate at_step(int64_t t) const {
    SgdUpdate u = *this;
    u.first_step = t == 1;
    return u;
  }
  __device__ void operator()(T& p, T grad, T& buf, T&, T&, bool has_buf) const {
    T d = grad + wd * p;
    if (has_buf) {
      const T b = first_step ? d : momentum * buf + damp * d;
      buf = b;
      d = nesterov ? d + momentum * b : b;
    }
    p -= lr * d;
  }
};

// c = b1 m + (1 - b1) g;  p = p (1 - lr wd) - lr sign(c);  m = b2 m + (1 - b2) g
template <class T>
struct LionUpdate {
  T b1, b2, lr, decay;
  explicit LionUpdate(const LionStep& s)
      : b1(static_cast<T>(s.beta1)),
        b2(static_cast<T>(s.beta2)),
        lr(static_cast<T>(s.lr)),
        decay(static_cast<T>(1.0 - s.lr * s.weight_decay)) {}
  __device__ LionUpdate at_step(int64_t) const { return *this; }
  __device__ void operator()(T& p, T grad, T& m, T&, T&, bool) const {
    const T c = b1 * m + (T(1) - b1) * grad;
    const T sign = c > T(0) ? T(1) : (c < T(0) ? T(-1) : T(0));
    p = p * decay - lr * sign;
    m = b2 * m + (T(1) - b2) * grad;
  }
};

template <class T, class G, class Update>
void launch_update(std::span<const OptimTensor> tensors, const Update& update, cudaStream_t stream,
                   const float* skip_if, GradClip clip) {
  for_each_update_table(tensors, [&](const TensorTable& table) {
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(table.chunk_start[table.count], INT_MAX));
    multi_tensor_update<T, G><<<blocks, kOptimBlock, 0, stream>>>(table, update, skip_if, clip);
    GENESIS_CUDA_LAUNCH_CHECK();
    if (std::any_of(table.step, table.step + table.count, [](const int64_t* step) { return step != nullptr; })) {
      advance_steps<<<1, kMaxTensorsPerLaunch, 0, stream>>>(table, skip_if);
      GENESIS_CUDA_LAUNCH_CHECK();
    }
  });
}

// f32 parameters take f32, f16 or bf16 gradients; f64 parameters f64 gradients.
template <template <class> class Update, class Step>
void dispatch_update(const char* what, DType param_dtype, DType grad_dtype, std::span<const OptimTensor> tensors,
                     const Step& s, cudaStream_t stream, const float* skip_if, GradClip clip) {
  // Clipping is folded in where it would have rounded nothing: gradients of the parameters' dtype.
  GENESIS_CHECK(!clip.norm || grad_dtype == param_dtype, DTypeError, what,
                ": clipping inside the update needs gradients of the parameters' dtype (got ", dtype_name(grad_dtype),
                " for ", dtype_name(param_dtype), ")");
  if (param_dtype == DType::f32) {
    const Update<float> update(s);
    switch (grad_dtype) {
      case DType::f32:
        return launch_update<float, float>(tensors, update, stream, skip_if, clip);
      case DType::f16:
        return launch_update<float, __half>(tensors, update, stream, skip_if, clip);
      case DType::bf16:
        return launch_update<float, __nv_bfloat16>(tensors, update, stream, skip_if, clip);
      default:
        break;
    }
  } else if (param_dtype == DType::f64 && grad_dtype == DType::f64) {
    return launch_update<double, double>(tensors, Update<double>(s), stream, skip_if, clip);
  }
  GENESIS_THROW(DTypeError, what,
                ": CUDA parameters must be f32 (gradients f32, f16 or bf16) or f64 (gradients f64), got ",
                dtype_name(param_dtype), " parameters with ", dtype_name(grad_dtype), " gradients");
}

// --- global gradient norm ----------------------------------------------------------------

constexpr int kNormBlocks = 256;  // fixed, so the summation order never depends on the device
constexpr int kNormThreads = 512;

// Sum of a block's values in a fixed tree order; the result is valid in thread 0.
__device__ float block_sum(float value) {
  __shared__ float warp_sums[kNormThreads / kWarp];
  return group_reduce_first(value, kNormThreads, 0.0f, warp_sums, Sum{});
}

// A whole chunk of an f32 tensor, 16-byte aligned, as float4s (else null: the scalar loops).
__device__ __forceinline__ const float4* whole_f32_chunk(const GradTable& table, const TableChunk& c) {
  if (table.dtype[c.tensor] != DType::f32 || c.end - c.begin != kGradChunk) return nullptr;
  const float* at = static_cast<const float*>(table.data[c.tensor]) + c.begin;
  return reinterpret_cast<uintptr_t>(at) % 16 == 0 ? reinterpret_cast<const float4*>(at) : nullptr;
}
static_assert(kGradChunk % (4 * kNormThreads) == 0 && kGradChunk % (4 * kOptimBlock) == 0);

// Block b sums the squares of chunks b, b + kNormBlocks, ... into partials[b].
__global__ void __launch_bounds__(kNormThreads) sum_squares_partials(GradTable table, float* partials) {
  const int64_t chunks = table.chunk_start[table.count];
  float acc = 0.0f;
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    const TableChunk c = table_chunk<kGradChunk>(table, chunk);
    if (const float4* v = whole_f32_chunk(table, c)) {
      // 16-byte loads, all issued before the sums (the scalar loop below keeps one load in flight).
      float4 x[kGradChunk / 4 / kNormThreads];
#pragma unroll
      for (int k = 0; k < kGradChunk / 4 / kNormThreads; ++k) x[k] = v[threadIdx.x + k * kNormThreads];
#pragma unroll
      for (int k = 0; k < kGradChunk / 4 / kNormThreads; ++k)
        acc += x[k].x * x[k].x + x[k].y * x[k].y + x[k].z * x[k].z + x[k].w * x[k].w;
      continue;
    }
    for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
      const float x = load_as_float(table.data[c.tensor], table.dtype[c.tensor], i);
      acc += x * x;
    }
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// One block: norm[0] = sqrt(sum of `count` partials).
__global__ void __launch_bounds__(kNormThreads) finish_norm(const float* partials, int64_t count, float* norm) {
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) norm[0] = sqrtf(acc);
}

__global__ void __launch_bounds__(kOptimBlock) scale_by_norm(GradTable table, const float* norm, float max_norm) {
  const float coef = fminf(1.0f, max_norm / (norm[0] + 1e-6f));
  if (coef == 1.0f) return;  // x * 1 == x: nothing to write
  const int64_t chunks = table.chunk_start[table.count];
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    const TableChunk c = table_chunk<kGradChunk>(table, chunk);
    if (const float4* v = whole_f32_chunk(table, c)) {
      auto* w = const_cast<float4*>(v);
#pragma unroll
      for (int k = 0; k < kGradChunk / 4 / kOptimBlock; ++k) {
        float4 x = w[threadIdx.x + k * kOptimBlock];
        x = {x.x * coef, x.y * coef, x.z * coef, x.w * coef};
        w[threadIdx.x + k * kOptimBlock] = x;
      }
      continue;
    }
    void* data = table.data[c.tensor];
    for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) {
      switch (table.dtype[c.tensor]) {
        case DType::f64:
          static_cast<double*>(data)[i] *= static_cast<double>(coef);
          break;
        case DType::f16: {
          __half* h = static_cast<__half*>(data);
          h[i] = __float2half_rn(__half2float(h[i]) * coef);
          break;
        }
        case DType::bf16: {
          __nv_bfloat16* h = static_cast<__nv_bfloat16*>(data);
          h[i] = __float2bfloat16_rn(__bfloat162float(h[i]) * coef);
          break;
        }
        default:
          static_cast<float*>(data)[i] *= coef;
          break;
      }
    }
  }
}

}  // namespace

void adam_step(DType param_dtype, DType grad_dtype, std::span<const OptimTensor> tensors, const AdamStep& s,
               cudaStream_t stream, const float* skip_if, GradClip clip) {
  dispatch_update<AdamUpdate>("adam_step", param_dtype, grad_dtype, tensors, s, stream, skip_if, clip);
}

void sgd_step(DType param_dtype, DType grad_dtype, std::span<const OptimTensor> tensors, const SgdStep& s,
              cudaStream_t stream, const float* skip_if, GradClip clip) {
  dispatch_update<SgdUpdate>("sgd_step", param_dtype, grad_dtype, tensors, s, stream, skip_if, clip);
}

void lion_step(DType param_dtype, DType grad_dtype, std::span<const OptimTensor> tensors, const LionStep& s,
               cudaStream_t stream, const float* skip_if, GradClip clip) {
  dispatch_update<LionUpdate>("lion_step", param_dtype, grad_dtype, tensors, s, stream, skip_if, clip);
}

int64_t global_norm_scratch(int64_t count) {
  return std::max<int64_t>(1, (count + kMaxTensorsPerLaunch - 1) / kMaxTensorsPerLaunch) * kNormBlocks;
}

void global_norm(std::span<const NormTensor> tensors, float* scratch, float* norm, cudaStream_t stream) {
  check_grad_dtypes("global_norm", tensors);
  int64_t launches = 0;
  for_each_grad_table(tensors, [&](const GradTable& table) {
    sum_squares_partials<<<kNormBlocks, kNormThreads, 0, stream>>>(table, scratch + launches * kNormBlocks);
    GENESIS_CUDA_LAUNCH_CHECK();
    ++launches;
  });
  finish_norm<<<1, kNormThreads, 0, stream>>>(scratch, launches * kNormBlocks, norm);
  GENESIS_CUDA_LAUNCH_CHECK();
}

void clip_by_norm(std::span<const NormTensor> tensors, const float* norm, double max_norm, cudaStream_t stream) {
  check_grad_dtypes("clip_by_norm", tensors);
  for_each_grad_table(tensors, [&](const GradTable& table) {
    const unsigned blocks = grid_size(table.chunk_start[table.count] * kOptimBlock, kOptimBlock);
    scale_by_norm<<<blocks, kOptimBlock, 0, stream>>>(table, norm, static_cast<float>(max_norm));
    GENESIS_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace genesis::kernels::cuda
