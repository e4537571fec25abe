#pragma once
// Batches over an in-memory Dataset: a seeded shuffle per epoch, optional background
// prefetch, and a cursor (epoch, batch) that checkpoints save so a resumed run sees the
// same batches as an uninterrupted one.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "libgenesis/data/dataset.h"

namespace genesis::data {

struct Batch {
  Tensor inputs;
  Tensor targets;  // -100 (the losses' ignore_index) where no loss is taken
  int64_t epoch = 0;
  int64_t index = 0;  // batch index within the epoch
  // The targets that take part in the loss, when the source counted them (it knows without a
  // pass over the targets); nullopt: every target does.
  std::optional<int64_t> loss_terms{};
  // Language-model rows: the input positions that hold tokens (padding excluded); 0 otherwise.
  int64_t tokens = 0;
  // Rows that pack several documents: for each input position (i32 [B, T]), the position where
  // its document starts. Attention stays inside a document and positions restart at its start.
  // Undefined: each row is one sequence.
  Tensor doc_start{};

  int64_t counted_targets() const { return loss_terms ? *loss_terms : targets.numel(); }
};

struct LoaderCursor {
  int64_t epoch = 0;
  int64_t batch = 0;  // next batch within the epoch
  friend bool operator==(const LoaderCursor&, const LoaderCursor&) = default;
};

// Changes a batch's rows in place before the loader hands the batch out (a training set's
// augmentation): `samples` are the rows' indices in the dataset, `epoch` the batch's. It must
// depend on nothing else, so that a resumed run's batches equal an uninterrupted run's. It runs
// on the prefetch thread when there is one.
using BatchTransform = std::function<void(Dataset& rows, const std::vector<int64_t>& samples, int64_t epoch)>;

struct LoaderOptions {
  int64_t batch_size = 64;  // per rank
  bool shuffle = true;
  bool drop_last = false;  // drop a final partial batch
  uint64_t seed = 0;
  int prefetch = 2;  // batches prepared ahead by a background thread; 0 = none
  // The OpenMP threads of the prefetch thread's parallel regions (a transform's); 0 = the
  // process's count. A CPU run sets 1: the prefetch thread runs beside the training step, whose
  // threads hold the cores, and a team of its own would put more threads than cores in the
  // step's barriers. On the training thread (prefetch = 0) the transform uses the step's threads.
  int prefetch_threads = 0;
  // Data parallel: a step's global batch is batch_size * world_size consecutive samples of the
  // epoch's order (the same on every rank), and rank r takes the r-th slice. The epoch's final
  // partial global batch is split evenly over the ranks, or dropped when it holds fewer samples
  // than ranks.
  int rank = 0;
  int world_size = 1;
  BatchTransform transform = {};  // none when empty
};

class DataLoader {
 public:
  DataLoader(Dataset dataset, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch; rolls over into the next epoch (reshuffled) at the end of one.
  Batch next();
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  int64_t dataset_size() const { return dataset_.size(); }
  // Position of the batch the next call to next() returns.
  LoaderCursor cursor() const { return cursor_; }
  // The position after `at`, and the samples this rank's batch at `at` holds.
  LoaderCursor advance(LoaderCursor at) const;
  int64_t batch_rows(LoaderCursor at) const;
  void seek(LoaderCursor cursor);

 private:
  Batch make_batch(LoaderCursor at) const;
  // This rank's samples of batch `at`: [begin, end) of the epoch's order.
  std::pair<int64_t, int64_t> rank_slice(LoaderCursor at) const;
  void start_worker();
  void stop_worker();

  Dataset dataset_;
  LoaderOptions options_;
  int64_t batches_per_epoch_;
  LoaderCursor cursor_;  // what next() returns next

  // Background prefetch: the worker produces batches from worker_cursor_ into queue_.
  std::thread worker_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  LoaderCursor worker_cursor_;
  bool stop_ = false;
  std::exception_ptr worker_error_;
};

}  // namespace genesis::data
