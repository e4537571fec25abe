#include "libgenesis/data/loader.h"

#include <omp.h>

#include <numeric>

#include "libgenesis/core/error.h"
#include "libgenesis/data/permutation.h"

namespace genesis::data {

DataLoader::DataLoader(Dataset dataset, LoaderOptions options) : dataset_(std::move(dataset)), options_(options) {
  GENESIS_CHECK(options.batch_size >= 1, UsageError, "batch size must be >= 1 (got ", options.batch_size, ")");
  GENESIS_CHECK(options.prefetch >= 0, UsageError, "prefetch must be >= 0 (got ", options.prefetch, ")");
  check_dataset(dataset_, "data loader");
  int64_t n = dataset_.size();
  GENESIS_CHECK(n > 0, ValueError, "data loader: the dataset is empty");
  GENESIS_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size, ValueError,
                "data loader: rank ", options.rank, " is not in [0, world_size ", options.world_size, ")");
  const int64_t global = options.batch_size * options.world_size;
  const int64_t rest = n % global;
  batches_per_epoch_ = n / global + (!options.drop_last && rest >= options.world_size ? 1 : 0);
  GENESIS_CHECK(batches_per_epoch_ > 0, UsageError, "batch size ", options.batch_size,
                options.world_size > 1 ? " x world size " + std::to_string(options.world_size) : std::string(),
                " exceeds the dataset size ", n, options.drop_last ? " with drop_last" : "");
  start_worker();
}

DataLoader::~DataLoader() { stop_worker(); }

LoaderCursor DataLoader::advance(LoaderCursor c) const {
  return c.batch + 1 < batches_per_epoch_ ? LoaderCursor{c.epoch, c.batch + 1} : LoaderCursor{c.epoch + 1, 0};
}

std::pair<int64_t, int64_t> DataLoader::rank_slice(LoaderCursor at) const {
  const int64_t n = dataset_.size();
  const int64_t global = options_.batch_size * options_.world_size;
  const int64_t global_begin = at.batch * global;
  const int64_t size = std::min(n - global_begin, global);  // this global batch's samples
  // This rank's slice: batch_size of a full global batch, an even share of the final partial one.
  return {global_begin + size * options_.rank / options_.world_size,
          global_begin + size * (options_.rank + 1) / options_.world_size};
}

int64_t DataLoader::batch_rows(LoaderCursor at) const {
  const auto [begin, end] = rank_slice(at);
  return end - begin;
}

Batch DataLoader::make_batch(LoaderCursor at) const {
  const int64_t n = dataset_.size();
  const auto [begin, end] = rank_slice(at);
  std::vector<int64_t> indices;
  if (options_.shuffle) {
    // The epoch's permutation depends only on (seed, epoch): recomputed, never stored.
    std::vector<int64_t> perm = permutation(n, options_.seed, static_cast<uint64_t>(at.epoch) + 1);
    indices.assign(perm.begin() + begin, perm.begin() + end);
  } else {
    indices.resize(static_cast<size_t>(end - begin));
    std::iota(indices.begin(), indices.end(), begin);
  }
  Dataset rows = take(dataset_, indices);
  if (options_.transform) options_.transform(rows, indices, at.epoch);
  return {.inputs = rows.inputs, .targets = rows.targets, .epoch = at.epoch, .index = at.batch, .loss_terms = rows.targets.size(0)};
}

void DataLoader::start_worker() {
  worker_cursor_ = cursor_;
  stop_ = false;
  queue_.clear();
  worker_error_ = nullptr;
  if (options_.prefetch == 0) return;
  worker_ = std::thread([this] {
    if (options_.prefetch_threads > 0) omp_set_num_threads(options_.prefetch_threads);  // this thread's regions only
    try {
      for (;;) {
        LoaderCursor at;
        {
          std::unique_lock lock(mutex_);
          cv_.wait(lock, [this] { return stop_ || static_cast<int>(queue_.size()) < options_.prefetch; });
          if (stop_) return;
          at = worker_cursor_;
          worker_cursor_ = advance(worker_cursor_);
        }
        Batch b = make_batch(at);
        {
          std::lock_guard lock(mutex_);
          if (stop_) return;
          queue_.push_back(std::move(b));
        }
        cv_.notify_all();
      }
    } catch (...) {
      std::lock_guard lock(mutex_);
      worker_error_ = std::current_exception();
      cv_.notify_all();
    }
  });
}

void DataLoader::stop_worker() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

Batch DataLoader::next() {
  Batch b;
  if (options_.prefetch == 0) {
    b = make_batch(cursor_);
  } else {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [this] { return !queue_.empty() || worker_error_; });
    // Batches prepared before the worker failed are still good: hand them out first.
    if (queue_.empty()) std::rethrow_exception(worker_error_);
    b = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    cv_.notify_all();
  }
  cursor_ = advance(cursor_);
  return b;
}

void DataLoader::seek(LoaderCursor cursor) {
  GENESIS_CHECK(cursor.epoch >= 0 && cursor.batch >= 0 && cursor.batch < batches_per_epoch_, ValueError,
                "data loader: cursor (epoch ", cursor.epoch, ", batch ", cursor.batch, ") is out of range (",
                batches_per_epoch_, " batches per epoch)");
  stop_worker();
  cursor_ = cursor;
  start_worker();
}

}  // namespace genesis::data
