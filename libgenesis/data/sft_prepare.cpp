#include "libgenesis/data/sft_prepare.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "libgenesis/core/error.h"
#include "libgenesis/core/interrupt.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/fnv.h"
#include "libgenesis/io/safetensors.h"
#include "libgenesis/ops/factory.h"

namespace genesis::data {

namespace fs = std::filesystem;

namespace {

constexpr int32_t kIgnore = -100;
// Bumped when the prepared layout or the labelling rule changes: older directories are then
// prepared again rather than misread.
constexpr const char* kPreparedVersion = "sft-1";

using io::fnv1a;
using io::kFnvBasis;

std::string hex(uint64_t v) { return io::hex16(v); }

// The examples of one split as they are prepared.
struct Builder {
  std::vector<int32_t> ids, labels;
  std::vector<int64_t> offsets{0};
  void add(SftExample&& e) {
    ids.insert(ids.end(), e.ids.begin(), e.ids.end());
    labels.insert(labels.end(), e.labels.begin(), e.labels.end());
    offsets.push_back(static_cast<int64_t>(ids.size()));
  }
  void save(const fs::path& path) const {
    const auto n = static_cast<int64_t>(ids.size());
    io::save_safetensors(path, {{"ids", from_vector(ids, {n}, {.dtype = DType::i32})},
                            {"labels", from_vector(labels, {n}, {.dtype = DType::i32})},
                            {"offsets", from_vector(offsets, {static_cast<int64_t>(offsets.size())},
                                                    {.dtype = DType::i64})}});
  }
};

SftSplit load_split(const fs::path& path) {
  if (!fs::exists(path)) return {};
  const io::SafetensorsFile file(path);
  SftSplit s{file.tensor("ids"), file.tensor("labels"), file.tensor("offsets")};
  GENESIS_CHECK(s.ids.numel() == s.labels.numel() && s.offsets.numel() >= 1 &&
                    s.offsets.data<int64_t>()[s.offsets.numel() - 1] == s.ids.numel(),
                ValueError, path.string(), ": the prepared examples do not agree with their offsets; delete ",
                path.parent_path().string(), " to prepare them again");
  return s;
}

}  // namespace

std::optional<TrainOn> parse_train_on(const std::string& name) {
  if (name == "assistant") return TrainOn::assistant;
  if (name == "completion") return TrainOn::completion;
  if (name == "all") return TrainOn::all;
  return std::nullopt;
}

int64_t SftSplit::begin(int64_t example) const { return offsets.data<int64_t>()[example]; }
int64_t SftSplit::length(int64_t example) const {
  return offsets.data<int64_t>()[example + 1] - offsets.data<int64_t>()[example];
}

SftEncoder::SftEncoder(const Tokenizer& tokenizer, const ChatTemplate* chat_template, std::string eos_token,
                       TrainOn train_on)
    : tokenizer_(tokenizer), template_(chat_template), eos_token_(std::move(eos_token)), train_on_(train_on) {}

SftExample SftEncoder::label_spans(const std::string& text, const std::vector<std::pair<size_t, size_t>>& spans) const {
  SftExample e;
  for (const TokenId id : tokenizer_.encode(text)) e.ids.push_back(static_cast<int32_t>(id));
  e.labels.assign(e.ids.size(), kIgnore);
  size_t at = 0, span = 0;  // the token's first byte, the first span not yet behind it
  for (size_t i = 0; i < e.ids.size(); ++i) {
    while (span < spans.size() && spans[span].second <= at) ++span;
    if (train_on_ == TrainOn::all || (span < spans.size() && spans[span].first <= at)) e.labels[i] = e.ids[i];
    at += tokenizer_.token_bytes(static_cast<TokenId>(e.ids[i])).size();
  }
  return e;
}

SftExample SftEncoder::encode(const SftRecord& record) const {
  switch (record.format) {
    case SftFormat::messages: {
      GENESIS_CHECK(template_ != nullptr, UsageError, record.where,
                    ": a conversation needs a chat template, and the model has none (its tokenizer_config.json has no "
                    "chat_template): set data.chat_template to a template file");
      std::vector<std::pair<size_t, size_t>> spans;
      std::string text;
      try {
        text = template_->render(record.messages, false);
        spans = assistant_spans(*template_, record.messages);
      } catch (const ValueError& e) {
        GENESIS_THROW(ValueError, record.where, ": ", e.what());
      }
      if (train_on_ == TrainOn::completion && !spans.empty()) spans.erase(spans.begin(), spans.end() - 1);
      return label_spans(text, spans);
    }
    case SftFormat::prompt_completion: {
      const std::string text = record.prompt + record.completion + eos_token_;
      return label_spans(text, {{record.prompt.size(), text.size()}});
    }
    case SftFormat::text:
    case SftFormat::automatic: break;
  }
  const std::string text = record.text + eos_token_;
  return label_spans(text, {{0, text.size()}});
}

uint64_t file_fingerprint(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  GENESIS_CHECK(in.good(), IoError, "cannot read ", path.string());
  std::vector<char> block(1 << 20);
  uint64_t h = kFnvBasis;
  while (in) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    h = fnv1a(h, block.data(), static_cast<size_t>(in.gcount()));
  }
  return h;
}

