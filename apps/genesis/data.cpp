// genesis data: encode/decode text with a byte-level BPE tokenizer, write token shards,
// measure the tokenizer's throughput, and preview an SFT recipe's examples (data_preview.cpp).
// Datasets come from data/fetch.sh.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/genesis/commands.h"
#include "libgenesis/core/error.h"
#include "libgenesis/data/shards.h"
#include "libgenesis/data/text_pieces.h"
#include "libgenesis/data/tokenizer.h"
#include "libgenesis/io/dir_lock.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/train/stop_signal.h"

namespace genesis::cli {

namespace {

namespace fs = std::filesystem;

std::string read_stdin() {
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), stdin)) > 0) text.append(buffer, n);
  return text;
}

std::vector<data::TokenId> parse_ids(const std::string& text) {
  std::vector<data::TokenId> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    pos = text.find_first_not_of(" \t\r\n", pos);
    if (pos == std::string::npos) break;
    size_t end = text.find_first_of(" \t\r\n", pos);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(pos, end - pos);
    GENESIS_CHECK(word.find_first_not_of("0123456789") == std::string::npos && word.size() <= 10, UsageError,
                  "decode: '", word, "' is not a token id (expected non-negative integers separated by spaces)");
    uint64_t id = std::stoull(word);
    GENESIS_CHECK(id <= UINT32_MAX, IndexError, "decode: token id ", id, " is outside any vocabulary");
    ids.push_back(static_cast<data::TokenId>(id));
    pos = end;
  }
  return ids;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// CPU time of the calling thread: the single-core throughput, unaffected by other load on
// the machine (wall time is reported beside it).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void add_encode(CLI::App* data_cmd) {
  auto tokenizer = std::make_shared<std::string>();
  auto input = std::make_shared<std::string>();
  CLI::App* sub = data_cmd->add_subcommand(
      "encode", "Print the token ids of a file's text, separated by spaces (added tokens like <|endoftext|> matched)");
  sub->add_option("--tokenizer", *tokenizer, "tokenizer.json, or a directory with it or encoder.json + vocab.bpe")
      ->required();
  sub->add_option("--input", *input, "Text file to encode; - or none: standard input");
  register_command(sub, [=] {
    const bool from_stdin = input->empty() || *input == "-";
    GENESIS_CHECK(from_stdin || fs::exists(*input), UsageError, "data encode: --input ", *input, " does not exist");
    auto tok = data::Tokenizer::load(*tokenizer);
    // The text is read and encoded in pieces (data/text_pieces.h): a file of any size in bounded
    // memory, the ids those of the whole text.
    data::TextPieces pieces(from_stdin ? fs::path("/dev/stdin") : fs::path(*input),
                            tok.encodes_pieces() ? data::kTextPieceBytes : SIZE_MAX);
    std::string piece, out;
    bool first = true;
    while (pieces.next(piece)) {
      out.clear();
      for (data::TokenId id : tok.encode(piece)) {
        if (!first) out += ' ';
        first = false;
        out += std::to_string(id);
      }
      std::fwrite(out.data(), 1, out.size(), stdout);
    }
    std::fputc('\n', stdout);
    return 0;
  });
}

void add_decode(CLI::App* data_cmd) {
  auto tokenizer = std::make_shared<std::string>();
  CLI::App* sub = data_cmd->add_subcommand("decode", "Read token ids from stdin; write their bytes to stdout");
  sub->add_option("--tokenizer", *tokenizer, "tokenizer.json, or a directory with it or encoder.json + vocab.bpe")
      ->required();
  register_command(sub, [=] {
    auto tok = data::Tokenizer::load(*tokenizer);
    std::string bytes = tok.decode(parse_ids(read_stdin()));
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    return 0;
  });
}

struct TokenizeArgs {
  std::string tokenizer;
  std::vector<std::string> inputs;
  std::string out;
  bool overwrite = false;
  bool quiet = false;
  data::TokenizeOptions options;
};

