#include "libgenesis/train/trainer.h"

// run_training and the helpers its pieces share (train/training_run.h).
#include <sys/resource.h>

#include <functional>

#include "libgenesis/core/error.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/data_source.h"
#include "libgenesis/train/run_dir.h"
#include "libgenesis/train/stop_signal.h"
#include "libgenesis/train/training_run.h"

#if GENESIS_WITH_CUDA
#include "libgenesis/cuda/caching_allocator.h"
#include "libgenesis/cuda/runtime.h"
#endif

namespace genesis::train {

namespace fs = std::filesystem;

namespace detail {

// CPU threads of the run (libgenesis/core/threads.h): run.threads, else OMP_NUM_THREADS, else
// the free cores (the load sampled for 0.1 s on CPU runs). thread_note(choice) is the warning
// when that oversubscribes them, printed with the run's other notes (after the data loads, so
// that an error stays the only line on stderr).
// The ranks of a distributed run on one host share its cores (and would see each other as load).
ThreadChoice set_threads(int64_t threads, Device device, int ranks_per_host) {
  return configure_threads(threads, {.measure_load = device.is_cpu() && ranks_per_host == 1,
                                     .ranks_per_host = ranks_per_host});
}

// A distributed rank's device: cuda:LOCAL_RANK for a CUDA run (torchrun's convention).
Device rank_device(Device device, const std::string& requested, const dist::ProcessEnv& env) {
  if (!env.distributed() || !device.is_cuda()) return device;
  GENESIS_CHECK(!requested.starts_with("cuda:"), UsageError, "run.device = \"", requested, "\" with ",
                env.world_size, " ranks: each rank takes cuda:LOCAL_RANK; use run.device = \"cuda\"");
#if GENESIS_WITH_CUDA
  const int gpus = cuda::device_count();
  GENESIS_CHECK(gpus > 0, UsageError, "run.device = \"", requested, "\" but no CUDA GPU is visible; train on the CPU with "
                "--device cpu");
  GENESIS_CHECK(env.local_rank < gpus, UsageError, env.describe(), " needs GPU ", env.local_rank, " but this host has ",
                gpus, "; start at most ", gpus, " ranks per host");
#endif
  return Device(DeviceType::cuda, env.local_rank);
}

// Start-up work that rank 0 does before the other ranks (it prepares what they share: the run
// directory, token shards). When it fails there, every rank stops: rank 0 with its error, the
// others with a line pointing at it (exit 2 for a usage or recipe error, as rank 0's).
void rank0_first(dist::ProcessGroup* group, const std::function<void()>& on_rank0,
                 const std::function<void()>& on_others) {
  if (!group) return on_rank0();
  auto agree = [group](int code) {
    Tensor t = full({1}, code, {.dtype = DType::i32});
    group->host().all_reduce(t, dist::ReduceOp::max)->wait();
    return t.data<int32_t>()[0];
  };
  if (group->rank() == 0) {
    try {
      on_rank0();
    } catch (const UsageError&) {
      agree(2);
      throw;
    } catch (...) {
      agree(1);
      throw;
    }
    agree(0);
  } else {
    const int code = agree(0);
    if (code == 2) GENESIS_THROW(UsageError, "rank 0 could not start the run (its message says why)");
    if (code != 0) GENESIS_THROW(DistError, "rank 0 could not start the run (its message says why)");
    if (on_others) on_others();
  }
}

// Bytes of the optimizer's per-parameter slots (exp_avg, ...), what ZeRO-1 divides by the ranks.
int64_t optimizer_state_bytes(const Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const NamedTensor& t : optimizer.state())
    if (!t.name.ends_with(".step")) bytes += t.tensor.numel() * static_cast<int64_t>(t.tensor.element_size());
  return bytes;
}

// Peak memory of the run: the CUDA allocator's peak on a GPU, the process's peak resident
// set on the CPU.
int64_t peak_memory_bytes(Device device) {
#if GENESIS_WITH_CUDA
  if (device.is_cuda()) return static_cast<int64_t>(cuda::memory_stats(device.index).peak_allocated);
#endif
  (void)device;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // ru_maxrss is in KiB on Linux
}

}  // namespace detail

void check_local_launch(const RecipeSpec& spec, int nproc, const fs::path& run_dir) {
  check_run_dir_free(run_dir);  // rank 0 takes the lock; refused here, it is one line rather than one per rank
  const Device device = recipe::resolve_device(spec.run.device);
  dist::ProcessEnv last;  // the rank with the highest local rank
  last.world_size = last.local_world_size = nproc;
  last.rank = last.local_rank = nproc - 1;
  last.launcher = "--nproc-per-node";
  dist::resolve_backend(spec.dist.backend, device, last);
  detail::rank_device(device, spec.run.device, last);
}

fs::path default_run_dir(const RecipeSpec& spec) { return fs::path(spec.run.out_dir) / spec.run.name; }

int run_training(const RecipeSpec& spec, const TrainOptions& options) {
  const bool language_model = language_model_data(spec.data.name);
  GENESIS_CHECK(language_model == spec.model.is_language_model() || spec.classifies_text(), RecipeError, "model ", spec.model.name,
                spec.model.is_language_model() ? " is a language model: it trains on language-model data (data.name = "
                                                 "\"tokens\" or \"sft\") or labelled text (\"text_classification\")"
                                               : " is a classifier: it trains on samples (data.name = \"fashion_mnist\")",
                ", not data.name = \"", spec.data.name, "\"");
  // Before the run directory is touched:
  recipe::check_amp_device(spec, recipe::resolve_device(spec.run.device));
  recipe::check_init_from(spec);
  recipe::check_classifier_data(spec);
  // From here on SIGINT/SIGTERM stop cleanly: data preparation and evaluation throw
  // Interrupted (exit 130), the loop stops at the next step or micro-batch with a checkpoint.
  StopSignal stop;
  TrainingRun run(spec, options, stop);
  return run.train();
}

}  // namespace genesis::train
