#include "apps/genesis/bench_train.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "apps/genesis/bench_timing.h"
#include "libgenesis/core/error.h"
#include "libgenesis/core/generator.h"
#include "libgenesis/core/host_profile.h"
#include "libgenesis/core/threads.h"
#include "libgenesis/models/causal_lm.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/ops/linalg.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/lm_metrics.h"
#include "libgenesis/train/run_log.h"
#include "libgenesis/train/step.h"
#if GENESIS_WITH_CUDA
#include <cuda_runtime_api.h>

#include "libgenesis/cuda/caching_allocator.h"
#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis::cli::bench {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kPhases[] = {"forward", "backward", "optimizer"};

// Timestamps of the phase boundaries of the timed steps: CUDA events recorded on the stream as
// the host reaches each boundary (read after the last step, so the steps run back to back), or
// the steady clock on the CPU, whose ops finish before they return.
class PhaseClock {
 public:
  explicit PhaseClock(Device device) : device_(device) {}
  ~PhaseClock() {
#if GENESIS_WITH_CUDA
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
#endif
  }
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;

  void mark(std::string label) {
    labels_.push_back(std::move(label));
    if (device_.is_cpu()) {
      host_.push_back(Clock::now());
      return;
    }
#if GENESIS_WITH_CUDA
    cudaEvent_t e = nullptr;
    GENESIS_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
    GENESIS_CUDA_CHECK(cudaEventRecord(e, cuda::current_stream()));
#endif
  }

  // Milliseconds from mark i - 1 to mark i, once every mark has completed.
  double since_previous_ms(size_t i) const {
    if (device_.is_cpu()) return std::chrono::duration<double, std::milli>(host_[i] - host_[i - 1]).count();
    float ms = 0;
#if GENESIS_WITH_CUDA
    GENESIS_CUDA_CHECK(cudaEventSynchronize(events_[i]));
    GENESIS_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]));
#endif
    return ms;
  }
  const std::string& label(size_t i) const { return labels_[i]; }
  size_t size() const { return labels_.size(); }

 private:
  Device device_;
  std::vector<std::string> labels_;
  std::vector<Clock::time_point> host_;
#if GENESIS_WITH_CUDA
  std::vector<cudaEvent_t> events_;
#endif
};

void synchronize(Device device) {
#if GENESIS_WITH_CUDA
  if (device.is_cuda()) cuda::synchronize();
#else
  (void)device;
#endif
}

double peak_memory_bytes(Device device) {
#if GENESIS_WITH_CUDA
  if (device.is_cuda()) return static_cast<double>(cuda::memory_stats(device.index).peak_allocated);
#else
  (void)device;
#endif
  return 0.0;
}

void reset_peak_memory(Device device) {
#if GENESIS_WITH_CUDA
  if (device.is_cuda()) cuda::reset_peak_stats(device.index);
#else
  (void)device;
#endif
}

std::string device_name(Device device) {
#if GENESIS_WITH_CUDA
  if (device.is_cuda()) {
    cudaDeviceProp p{};
    GENESIS_CUDA_CHECK(cudaGetDeviceProperties(&p, device.index));
    return p.name;
  }
#endif
  return device.str();
}

// The synthetic micro-batches a bench step cycles through, already on the device, and how
// many documents their rows hold.
struct SyntheticBatches {
  std::vector<data::Batch> batches;
  int64_t rows = 0, documents = 0;
};