int run_tokenize(TokenizeArgs a) {
  std::vector<fs::path> documents;
  for (const std::string& input : a.inputs) {
    GENESIS_CHECK(fs::exists(input), UsageError, "data tokenize: --input ", input, " does not exist");
    for (const fs::path& doc : data::source_documents(input)) documents.push_back(doc);
  }
  GENESIS_CHECK(!documents.empty(), UsageError, "data tokenize: no documents in ", a.inputs.front(),
                " (a directory gives its *.txt files)");
  // Two preparations of one directory would write the same shard files at once; the second is
  // refused before it looks at the shards or loads the tokenizer.
  const io::DirLock lock(a.out, "wait for it to finish, or pass --out DIR for another directory");
  for (const char* shard : {"train.bin", "val.bin"})
    GENESIS_CHECK(a.overwrite || !fs::exists(fs::path(a.out) / shard), UsageError, "data tokenize: ",
                  (fs::path(a.out) / shard).string(), " exists; pass --overwrite to replace the shards");
  // SIGINT/SIGTERM end the tokenization as they end train's: one line and exit 130 (the shards
  // are written only after the last document, so nothing is left half written).
  const train::StopSignal stop;
  auto tok = data::Tokenizer::load(a.tokenizer);
  auto start = std::chrono::steady_clock::now();
  if (!a.quiet)
    a.options.on_document = [](const fs::path& path, size_t bytes, size_t tokens) {
      std::cerr << "tokenize: " << path.string() << ": " << bytes << " bytes -> " << tokens << " tokens\n";
    };
  // A recipe naming the same sources (data.source) then finds these shards its own.
  a.options.sources = data::describe_shard_sources(documents, a.tokenizer, a.options);
  auto s = data::tokenize_to_shards(tok, documents, a.out, a.options);
  nlohmann::json summary{{"tokenizer", tok.source()},
                         {"vocab_size", tok.vocab_size()},
                         {"documents", documents.size()},
                         {"bytes", s.bytes},
                         {"train", {{"path", s.train_path.string()}, {"tokens", s.train_tokens}}},
                         {"seconds", seconds_since(start)}};
  if (!s.val_path.empty()) summary["val"] = {{"path", s.val_path.string()}, {"tokens", s.val_tokens}};
  std::cout << summary.dump(2) << "\n";
  return 0;
}

void add_tokenize(CLI::App* data_cmd) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* sub = data_cmd->add_subcommand(
      "tokenize", "Encode documents into token shards DIR/train.bin and DIR/val.bin (the last part of each document)");
  sub->add_option("--tokenizer", a->tokenizer, "tokenizer.json, or a directory with it or encoder.json + vocab.bpe")
      ->required();
  sub->add_option("--input", a->inputs, "Text files, one document each, or directories of *.txt files")
      ->required()
      ->expected(1, -1);
  sub->add_flag("--overwrite", a->overwrite, "Replace train.bin and val.bin where they exist");
  sub->add_flag("-q,--quiet", a->quiet, "No line per document on stderr");
  sub->add_option("--out", a->out, "Output directory")->required();
  sub->add_option("--val-fraction", a->options.val_fraction, "Fraction of each document's tokens that goes to val.bin")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.99));
  sub->add_option("--separator", a->options.separator, "Token that starts every document ('' for none)")
      ->capture_default_str();
  register_command(sub, [=] { return run_tokenize(*a); });
}

void add_bench(CLI::App* data_cmd) {
  auto tokenizer = std::make_shared<std::string>();
  auto input = std::make_shared<std::string>();
  CLI::App* sub = data_cmd->add_subcommand(
      "bench-tokenizer",
      "Encoding throughput on one core (JSON): a first pass (empty word cache), then a second (cache warm)");
  sub->add_option("--tokenizer", *tokenizer, "tokenizer.json, or a directory with it or encoder.json + vocab.bpe")
      ->required();
  sub->add_option("--input", *input, "Text file to encode")->required();
  register_command(sub, [=] {
    auto load_start = std::chrono::steady_clock::now();
    auto tok = data::Tokenizer::load(*tokenizer);
    double load_s = seconds_since(load_start);
    std::string text = io::read_file(*input);
    auto start = std::chrono::steady_clock::now();
    double cpu_start = thread_cpu_seconds();
    size_t tokens = tok.encode_ordinary(text).size();
    double cold_s = seconds_since(start), cold_cpu_s = thread_cpu_seconds() - cpu_start;
    start = std::chrono::steady_clock::now();
    cpu_start = thread_cpu_seconds();
    tok.encode_ordinary(text);
    double warm_s = seconds_since(start), warm_cpu_s = thread_cpu_seconds() - cpu_start;
    auto round_trip = tok.decode(tok.encode_ordinary(text)) == text;
    double mb = static_cast<double>(text.size()) / 1e6;
    nlohmann::json j{{"input", *input},
                     {"bytes", text.size()},
                     {"tokens", tokens},
                     {"load_seconds", load_s},
                     {"cold_mb_per_s", mb / cold_s},
                     {"cold_cpu_mb_per_s", mb / cold_cpu_s},
                     {"warm_mb_per_s", mb / warm_s},
                     {"warm_cpu_mb_per_s", mb / warm_cpu_s},
                     {"cached_words", tok.cached_words()},
                     {"round_trip", round_trip}};
    std::cout << j.dump(2) << "\n";
    return round_trip ? 0 : 1;
  });
}

}  // namespace

void add_data_commands(CLI::App& app) {
  CLI::App* data_cmd =
      app.add_subcommand("data", "Tokenizers, token shards and SFT previews (datasets: data/fetch.sh)");
  data_cmd->require_subcommand(1);
  add_encode(data_cmd);
  add_decode(data_cmd);
  add_tokenize(data_cmd);
  add_bench(data_cmd);
  add_data_preview_command(data_cmd);
}

}  // namespace genesis::cli
