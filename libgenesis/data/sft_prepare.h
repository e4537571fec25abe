#pragma once
// SFT examples as token ids and labels, prepared once and reused. Each record is rendered
// (conversations through the model's chat template), tokenized, and labelled: a token keeps its
// id as label where the loss trains it and gets -100 elsewhere. Which tokens train
// (train_on) is found without knowing the template: the bytes of each assistant turn are those
// the conversation's prefixes add (data/chat_template.h, assistant_spans), and a token trains
// when its first byte lies in such a span.
//
// A prepared dataset is a directory keyed by what decides its contents (the sources' bytes, the
// tokenizer's file, the template, the options): a changed source or tokenizer gets a new key and
// is prepared again; an unchanged one is read back at once. Each split is a safetensors file:
//   ids      i32 [tokens]       every example's tokens, one after another
//   labels   i32 [tokens]       the token's id where it trains, -100 where it does not
//   offsets  i64 [examples + 1] where each example starts in ids (and where the last ends)
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "libgenesis/core/tensor.h"
#include "libgenesis/data/chat_template.h"
#include "libgenesis/data/sft_records.h"
#include "libgenesis/data/tokenizer.h"

namespace genesis::data {

// Which tokens take the loss: "assistant" (every assistant turn, its end-of-turn token
// included; the completion of prompt/completion records), "completion" (the last assistant
// turn only; the completion), "all" (every token).
enum class TrainOn { assistant, completion, all };
std::optional<TrainOn> parse_train_on(const std::string& name);

struct SftExample {
  std::vector<int32_t> ids;
  std::vector<int32_t> labels;  // ids' size: the id where trained, -100 elsewhere
};

// How records become examples. The template renders conversations; prompt/completion records
// are prompt + completion + eos as plain text, text records text + eos, as TRL's SFTTrainer
// tokenizes them.
class SftEncoder {
 public:
  SftEncoder(const Tokenizer& tokenizer, const ChatTemplate* chat_template, std::string eos_token, TrainOn train_on);
  // Throws ValueError naming record.where for a conversation with no chat template to render it,
  // or a template that cannot render it.
  SftExample encode(const SftRecord& record) const;

 private:
  // The tokens of `text` and the labels of those whose first byte lies in one of `spans`.
  SftExample label_spans(const std::string& text, const std::vector<std::pair<size_t, size_t>>& spans) const;

  const Tokenizer& tokenizer_;
  const ChatTemplate* template_;
  std::string eos_token_;
  TrainOn train_on_;
};

struct SftSplit {
  Tensor ids, labels, offsets;  // as in the file (memory-mapped)
  int64_t examples() const { return offsets.defined() ? offsets.numel() - 1 : 0; }
  int64_t length(int64_t example) const;
  int64_t begin(int64_t example) const;
};

struct SftPrepared {
  std::filesystem::path dir;
  SftSplit train, val;  // val: empty (no examples) without a validation set
  bool reused = false;  // read back from an earlier preparation
  int64_t skipped = 0;  // bad records skipped (skip_bad)
};

struct SftPrepareOptions {
  std::vector<std::filesystem::path> train_files, val_files;  // val_files empty: val_fraction
  double val_fraction = 0;  // of the records (every k-th), when there are no val_files
  SftFormat format = SftFormat::automatic;
  bool skip_bad = false;
  std::filesystem::path cache_dir;  // the prepared directory goes under cache_dir/sft/<key>
  // The parts of the key that the encoder does not hold: the tokenizer's file, the template
  // text, the eos token and train_on's name.
  std::string tokenizer_key, template_text, eos_token, train_on_name;
  std::function<void(uint64_t done, uint64_t total)> progress;  // bytes of the sources read
};

// Prepares (or finds prepared) the examples of the sources. Stops with Interrupted on SIGINT /
// SIGTERM (core/interrupt.h) leaving no partial directory. Throws what the reader and encoder
// throw, and UsageError when no example is left.
SftPrepared prepare_sft(const SftEncoder& encoder, const SftPrepareOptions& options);

// A 64-bit FNV-1a hash of a file's bytes (read in blocks), for cache keys.
uint64_t file_fingerprint(const std::filesystem::path& path);

}  // namespace genesis::data