// SplitMix64 (Steele, Lea and Flood 2014): scripts/bench/torch_train_lm.py draws its document
// lengths with the same generator and seed, so both sides time the same packing.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Random tokens, uniform over the vocabulary. Packed, each row is filled with documents of
// lengths drawn uniformly in [min, max] (seeded; the last one cut at the row's end), laid out as
// the SFT source lays out packed rows (libgenesis/train/sft_source.cpp): doc_start holds each
// position's document start, and a document's last position has no target (-100), so nothing
// is predicted across documents.
SyntheticBatches synthetic_batches(int64_t count, int64_t batch, int64_t seq, int64_t vocab,
                                   const std::optional<PackedDocuments>& packed, uint64_t seed, Device device) {
  constexpr int64_t kIgnore = -100;
  SyntheticBatches out;
  uint64_t lengths = seed;
  for (int64_t i = 0; i < count; ++i) {
    Tensor ids = randint(0, vocab, {batch, seq + 1});
    Tensor inputs = ids.narrow(1, 0, seq).contiguous(), targets = ids.narrow(1, 1, seq).contiguous();
    out.rows += batch;
    if (!packed) {
      out.documents += batch;
      out.batches.push_back({.inputs = inputs.to(device),
                             .targets = targets.to(device),
                             .loss_terms = batch * seq,
                             .tokens = batch * seq});
      continue;
    }
    Tensor starts = zeros({batch, seq}, {.dtype = DType::i32});
    int64_t documents = 0;
    const auto span = static_cast<uint64_t>(packed->max_length - packed->min_length + 1);
    for (int64_t r = 0; r < batch; ++r) {
      int64_t* target = targets.data<int64_t>() + r * seq;
      int32_t* start = starts.data<int32_t>() + r * seq;
      for (int64_t at = 0; at < seq; ++documents) {
        const int64_t n = std::min(packed->min_length + static_cast<int64_t>(splitmix64(lengths) % span), seq - at);
        std::fill(start + at, start + at + n, static_cast<int32_t>(at));
        target[at + n - 1] = kIgnore;
        at += n;
      }
    }
    out.documents += documents;
    // Every position holds a token (tokens/s stays positions per second, as unpacked); each
    // document's last position is the one target not counted.
    out.batches.push_back({.inputs = inputs.to(device),
                           .targets = targets.to(device),
                           .loss_terms = batch * seq - documents,
                           .tokens = batch * seq,
                           .doc_start = starts.to(device)});
  }
  return out;
}

}  // namespace

PackedDocuments parse_packed_documents(const std::string& text) {
  PackedDocuments p;
  const size_t colon = text.find(':');
  auto number = [&](size_t begin, size_t end, int64_t& value) {
    auto [stop, error] = std::from_chars(text.data() + begin, text.data() + end, value);
    return error == std::errc() && stop == text.data() + end && begin < end;
  };
  const bool ok = colon != std::string::npos && number(0, colon, p.min_length) &&
                  number(colon + 1, text.size(), p.max_length) && p.min_length >= 1 && p.min_length <= p.max_length;
  GENESIS_CHECK(ok, UsageError, "--packed: expected MIN:MAX, document lengths with 1 <= MIN <= MAX (got '", text, "')");
  return p;
}

