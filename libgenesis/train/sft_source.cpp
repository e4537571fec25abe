// Supervised fine-tuning on JSONL records (data.name = "sft"; train/data_source.h): records
// rendered through the model's chat template, tokenized and labelled once into a prepared
// directory (data/sft_prepare.h), then cut into rows: packed (several examples per row of
// seq_len tokens, attention kept inside each) or one example per row padded per batch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <vector>

#include "libgenesis/autograd/grad_mode.h"
#include "libgenesis/core/error.h"
#include "libgenesis/core/interrupt.h"
#include "libgenesis/data/permutation.h"
#include "libgenesis/data/sft_prepare.h"
#include "libgenesis/models/causal_lm.h"
#include "libgenesis/ops/elementwise.h"
#include "libgenesis/ops/factory.h"
#include "libgenesis/recipe/build.h"
#include "libgenesis/train/data_source.h"
#include "libgenesis/train/sft_data.h"

namespace genesis::train {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kIgnore = -100;

// A split's examples in rows: each row lists examples (at most seq_len tokens together when
// packed, one each otherwise).
using Rows = std::vector<std::vector<int64_t>>;

// Best fit, longest first: each example goes to the fullest row it fits in. Rows come out
// nearly full (a few percent of padding on mixed lengths), and the order is the lengths', not
// the data's: the loader shuffles rows every epoch.
Rows pack_rows(const std::vector<int64_t>& lengths, int64_t seq_len) {
  std::vector<int64_t> order(lengths.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  Rows rows;
  std::multimap<int64_t, size_t> room;  // free positions -> row
  for (const int64_t e : order) {
    const int64_t length = lengths[static_cast<size_t>(e)];
    auto it = room.lower_bound(length);
    size_t row;
    int64_t free;
    if (it == room.end()) {
      row = rows.size();
      rows.emplace_back();
      free = seq_len;
    } else {
      row = it->second;
      free = it->first;
      room.erase(it);
    }
    rows[row].push_back(e);
    if (free - length > 1) room.emplace(free - length, row);  // a 1-token gap holds no example
  }
  return rows;
}

// One example per row (epoch_order batches rows of similar length together).
Rows single_rows(const std::vector<int64_t>& lengths) {
  Rows rows;
  for (size_t i = 0; i < lengths.size(); ++i) rows.push_back({static_cast<int64_t>(i)});
  return rows;
}

class SftSource final : public DataSource {
 public:
  SftSource(const RecipeSpec& spec, Device device, RunLog& log, const EvalShare& share)
      : device_(device),
        share_(share),
        seq_len_(spec.data.seq_len),
        batch_(spec.training.batch_size),
        eval_batch_(recipe::eval_batch_size(spec)),
        exact_match_(spec.eval.exact_match),
        pack_(spec.data.pack),
        shuffle_(spec.data.shuffle),
        seed_(static_cast<uint64_t>(spec.run.seed)) {
    SftData data = prepare_sft_data(spec, log);
    vocab_size_ = static_cast<int64_t>(data.format.tokenizer->vocab_size());
    tokenizer_dir_ = data.format.tokenizer_dir;
    prepared_ = std::move(data.prepared);
    train_rows_ = layout(prepared_.train, "training", log);
    for (const std::vector<int64_t>& row : train_rows_) row_terms_.push_back(trained_in_row(prepared_.train, row));
    if (prepared_.val.examples() > 0) val_rows_ = layout(prepared_.val, "validation", log);
    const int64_t global = batch_ * share_.world;
    per_epoch_ = static_cast<int64_t>(train_rows_.size()) / global;
    GENESIS_CHECK(per_epoch_ > 0, UsageError, "data: the ", prepared_.train.examples(), " training examples make ",
                  train_rows_.size(), " rows, fewer than one global batch of ", global,
                  " rows (training.batch_size x ranks); lower training.batch_size");
  }

  data::Batch next() override {
    const data::LoaderCursor at = cursor_;
    std::vector<const std::vector<int64_t>*> rows;
    for (const int64_t row : batch_rows(at)) rows.push_back(&train_rows_[static_cast<size_t>(row)]);
    data::Batch b = make_batch(prepared_.train, rows);
    b.epoch = at.epoch;
    b.index = at.batch;
    cursor_ = advance(at);
    return b;
  }
  int64_t loss_terms_ahead(int64_t count) const override {
    int64_t terms = 0;
    data::LoaderCursor at = cursor_;
    for (int64_t i = 0; i < count; ++i, at = advance(at))
      for (const int64_t row : batch_rows(at)) terms += row_terms_[static_cast<size_t>(row)];
    return terms;
  }
  data::LoaderCursor cursor() const override { return cursor_; }
  void seek(data::LoaderCursor at) override {
    GENESIS_CHECK(at.batch >= 0 && at.batch < per_epoch_ && at.epoch >= 0, ValueError, "sft data: batch ", at.batch,
                  " of epoch ", at.epoch, " lies outside the ", per_epoch_, " batches of an epoch");
    cursor_ = at;
  }
  int64_t batches_per_epoch() const override { return per_epoch_; }

  bool has_evaluation() const override { return !val_rows_.empty(); }
  std::string missing_evaluation() const override {
    return "the SFT data has no validation examples (set data.val_path, or data.val_fraction > 0)";
  }
  // The mean loss over the validation examples' trained tokens (and its perplexity), in the
  // rows training uses.
  std::map<std::string, double> evaluate(nn::Module& model) override {
    auto* lm = dynamic_cast<models::CausalLM*>(&model);
    GENESIS_CHECK(lm != nullptr, ValueError, "SFT evaluation needs a language model");
    const bool was_training = model.is_training();
    model.eval();
    NoGradGuard no_grad;
    Tensor loss_sum = scalar_tensor(0.0, {.dtype = DType::f64, .device = device_});
    double counted = 0;
    const auto batches = static_cast<int64_t>((val_rows_.size() + static_cast<size_t>(eval_batch_) - 1) /
                                              static_cast<size_t>(eval_batch_));
    for (int64_t b = 0; b < batches; ++b) {
      if (!share_.mine(b)) continue;
      check_interrupt("evaluating");
      std::vector<const std::vector<int64_t>*> rows;
      for (int64_t r = b * eval_batch_; r < std::min<int64_t>((b + 1) * eval_batch_, val_rows_.size()); ++r)
        rows.push_back(&val_rows_[static_cast<size_t>(r)]);
      const data::Batch batch = make_batch(prepared_.val, rows);
      counted += static_cast<double>(batch.counted_targets());
      loss_sum = add(loss_sum, lm->loss(batch.inputs.to(device_), batch.targets.to(device_), Reduction::sum,
                                        batch.doc_start.defined() ? batch.doc_start.to(device_) : Tensor())
                                   .to(DType::f64));
      share_.report(b + 1, batches);
    }
    const auto [matched, scored] = exact_matches(*lm);
    model.train(was_training);
    std::vector<double> sums{loss_sum.item(), counted, matched, scored};
    share_.reduce(sums);
    const double loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    std::map<std::string, double> out{{"loss", loss}, {"perplexity", std::exp(loss)}, {"tokens", sums[1]}};
    if (sums[3] > 0) out["exact_match"] = sums[2] / sums[3];
    return out;
  }

  // eval.exact_match: of the first validation examples, how many have their last trained span
  // (the last assistant turn, its end token included) generated greedily, token for token, from
  // the tokens before it. This rank's (matched, scored).
  std::pair<double, double> exact_matches(models::CausalLM& lm) const {
    const data::SftSplit& split = prepared_.val;
    const int64_t count = std::min(exact_match_, split.examples());
    const int32_t* ids = split.ids.data<int32_t>();
    const int32_t* labels = split.labels.data<int32_t>();
    double matched = 0, scored = 0;
    for (int64_t e = 0; e < count; ++e) {
      if (!share_.mine(e)) continue;
      check_interrupt("evaluating");
      const int64_t begin = split.begin(e), n = std::min(split.length(e), lm.max_positions());
      int64_t end = n;
      while (end > 1 && labels[begin + end - 1] == kIgnore) --end;
      int64_t start = end;
      while (start > 1 && labels[begin + start - 1] != kIgnore) --start;
      if (start == end) continue;  // nothing trained to generate
      const std::vector<int64_t> prompt(ids + begin, ids + begin + start);
      const Tensor generated = models::greedy_generate(
          lm, from_vector(prompt, {1, start}, {.dtype = DType::i64}), end - start);
      bool same = true;
      for (int64_t i = 0; i < end - start && same; ++i) same = generated.data<int64_t>()[i] == ids[begin + start + i];
      matched += same;
      scored += 1;
    }
    return {matched, scored};
  }

  void check_model(const nn::Module& model) const override {
    const auto* lm = dynamic_cast<const models::CausalLM*>(&model);
    if (!lm) return;
    GENESIS_CHECK(vocab_size_ <= lm->vocab_size(), RecipeError, "data: the tokenizer has ", vocab_size_,
                  " tokens but the model's vocabulary only ", lm->vocab_size(),
                  "; fine-tune with the model's own tokenizer (model.init_from's, or data.tokenizer)");
    GENESIS_CHECK(seq_len_ <= lm->max_positions(), RecipeError, "data.seq_len (", seq_len_,
                  ") exceeds the model's context of ", lm->max_positions(), " positions");
  }

  int64_t sequence_length() const override { return seq_len_; }
  fs::path tokenizer() const override { return tokenizer_dir_; }
  std::string row_noun() const override {
    return pack_ ? "rows of " + std::to_string(seq_len_) + " tokens (packed examples)"
                 : "examples (padded per batch, up to " + std::to_string(seq_len_) + " tokens)";
  }

 private:
  // The split's rows: examples cut to seq_len tokens (noted), those of one token dropped (they
  // predict nothing).
  Rows layout(const data::SftSplit& split, const char* name, RunLog& log) const {
    std::vector<int64_t> lengths(static_cast<size_t>(split.examples()));
    int64_t cut = 0;
    for (int64_t e = 0; e < split.examples(); ++e) {
      const int64_t n = split.length(e);
      cut += n > seq_len_;
      lengths[static_cast<size_t>(e)] = std::min(n, seq_len_);
    }
    if (cut > 0)
      log.note("note: " + std::to_string(cut) + " " + name + " examples are longer than data.seq_len = " +
               std::to_string(seq_len_) + " tokens and are cut to it");
    Rows rows = pack_ ? pack_rows(lengths, seq_len_) : single_rows(lengths);
    std::erase_if(rows, [&](std::vector<int64_t>& row) {
      std::erase_if(row, [&](int64_t e) { return lengths[static_cast<size_t>(e)] < 2; });
      return row.empty();
    });
    if (pack_) {
      // The packing's efficiency: the share of the rows' positions that hold tokens.
      int64_t tokens = 0;
      for (const std::vector<int64_t>& row : rows)
        for (int64_t e : row) tokens += lengths[static_cast<size_t>(e)];
      const double filled = rows.empty() ? 0.0 : static_cast<double>(tokens) / static_cast<double>(rows.size() * seq_len_);
      char line[160];
      std::snprintf(line, sizeof line, "packing: %lld %s examples into %zu rows of %lld tokens, %.1f%% of positions filled",
                    static_cast<long long>(split.examples()), name, rows.size(), static_cast<long long>(seq_len_),
                    100.0 * filled);
      log.note(line);
    }
    return rows;
  }

  data::LoaderCursor advance(data::LoaderCursor at) const {
    return at.batch + 1 < per_epoch_ ? data::LoaderCursor{at.epoch, at.batch + 1} : data::LoaderCursor{at.epoch + 1, 0};
  }
  // This rank's rows of batch `at`: a global batch is batch_size x ranks consecutive rows of the
  // epoch's order, and rank r takes the r-th slice.
  std::vector<int64_t> batch_rows(data::LoaderCursor at) const {
    const std::vector<int64_t>& order = epoch_order(at.epoch);
    const auto first = order.begin() + (at.batch * share_.world + share_.rank) * batch_;
    return {first, first + batch_};
  }

  // The targets a row trains: each of its examples' labels after the first (the shift that
  // makes targets), as make_batch counts them.
  int64_t trained_in_row(const data::SftSplit& split, const std::vector<int64_t>& row) const {
    const int32_t* labels = split.labels.data<int32_t>();
    int64_t terms = 0;
    for (const int64_t e : row) {
      const int64_t begin = split.begin(e), n = std::min(split.length(e), seq_len_);
      for (int64_t i = 1; i < n; ++i) terms += labels[begin + i] != kIgnore;
    }
    return terms;
  }

  // Epoch e's row order: a seeded permutation (data.shuffle), or the rows' own order. Unpacked
  // rows are then grouped by length within windows of 64 batches, so that a batch pads little.
  // Cached: a step asks for the counts of its micro-batches before making them.
  const std::vector<int64_t>& epoch_order(int64_t epoch) const {
    if (order_epoch_ == epoch) return order_;
    const auto n = static_cast<int64_t>(train_rows_.size());
    order_ = shuffle_ ? data::permutation(n, seed_, static_cast<uint64_t>(epoch)) : std::vector<int64_t>();
    if (!shuffle_)
      for (int64_t i = 0; i < n; ++i) order_.push_back(i);
    if (!pack_) {
      const int64_t window = 64 * batch_ * share_.world;
      for (int64_t w = 0; w < n; w += window) {
        auto begin = order_.begin() + w, end = order_.begin() + std::min(n, w + window);
        std::stable_sort(begin, end, [&](int64_t a, int64_t b) { return row_length(a) > row_length(b); });
      }
    }
    order_epoch_ = epoch;
    return order_;
  }
  int64_t row_length(int64_t row) const {
    int64_t n = 0;
    for (int64_t e : train_rows_[static_cast<size_t>(row)]) n += std::min(prepared_.train.length(e), seq_len_);
    return n;
  }

  // inputs, targets (the next token's label inside each example; -100 at an example's last
  // token and on padding), counts, and for packed rows each position's document start.
  data::Batch make_batch(const data::SftSplit& split, const std::vector<const std::vector<int64_t>*>& rows) const {
    int64_t width = 0;
    for (const auto* row : rows) {
      int64_t n = 0;
      for (int64_t e : *row) n += std::min(split.length(e), seq_len_);
      width = std::max(width, n);
    }
    if (pack_) width = seq_len_;
    const auto count = static_cast<int64_t>(rows.size());
    Tensor inputs = zeros({count, width}, {.dtype = DType::i64});
    Tensor targets = full({count, width}, static_cast<double>(kIgnore), {.dtype = DType::i64});
    Tensor starts = pack_ ? zeros({count, width}, {.dtype = DType::i32}) : Tensor();
    const int32_t* ids = split.ids.data<int32_t>();
    const int32_t* labels = split.labels.data<int32_t>();
    int64_t tokens = 0, counted = 0;
    for (int64_t r = 0; r < count; ++r) {
      int64_t* in = inputs.data<int64_t>() + r * width;
      int64_t* out = targets.data<int64_t>() + r * width;
      int32_t* start = pack_ ? starts.data<int32_t>() + r * width : nullptr;
      int64_t at = 0;
      for (int64_t e : *rows[static_cast<size_t>(r)]) {
        const int64_t begin = split.begin(e), n = std::min(split.length(e), seq_len_);
        for (int64_t i = 0; i < n; ++i) {
          in[at + i] = ids[begin + i];
          out[at + i] = i + 1 < n ? labels[begin + i + 1] : kIgnore;
          counted += out[at + i] != kIgnore;
          if (start) start[at + i] = static_cast<int32_t>(at);
        }
        at += n;
      }
      tokens += at;
      if (start)
        for (int64_t i = at; i < width; ++i) start[i] = static_cast<int32_t>(at);  // padding: a document of its own
    }
    return {.inputs = inputs, .targets = targets, .loss_terms = counted, .tokens = tokens, .doc_start = starts};
  }

  Device device_;
  EvalShare share_;
  int64_t seq_len_, batch_, eval_batch_, exact_match_;
  bool pack_, shuffle_;
  uint64_t seed_;
  int64_t vocab_size_ = 0;
  fs::path tokenizer_dir_;
  data::SftPrepared prepared_;
  Rows train_rows_, val_rows_;
  int64_t per_epoch_ = 0;
  std::vector<int64_t> row_terms_;  // trained targets of each training row
  data::LoaderCursor cursor_;
  mutable std::vector<int64_t> order_;
  mutable int64_t order_epoch_ = -1;
};

}  // namespace

std::unique_ptr<DataSource> open_sft_source(const RecipeSpec& spec, Device device, RunLog& log,
                                            const EvalShare& share, const std::string&) {
  return std::make_unique<SftSource>(spec, device, log, share);
}

}  // namespace genesis::train