SftPrepared prepare_sft(const SftEncoder& encoder, const SftPrepareOptions& o) {
  uint64_t key = fnv1a(kFnvBasis, std::string(kPreparedVersion));
  for (const auto* files : {&o.train_files, &o.val_files}) {
    key = fnv1a(key, std::to_string(files->size()));
    for (const fs::path& f : *files) key = fnv1a(key, hex(file_fingerprint(f)));
  }
  for (const std::string& part : {o.tokenizer_key, o.template_text, o.eos_token, o.train_on_name,
                                  std::string(sft_format_name(o.format)), std::to_string(o.skip_bad),
                                  o.val_files.empty() ? std::to_string(o.val_fraction) : std::string()})
    key = fnv1a(key, part);
  SftPrepared out;
  out.dir = o.cache_dir / "sft" / hex(key);
  if (fs::exists(out.dir / "train.safetensors")) {
    out.train = load_split(out.dir / "train.safetensors");
    out.val = load_split(out.dir / "val.safetensors");
    out.reused = true;
    return out;
  }

  Builder train, val;
  uint64_t total = 0;
  std::vector<std::pair<std::vector<fs::path>, bool>> passes{{o.train_files, false}};
  if (!o.val_files.empty()) passes.push_back({o.val_files, true});
  for (const auto& [files, _] : passes)
    for (const fs::path& f : files) total += fs::file_size(f);
  uint64_t done = 0;
  for (const auto& [files, is_val] : passes) {
    SftReader reader(files, o.format, o.skip_bad);
    int64_t index = 0;
    while (std::optional<SftRecord> record = reader.next()) {
      check_interrupt("preparing the SFT data (run again to prepare it)");
      // Every k-th record to validation, k = 1 / val_fraction: exactly that share, spread evenly.
      const bool to_val = is_val || std::floor(static_cast<double>(index + 1) * o.val_fraction) >
                                        std::floor(static_cast<double>(index) * o.val_fraction);
      ++index;
      (to_val ? val : train).add(encoder.encode(*record));
      if (o.progress && index % 256 == 0) o.progress(done + reader.bytes_read(), total);
    }
    done += reader.total_bytes();
    out.skipped += reader.skipped();
  }
  if (o.progress) o.progress(total, total);
  GENESIS_CHECK(train.offsets.size() > 1, UsageError, "data.path: no training example in ",
                o.train_files.front().string(), o.train_files.size() > 1 ? " and the other files" : "",
                out.skipped > 0 ? " (every record was skipped as bad)" : "");

  // Written to a temporary directory and renamed into place whole: an interrupted preparation
  // leaves nothing that looks prepared, and of two runs preparing at once the first rename wins.
  fs::create_directories(out.dir.parent_path());
  const fs::path temp = out.dir.parent_path() / (".tmp-" + hex(key) + "-" + std::to_string(::getpid()));
  fs::remove_all(temp);
  fs::create_directories(temp);
  try {
    train.save(temp / "train.safetensors");
    if (val.offsets.size() > 1) val.save(temp / "val.safetensors");
    io::write_file_atomic(temp / "key.txt", "version " + std::string(kPreparedVersion) + "\ntokenizer " +
                                                o.tokenizer_key + "\ntrain_on " + o.train_on_name + "\nformat " +
                                                sft_format_name(o.format) + "\n");
    io::fsync_tree(temp);
    std::error_code ec;
    fs::rename(temp, out.dir, ec);
    if (ec) fs::remove_all(temp);  // another run prepared the same key first: use its
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(temp, ignored);
    throw;
  }
  out.train = load_split(out.dir / "train.safetensors");
  out.val = load_split(out.dir / "val.safetensors");
  return out;
}

}  // namespace genesis::data