json run_train_bench(const RecipeSpec& spec, const TrainBenchOptions& options) {
  GENESIS_CHECK(spec.model.is_language_model(), UsageError, "genesis bench train: model '", spec.model.name,
                "' is not a language model; bench train times the step of gpt2, llama, qwen2 and qwen3 recipes");
  GENESIS_CHECK(options.steps >= 1 && options.warmup >= 0, UsageError,
                "genesis bench train: --steps must be >= 1 and --warmup >= 0");
  const Device device = recipe::resolve_device(spec.run.device);
  recipe::check_amp_device(spec, device);
  set_allow_tf32(spec.run.allow_tf32);
  configure_threads(spec.run.threads, {.measure_load = device.is_cpu()});
  manual_seed(static_cast<uint64_t>(spec.run.seed));
  RecipeSpec built = spec;
  if (options.lora_rank > 0) {  // build_model adds the adapters (no init_from needed here)
    built.lora.r = options.lora_rank;
    built.lora.alpha = 2.0 * static_cast<double>(options.lora_rank);
    built.lora.targets = {"all-linear"};
    built.lora.base_quant = options.base_quant;
  }
  GENESIS_CHECK(options.base_quant == "none" || options.lora_rank > 0, UsageError,
                "genesis bench train: --base-quant quantizes the frozen base of a LoRA step: add --lora R");
  std::shared_ptr<nn::Module> model = recipe::build_model(built, device);
  auto* lm = dynamic_cast<models::CausalLM*>(model.get());
  GENESIS_CHECK(lm != nullptr, UsageError, "genesis bench train: the recipe's model is not a causal LM");
  std::unique_ptr<Optimizer> optimizer = recipe::build_optimizer(spec, *model);
  const auto scaler = recipe::build_grad_scaler(spec, device);
  const std::optional<DType> amp = recipe::amp_dtype(spec);
  train::TrainStep step(*model, *optimizer, scaler.get(),
                        {.autocast = amp,
                         .grad_accum_steps = spec.training.grad_accum_steps,
                         .clip_grad_norm = spec.training.clip_grad_norm,
                         .clip_grad_value = spec.training.clip_grad_value});

  // Synthetic tokens: a few batches, cycled, already on the device (the step's time is the
  // model's and the optimizer's; `genesis train` uploads each batch through pinned staging
  // buffers, which does not wait either).
  const int64_t batch = spec.training.batch_size, seq = spec.data.seq_len, vocab = lm->vocab_size();
  const SyntheticBatches synthetic =
      synthetic_batches(4, batch, seq, vocab, options.packed, static_cast<uint64_t>(spec.run.seed), device);
  const std::vector<data::Batch>& batches = synthetic.batches;
  size_t next_index = 0;
  // The step divides by the targets its micro-batches count before it makes them (a packed
  // batch counts one target fewer per document).
  auto loss_terms_ahead = [&](int64_t count) {
    int64_t terms = 0;
    for (int64_t i = 0; i < count; ++i) terms += *batches[(next_index + i) % batches.size()].loss_terms;
    return terms;
  };
  const train::MicroBatches next_batch{.next = [&] { return batches[next_index++ % batches.size()]; },
                                       .loss_terms_ahead = loss_terms_ahead};

  model->train();
  // Progress on stderr (a bar on a terminal, a line every 10 s otherwise): warm-up steps, then
  // timed steps; the bar is drawn between steps, so it adds nothing to their time.
  train::RunLog log("", options.quiet);
  const int64_t total = options.warmup + options.steps;
  for (int64_t i = 0; i < options.warmup; ++i) {
    log.progress("bench train", i, total);
    step.run(next_batch, device);
  }
  synchronize(device);
  reset_peak_memory(device);
  host_profile::reset();  // GENESIS_HOST_PROFILE covers the timed steps only

  PhaseClock clock(device);
  std::vector<double> host_ms;
  // Host time per phase: where the host waits for the device (a phase far longer on the host
  // than its share of the step's issue time holds a synchronization).
  std::map<std::string, std::vector<double>> host_phase_ms;
  train::StepResult last;
  const Clock::time_point wall_start = Clock::now();
  clock.mark("start");
  for (int64_t i = 0; i < options.steps; ++i) {
    log.progress("bench train", options.warmup + i, total);
    const Clock::time_point issued = Clock::now();
    Clock::time_point phase_start = issued;
    std::map<std::string, double> host_split;
    last = step.run(next_batch, device, {}, [&](std::string_view phase) {
      clock.mark(std::string(phase));
      const Clock::time_point now = Clock::now();
      host_split[std::string(phase)] += std::chrono::duration<double, std::milli>(now - phase_start).count();
      phase_start = now;
    });
    host_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - issued).count());
    for (const char* p : kPhases) host_phase_ms[p].push_back(host_split[p]);
  }
  const double final_loss = last.loss.item();  // waits for the last step
  log.clear_progress();
  const double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - wall_start).count();

  // Per step: its total and each phase's share (a phase's time is the span that ends at its mark).
  std::vector<double> step_ms;
  std::map<std::string, std::vector<double>> phase_ms;
  double step_total = 0;
  std::map<std::string, double> step_phases;
  for (size_t i = 1; i < clock.size(); ++i) {
    const double ms = clock.since_previous_ms(i);
    step_total += ms;
    step_phases[clock.label(i)] += ms;
    if (clock.label(i) == "optimizer") {
      step_ms.push_back(step_total);
      for (const char* p : kPhases) phase_ms[p].push_back(step_phases[p]);
      step_total = 0;
      step_phases.clear();
    }
  }
  const Stats step_stats = summarize(step_ms);
  const double host_ms_per_step = summarize(host_ms).median_ms;
  const double ms = step_stats.median_ms;
  const double tokens = static_cast<double>(batch * seq * spec.training.grad_accum_steps);
  const double tokens_per_s = ms > 0 ? tokens / (ms / 1e3) : 0.0;
  const train::PeakRate peak = train::peak_flops(device, spec.run.peak_tflops);
  const double flops_per_token = train::training_flops_per_token(*lm, seq);
  const double mfu = peak.flops_per_s > 0 ? tokens_per_s * flops_per_token / peak.flops_per_s : 0.0;

  json phases, host_phases;
  for (const char* p : kPhases) {
    phases[std::string(p) + "_ms"] = summarize(phase_ms[p]).median_ms;
    host_phases[std::string(p) + "_ms"] = summarize(host_phase_ms[p]).median_ms;
  }
  const std::string dtype = amp ? std::string(dtype_name(*amp)) : std::string("f32");
  // Packed steps are named apart, so that `bench compare` pairs them only with packed steps.
  std::string name = spec.run.name + " train step";
  json packing = nullptr;
  if (options.packed) {
    name += " packed " + std::to_string(options.packed->min_length) + ":" + std::to_string(options.packed->max_length);
    packing = {{"min_doc_length", options.packed->min_length},
               {"max_doc_length", options.packed->max_length},
               {"mean_docs_per_row", static_cast<double>(synthetic.documents) / static_cast<double>(synthetic.rows)},
               {"rows", synthetic.rows}};
  }
  if (options.lora_rank > 0) name += " lora r" + std::to_string(options.lora_rank);
  if (options.base_quant != "none") name += " " + options.base_quant;
  json c{{"name", name},
         {"op", "train_step"},
         {"shapes", json::array({json::array({batch, seq})})},
         {"dtype", dtype},
         {"status", "ok"},
         {"median_ms", ms},
         {"p10_ms", step_stats.p10_ms},
         {"p90_ms", step_stats.p90_ms},
         {"reps", step_stats.reps},
         {"tokens_per_s", tokens_per_s},
         {"wall_tokens_per_s", tokens * static_cast<double>(options.steps) / (wall_ms / 1e3)},
         {"mfu", mfu},
         {"peak_memory_gib", peak_memory_bytes(device) / (1024.0 * 1024.0 * 1024.0)},
         {"phases", phases},
         {"host_ms_per_step", host_ms_per_step},
         {"host_phases", host_phases},
         {"final_loss", final_loss},
         {"packing", packing}};
  std::printf("%s: %s, batch %lld x %lld tokens, %s, %lld steps after %lld warm-up\n", spec.run.name.c_str(),
              lm->model_type().c_str(), static_cast<long long>(batch), static_cast<long long>(seq), dtype.c_str(),
              static_cast<long long>(options.steps), static_cast<long long>(options.warmup));
  if (options.packed)
    std::printf("packed: documents of %lld-%lld tokens, %.2f per row (mean of %lld rows)\n",
                static_cast<long long>(options.packed->min_length), static_cast<long long>(options.packed->max_length),
                packing["mean_docs_per_row"].get<double>(), static_cast<long long>(synthetic.rows));
  std::printf("step %.2f ms (p10 %.2f, p90 %.2f): %.0f tokens/s, MFU %.1f%% (%s), peak %.2f GiB\n", ms,
              step_stats.p10_ms, step_stats.p90_ms, tokens_per_s, 100.0 * mfu, peak.source.c_str(),
              c["peak_memory_gib"].get<double>());
  std::printf("phases: forward %.2f ms, backward %.2f ms, optimizer %.2f ms\n", phases["forward_ms"].get<double>(),
              phases["backward_ms"].get<double>(), phases["optimizer_ms"].get<double>());
  std::printf("host: a step issued in %.2f ms (forward %.2f, backward %.2f, optimizer %.2f)\n", host_ms_per_step,
              host_phases["forward_ms"].get<double>(), host_phases["backward_ms"].get<double>(),
              host_phases["optimizer_ms"].get<double>());
  return {{"schema", "genesis.bench.train/1"},
          {"tool", "genesis"},
          {"tool_version", GENESIS_VERSION_STRING},
          {"device", device.str()},
          {"device_name", device_name(device)},
          {"recipe", spec.run.name},
          {"model", lm->model_type()},
          {"flops_per_token", flops_per_token},
          {"peak_flops_per_s", peak.flops_per_s},
          {"peak_flops_source", peak.source},
          {"cases", json::array({c})}};
}

}  // namespace genesis::cli::bench
