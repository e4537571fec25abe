// summary.json at the end of a `genesis train` run (train/training_run.h).
#include <nlohmann/json.hpp>

#include "libgenesis/io/file_util.h"
#include "libgenesis/train/training_run.h"

namespace genesis::train {

void TrainingRun::write_summary(double train_s, double wall_s) {
  // Every rank's peak memory and optimizer state, gathered at rank 0 (sums of one-hot vectors).
  std::vector<double> peaks(static_cast<size_t>(world_), 0.0), optimizer_bytes(peaks);
  peaks[static_cast<size_t>(env_.rank)] = static_cast<double>(detail::peak_memory_bytes(device_));
  optimizer_bytes[static_cast<size_t>(env_.rank)] = static_cast<double>(detail::optimizer_state_bytes(*optimizer_));
  if (group_) {
    group_->sum(peaks);
    group_->sum(optimizer_bytes);
  }
  if (!rank0_) return;
  auto per_s = [train_s](int64_t count) { return train_s > 0 ? static_cast<double>(count) / train_s : 0.0; };
  const double samples_per_s = per_s(since_start_.samples);
  nlohmann::json summary{{"run", spec_.run.name},
                         {"final_step", state_.step},
                         {"total_steps", total_},
                         {"train_loss", last_loss_},
                         {"eval", last_eval_},
                         {"eval_split", spec_.eval.split},
                         {"wall_s", wall_s},
                         {"train_s", train_s},
                         {"samples_per_s", samples_per_s},
                         {"peak_memory_bytes", static_cast<int64_t>(peaks[0])},
                         {"device", device_.str()},
                         {"parameters", model_->num_parameters()},
                         {"trainable_parameters", model_->num_parameters(nn::Params::trainable)},
                         {"world_size", world_},
                         {"optimizer_state_bytes", static_cast<int64_t>(optimizer_bytes[0])},
                         // dist.offload_optimizer: that state is host memory, outside peak_memory_bytes
                         {"optimizer_offloaded", optimizer_->offloaded()}};
  if (data_parallel_) {
    summary["dist_backend"] = group_->gradients().backend();
    summary["zero"] = spec_.dist.zero;
    summary["reduce_dtype"] = spec_.dist.reduce_dtype;
    summary["param_dtype"] = spec_.dist.param_dtype;
    summary["gradient_buckets"] = data_parallel_->bucket_count();
    summary["peak_memory_bytes_per_rank"] = peaks;
    summary["optimizer_state_bytes_per_rank"] = optimizer_bytes;
    // Time the step waited for the gradient collectives (the part the backward did not hide).
    summary["comm_wait_share"] = train_s > 0 ? data_parallel_->wait_seconds() / train_s : 0.0;
  }
  // A classifier's last evaluation by class (genesis report's per-class table reads it).
  if (const std::optional<ConfusionMatrix> c = data_->confusion())
    summary["confusion_matrix"] = {{"split", spec_.eval.split}, {"classes", c->classes}, {"counts", c->counts}};
  if (state_.grad_scaler) summary["skipped_steps"] = state_.grad_scaler->skipped_steps;
  if (!scaler_) summary["nonfinite_steps"] = nonfinite_->count();
  if (language_model_) {
    const double tokens_per_s = per_s(since_start_.tokens);
    summary["tokens_per_s"] = tokens_per_s;
    summary["trained_tokens_per_s"] = per_s(since_start_.loss_terms);
    // The share of the positions processed that were trained (packing and padding lower it).
    summary["trained_share"] = since_start_.tokens > 0 ? static_cast<double>(since_start_.loss_terms) /
                                                             static_cast<double>(since_start_.tokens)
                                                       : 0.0;
    summary["mfu"] = mfu(tokens_per_s);
    summary["flops_per_token"] = flops_per_token_;
    summary["peak_flops_per_s"] = peak_.flops_per_s;
    summary["peak_flops_source"] = peak_.source;
  }
  io::write_file_atomic(run_dir_ / "summary.json", summary.dump(2) + "\n");
}

}  // namespace genesis::train
