#include "libgenesis/data/shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "libgenesis/core/error.h"
#include "libgenesis/core/interrupt.h"
#include "libgenesis/data/permutation.h"
#include "libgenesis/data/sft_prepare.h"
#include "libgenesis/data/text_pieces.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/json_text.h"

namespace genesis::data {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'G', 'E', 'N', 'T', 'O', 'K', 'E', 'N'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 32;
constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <class T>
T get(const unsigned char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// source.json's layout; a file of another format counts as shards of unknown sources.
constexpr int kSourcesFormat = 1;

// The files Tokenizer::load reads for `path`, in its order of preference.
std::vector<fs::path> tokenizer_files(const fs::path& path) {
  if (!fs::is_directory(path)) return {path};
  for (const auto& files :
       {std::vector<std::string>{"tokenizer.json"}, std::vector<std::string>{"encoder.json", "vocab.bpe"},
        std::vector<std::string>{"vocab.json", "merges.txt"}}) {
    std::vector<fs::path> found;
    for (const std::string& f : files)
      if (fs::exists(path / f)) found.push_back(path / f);
    if (found.size() == files.size()) return found;
  }
  return {};
}

std::string hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

nlohmann::json files_json(const std::vector<ShardSources::File>& files) {
  nlohmann::json out = nlohmann::json::array();
  for (const ShardSources::File& f : files) out.push_back({{"path", f.path}, {"fnv1a64", hex(f.fingerprint)}});
  return out;
}

std::vector<ShardSources::File> files_from_json(const nlohmann::json& json) {
  std::vector<ShardSources::File> out;
  for (const nlohmann::json& f : json)
    out.push_back({f.at("path").get<std::string>(), std::stoull(f.at("fnv1a64").get<std::string>(), nullptr, 16)});
  return out;
}

void write_shard_sources(const fs::path& dir, const ShardSources& s) {
  nlohmann::json shards = nlohmann::json::object();
  for (const auto& [name, bytes] : s.shard_bytes) shards[name] = bytes;
  const nlohmann::json json{{"format", kSourcesFormat},
                            {"documents", files_json(s.documents)},
                            {"tokenizer", files_json(s.tokenizer)},
                            {"val_fraction", s.val_fraction},
                            {"separator", s.separator},
                            {"shard_bytes", shards}};
  io::write_file_atomic(dir / kShardSourcesFile, json.dump(2) + "\n");
}

ShardSources read_shard_sources(const fs::path& file) {
  const nlohmann::json json = nlohmann::json::parse(io::read_file(file, io::kMaxConfigFileBytes));
  GENESIS_CHECK(json.at("format").get<int>() == kSourcesFormat, ValueError, "format ", json.at("format").dump(),
                " (this genesis writes ", kSourcesFormat, ")");
  ShardSources s;
  s.documents = files_from_json(json.at("documents"));
  s.tokenizer = files_from_json(json.at("tokenizer"));
  s.val_fraction = json.at("val_fraction").get<double>();
  s.separator = json.at("separator").get<std::string>();
  for (const auto& [name, bytes] : json.at("shard_bytes").items())
    s.shard_bytes.emplace_back(name, bytes.get<uint64_t>());
  return s;
}

// The first document that differs between two lists, in words ("a.txt differs"); "" when none.
std::string documents_change(const std::vector<ShardSources::File>& made,
                             const std::vector<ShardSources::File>& wanted) {
  auto find = [](const std::vector<ShardSources::File>& files, const std::string& path) {
    return std::find_if(files.begin(), files.end(), [&](const ShardSources::File& f) { return f.path == path; });
  };
  for (const ShardSources::File& w : wanted) {
    auto m = find(made, w.path);
    if (m == made.end()) return w.path + " is new";
    if (m->fingerprint != w.fingerprint) return w.path + " differs";
  }
  for (const ShardSources::File& m : made)
    if (find(wanted, m.path) == wanted.end()) return m.path + " is no longer a source";
  // Both name the same files: what is left is their order (or a file named twice).
  const bool same_order = std::equal(made.begin(), made.end(), wanted.begin(), wanted.end(),
                                     [](const auto& a, const auto& b) { return a.path == b.path; });
  return same_order ? "" : "the documents are listed in another order";
}

}  // namespace

ShardSources describe_shard_sources(const std::vector<fs::path>& documents, const fs::path& tokenizer,
                                    const TokenizeOptions& options) {
  ShardSources s;
  for (const fs::path& d : documents) s.documents.push_back({d.lexically_normal().string(), file_fingerprint(d)});
  for (const fs::path& f : tokenizer_files(tokenizer))
    s.tokenizer.push_back({f.lexically_normal().string(), file_fingerprint(f)});
  s.val_fraction = options.val_fraction;
  s.separator = options.separator;
  return s;
}

std::optional<ShardSourcesChange> compare_shard_sources(const fs::path& dir, const ShardSources& wanted) {
  using What = ShardSourcesChange::What;
  const fs::path file = dir / kShardSourcesFile;
  if (!fs::exists(file)) return std::nullopt;
  ShardSources made;
  try {
    made = read_shard_sources(file);
  } catch (const std::exception& e) {  // malformed JSON, a missing key, another format
    return ShardSourcesChange{What::shards, file.string() + " cannot be read: " + e.what()};
  }
  if (std::string change = documents_change(made.documents, wanted.documents); !change.empty())
    return ShardSourcesChange{What::documents, change};
  // The tokenizer by content alone: the same files moved elsewhere make the same tokens.
  const std::vector<ShardSources::File>&m = made.tokenizer, &w = wanted.tokenizer;
  for (size_t i = 0; i < std::max(m.size(), w.size()); ++i)
    if (i >= m.size() || i >= w.size() || m[i].fingerprint != w[i].fingerprint)
      return ShardSourcesChange{What::tokenizer, (i < w.size() ? w[i].path : m[i].path) + " differs"};
  if (made.val_fraction != wanted.val_fraction)
    return ShardSourcesChange{What::val_fraction, nlohmann::json(made.val_fraction).dump() + " -> " +
                                                      nlohmann::json(wanted.val_fraction).dump()};
  if (made.separator != wanted.separator)
    return ShardSourcesChange{What::separator, "'" + made.separator + "' -> '" + wanted.separator + "'"};
  // A shard that is missing is left to the caller (val.bin removed on purpose: no evaluation).
  for (const auto& [name, bytes] : made.shard_bytes) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(dir / name, ec);
    if (!ec && size != bytes)
      return ShardSourcesChange{What::shards, name + " has " + std::to_string(size) + " bytes, " + kShardSourcesFile +
                                                  " says " + std::to_string(bytes)};
  }
  return ShardSourcesChange{};
}

namespace {

// The genesis shard header: magic, version, token width in bytes, token count, vocabulary size.
std::string shard_header(uint32_t width, uint64_t count, uint64_t vocab_size) {
  std::string header;
  header.append(kMagic, sizeof(kMagic));
  put<uint32_t>(header, kVersion);
  put<uint32_t>(header, width);
  put<uint64_t>(header, count);
  put<uint64_t>(header, vocab_size);
  return header;
}
constexpr size_t kCountOffset = sizeof(kMagic) + 2 * sizeof(uint32_t);  // where shard_header puts the count

}  // namespace

void write_token_shard(const fs::path& path, const std::vector<uint32_t>& tokens, uint64_t vocab_size) {
  uint32_t max_token = tokens.empty() ? 0 : *std::max_element(tokens.begin(), tokens.end());
  GENESIS_CHECK(vocab_size == 0 || max_token < vocab_size, ValueError, "write_token_shard ", path.string(), ": token ",
                max_token, " is outside the vocabulary of ", vocab_size);
  uint32_t width = (vocab_size > 0 ? vocab_size <= 65536 : max_token < 65536) ? 2 : 4;
  const std::string header = shard_header(width, tokens.size(), vocab_size);
  io::AtomicFile file(path);
  file.write(header.data(), header.size());
  if (width == 4) {
    file.write(tokens.data(), tokens.size() * sizeof(uint32_t));
  } else {
    std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
    file.write(narrow.data(), narrow.size() * sizeof(uint16_t));
  }
  file.commit();
}

namespace {

// A token shard written as its tokens come, through an AtomicFile (nothing replaces `path` before
// commit), its header's count filled in at the end.
class ShardWriter {
 public:
  ShardWriter(const fs::path& path, uint64_t vocab_size)
      : file_(path), path_(path), vocab_size_(vocab_size), width_(vocab_size > 0 && vocab_size <= 65536 ? 2 : 4) {
    const std::string header = shard_header(width_, 0, vocab_size);  // the count: commit() writes it
    file_.write(header.data(), header.size());
  }

  void append(const TokenId* ids, size_t n) {
    if (n == 0) return;
    const TokenId max_token = *std::max_element(ids, ids + n);
    GENESIS_CHECK(vocab_size_ == 0 || max_token < vocab_size_, ValueError, "write_token_shard ", path_.string(),
                  ": token ", max_token, " is outside the vocabulary of ", vocab_size_);
    if (width_ == 4) {
      file_.write(ids, n * sizeof(TokenId));
    } else {
      narrow_.assign(ids, ids + n);
      file_.write(narrow_.data(), n * sizeof(uint16_t));
    }
    count_ += n;
  }
  uint64_t count() const { return count_; }

  void commit() {
    file_.write_at(kCountOffset, &count_, sizeof(count_));
    file_.commit();
  }

 private:
  io::AtomicFile file_;
  fs::path path_;
  uint64_t vocab_size_;
  uint32_t width_;
  uint64_t count_ = 0;
  std::vector<uint16_t> narrow_;
};

}  // namespace

TokenizeSummary tokenize_to_shards(const Tokenizer& tokenizer, const std::vector<fs::path>& documents,
                                   const fs::path& out_dir, const TokenizeOptions& options) {
  GENESIS_CHECK(options.val_fraction >= 0 && options.val_fraction < 1, ValueError, "tokenize: val_fraction ",
                options.val_fraction, " is outside [0, 1)");
  std::optional<TokenId> separator;
  if (!options.separator.empty()) {
    separator = tokenizer.token_to_id(options.separator);
    GENESIS_CHECK(separator.has_value(), UsageError, "tokenize: the tokenizer has no token '", options.separator,
                  "' to start documents with; name another separator token (genesis data tokenize --separator TOKEN, "
                  "or '' for none)");
  }
  const char* stopped = "tokenizing the shards (nothing was written; the next run prepares them again)";
  fs::create_directories(out_dir);
  TokenizeSummary summary;
  summary.train_path = out_dir / "train.bin";
  if (options.val_fraction > 0) summary.val_path = out_dir / "val.bin";
  // The shards are written as the documents are encoded (a document is read in pieces: memory
  // holds a piece and its ids, never a whole document or corpus) and replace the old ones only
  // when all is done. Each document's last val_fraction of tokens goes to val: for a document of
  // several pieces that count comes from a first pass over it, the tokens from a second.
  ShardWriter train(summary.train_path, tokenizer.vocab_size());
  std::optional<ShardWriter> val;
  if (options.val_fraction > 0) val.emplace(summary.val_path, tokenizer.vocab_size());
  const size_t piece_bytes = tokenizer.encodes_pieces() ? options.piece_bytes : SIZE_MAX;
  std::string piece;
  for (const auto& path : documents) {
    check_interrupt(stopped);
    TextPieces pieces(path, piece_bytes);
    std::vector<TokenId> ids;
    if (separator) ids.push_back(*separator);
    size_t encoded = 0;  // the document's own tokens (the separator not counted)
    auto encode_piece = [&] {
      std::vector<TokenId> more = tokenizer.encode_ordinary(piece);
      encoded += more.size();
      ids.insert(ids.end(), more.begin(), more.end());
    };
    pieces.next(piece);
    encode_piece();
    uint64_t total = ids.size();  // the document's tokens, the separator included
    const bool several = pieces.next(piece);
    if (several && val) {  // the first pass counts
      do {
        check_interrupt(stopped);
        total += tokenizer.encode_ordinary(piece).size();
      } while (pieces.next(piece));
      pieces = TextPieces(path, piece_bytes);
      pieces.next(piece);  // the first piece again: its ids are those already in `ids`
    }
    const uint64_t cut = val ? static_cast<uint64_t>(static_cast<double>(total) * (1.0 - options.val_fraction) + 0.5)
                             : UINT64_MAX;
    uint64_t position = 0;  // the document's tokens routed so far
    auto route = [&] {
      const uint64_t to_train = position < cut ? std::min<uint64_t>(cut - position, ids.size()) : 0;
      train.append(ids.data(), to_train);
      if (val) val->append(ids.data() + to_train, ids.size() - to_train);
      position += ids.size();
      ids.clear();
    };
    // Route what is encoded, then encode the next piece, to the end of the document.
    if (several) {
      if (!val) {  // `piece` holds the second piece
        route();
        encode_piece();
      }
      while (pieces.next(piece)) {
        route();
        check_interrupt(stopped);
        encode_piece();
      }
    }
    route();
    summary.bytes += pieces.bytes_read();
    if (options.on_document) options.on_document(path, pieces.bytes_read(), encoded);
  }
  check_interrupt(stopped);
  summary.train_tokens = train.count();
  train.commit();
  // source.json goes last: a process killed between the files leaves shards whose bytes differ
  // from what the old source.json says, which the next comparison takes for a change.
  if (val) {
    summary.val_tokens = val->count();
    val->commit();
  } else {
    fs::remove(out_dir / "val.bin");  // it would be taken for these shards' validation tokens
  }
  if (options.sources) {
    ShardSources sources = *options.sources;
    for (const fs::path& shard : {summary.train_path, summary.val_path})
      if (!shard.empty()) sources.shard_bytes.emplace_back(shard.filename().string(), fs::file_size(shard));
    write_shard_sources(out_dir, sources);
  } else {
    fs::remove(out_dir / kShardSourcesFile);  // it describes the shards just replaced
  }
  return summary;
}

std::vector<fs::path> source_documents(const fs::path& entry) {
  if (!fs::is_directory(entry)) return {entry};
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(entry))
    if (e.is_regular_file() && e.path().extension() == ".txt") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

bool looks_like_token_shard(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  unsigned char head[8] = {};
  if (!in.read(reinterpret_cast<char*>(head), sizeof head)) return false;
  return std::memcmp(head, kMagic, sizeof(kMagic)) == 0 || get<int32_t>(head) == kLlmcMagic;
}

TokenShard::TokenShard(const fs::path& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) io::throw_io_error("cannot open token shard", path, errno);
  try {
    map_bytes_ = io::regular_file_size(fd, path);  // a directory or device is refused by name
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (map_bytes_ > 0) {
    map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map_ == MAP_FAILED) {
      int err = errno;
      map_ = nullptr;
      ::close(fd);
      io::throw_io_error("cannot map token shard", path, err);
    }
  }
  ::close(fd);
  try {
    const auto* bytes = static_cast<const unsigned char*>(map_);
    size_t header_bytes = 0;
    if (map_bytes_ >= kHeaderBytes && std::memcmp(bytes, kMagic, sizeof(kMagic)) == 0) {
      uint32_t version = get<uint32_t>(bytes + 8);
      GENESIS_CHECK(version == kVersion, ValueError, "token shard ", path.string(), ": version ", version,
                    " is not supported (genesis reads version ", kVersion, ")");
      token_bytes_ = static_cast<int>(get<uint32_t>(bytes + 12));
      GENESIS_CHECK(token_bytes_ == 2 || token_bytes_ == 4, ValueError, "token shard ", path.string(), ": token width ",
                    token_bytes_, " bytes (expected 2 or 4)");
      const uint64_t count = get<uint64_t>(bytes + 16);
      // Compared before any arithmetic: a count near 2^64 would wrap count * width to a small size.
      GENESIS_CHECK(count <= (map_bytes_ - kHeaderBytes) / static_cast<uint64_t>(token_bytes_), ValueError,
                    "token shard ", path.string(), " is truncated: its header says ", count, " tokens of ",
                    token_bytes_, " bytes but the file has ", map_bytes_, " bytes");
      count_ = static_cast<int64_t>(count);
      vocab_size_ = get<uint64_t>(bytes + 24);
      // 0 means "unknown"; anything else must be a vocabulary the ids could come from: a single
      // id cannot be predicted from anything, and a width of 2 bytes holds only 65536 ids.
      const uint64_t id_limit = uint64_t{1} << (8 * token_bytes_);
      GENESIS_CHECK(vocab_size_ == 0 || (vocab_size_ >= 2 && vocab_size_ <= id_limit), ValueError, "token shard ",
                    path.string(), ": header vocab_size ", vocab_size_, " is impossible for ", token_bytes_,
                    "-byte tokens (expected 0 for unknown, or 2..", id_limit, "); prepare the shard again");
      header_bytes = kHeaderBytes;
      format_ = ShardFormat::genesis;
    } else if (map_bytes_ >= kLlmcHeaderBytes && get<int32_t>(bytes) == kLlmcMagic) {
      int32_t version = get<int32_t>(bytes + 4);
      GENESIS_CHECK(version == 1, ValueError, "llm.c token shard ", path.string(), ": version ", version,
                    " is not supported (genesis reads version 1, u16 tokens)");
      count_ = get<int32_t>(bytes + 8);
      GENESIS_CHECK(count_ >= 0, ValueError, "llm.c token shard ", path.string(), ": negative token count ", count_);
      token_bytes_ = 2;
      header_bytes = kLlmcHeaderBytes;
      format_ = ShardFormat::llmc;
    } else {
      GENESIS_THROW(ValueError, "token shard ", path.string(),
                    ": bad magic (neither a genesis shard, \"GENTOKEN\", nor an llm.c shard, 20240520)");
    }
    size_t expected = header_bytes + static_cast<size_t>(count_) * static_cast<size_t>(token_bytes_);
    GENESIS_CHECK(map_bytes_ >= expected, ValueError, "token shard ", path.string(), " is truncated: its header says ",
                  count_, " tokens (", expected, " bytes) but the file has ", map_bytes_, " bytes");
    GENESIS_CHECK(map_bytes_ == expected, ValueError, "token shard ", path.string(), " has ", map_bytes_ - expected,
                  " bytes beyond the ", count_, " tokens its header announces");
    tokens_ = bytes + header_bytes;
  } catch (...) {
    if (map_ != nullptr) ::munmap(map_, map_bytes_);
    throw;
  }
}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      count_(std::exchange(other.count_, 0)),
      token_bytes_(other.token_bytes_),
      format_(other.format_),
      vocab_size_(other.vocab_size_) {}

TokenShard::~TokenShard() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

uint32_t TokenShard::operator[](int64_t i) const {
  GENESIS_CHECK(i >= 0 && i < count_, IndexError, "token ", i, " is outside shard ", path_.string(), " (", count_,
                " tokens)");
  return token_bytes_ == 2 ? get<uint16_t>(tokens_ + 2 * i) : get<uint32_t>(tokens_ + 4 * i);
}

uint32_t TokenShard::max_token() const {
  uint32_t largest = 0;
  if (token_bytes_ == 2) {
    for (int64_t i = 0; i < count_; ++i) largest = std::max<uint32_t>(largest, get<uint16_t>(tokens_ + 2 * i));
  } else {
    for (int64_t i = 0; i < count_; ++i) largest = std::max(largest, get<uint32_t>(tokens_ + 4 * i));
  }
  return largest;
}

uint32_t TokenShard::checked_max_token() const {
  const uint32_t largest = max_token();
  GENESIS_CHECK(vocab_size_ == 0 || count_ == 0 || largest < vocab_size_, ValueError, "token shard ", path_.string(),
                " holds token id ", largest, " but its header says vocab_size ", vocab_size_,
                "; the header or the tokens are wrong: prepare the shard again");
  return largest;
}

void TokenShard::read(int64_t start, int64_t n, int64_t* out) const {
  GENESIS_CHECK(start >= 0 && n >= 0 && start + n <= count_, IndexError, "tokens [", start, ", ", start + n,
                ") are outside shard ", path_.string(), " (", count_, " tokens)");
  if (token_bytes_ == 2) {
    for (int64_t i = 0; i < n; ++i) out[i] = get<uint16_t>(tokens_ + 2 * (start + i));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = get<uint32_t>(tokens_ + 4 * (start + i));
  }
}

std::string TokenWindowCursor::to_json() const {
  return nlohmann::json{{"epoch", epoch}, {"step", step}}.dump();
}

TokenWindowCursor TokenWindowCursor::from_json(std::string_view text) {
  try {
    auto j = nlohmann::json::parse(text);
    return {j.at("epoch").get<int64_t>(), j.at("step").get<int64_t>()};
  } catch (const nlohmann::json::exception& e) {
    GENESIS_THROW(ValueError, "token window cursor '", text, "' is not {\"epoch\": E, \"step\": S}: ", io::json_error_text(e));
  }
}

TokenWindowLoader::TokenWindowLoader(const std::vector<fs::path>& shards, TokenWindowOptions options)
    : options_(options) {
  GENESIS_CHECK(!shards.empty(), ValueError, "token window loader: no shards given");
  GENESIS_CHECK(options.batch_size > 0 && options.seq_len > 0, ValueError,
                "token window loader: batch_size and seq_len must be positive (got ", options.batch_size, ", ",
                options.seq_len, ")");
  GENESIS_CHECK(options.world_size > 0 && options.rank >= 0 && options.rank < options.world_size, ValueError,
                "token window loader: rank ", options.rank, " is not in [0, world_size ", options.world_size, ")");
  first_window_.push_back(0);
  for (const auto& path : shards) {
    shards_.emplace_back(path);
    const TokenShard& shard = shards_.back();
    GENESIS_CHECK(shard.size() >= options.seq_len + 1, ValueError, "token shard ", path.string(), " holds ",
                  shard.size(), " tokens, fewer than seq_len + 1 = ", options.seq_len + 1);
    total_windows_ += (shard.size() - 1) / options.seq_len;
    first_window_.push_back(total_windows_);
  }
  int64_t global_batch = options.batch_size * options.world_size;
  steps_per_epoch_ = total_windows_ / global_batch;
  GENESIS_CHECK(steps_per_epoch_ > 0, ValueError, "token shards hold ", total_windows_,
                " windows of seq_len + 1 = ", options.seq_len + 1, " tokens, fewer than one global batch (batch_size ",
                options.batch_size, " x world_size ", options.world_size, ")");
}

int64_t TokenWindowLoader::tokens() const {
  int64_t n = 0;
  for (const auto& s : shards_) n += s.size();
  return n;
}

const std::vector<int64_t>& TokenWindowLoader::order_for(int64_t epoch) {
  if (order_epoch_ != epoch) {
    if (options_.shuffle) {
      order_ = permutation(total_windows_, options_.seed, static_cast<uint64_t>(epoch));
    } else {
      order_.resize(total_windows_);
      for (int64_t i = 0; i < total_windows_; ++i) order_[i] = i;
    }
    order_epoch_ = epoch;
  }
  return order_;
}

TokenBatch TokenWindowLoader::next() {
  const int64_t B = options_.batch_size, T = options_.seq_len;
  const auto& order = order_for(cursor_.epoch);
  TokenBatch batch{empty({B, T}, {DType::i64}), empty({B, T}, {DType::i64}), cursor_};
  auto* inputs = batch.inputs.data<int64_t>();
  auto* targets = batch.targets.data<int64_t>();
  std::vector<int64_t> window(T + 1);
  int64_t first = (cursor_.step * options_.world_size + options_.rank) * B;
  for (int64_t b = 0; b < B; ++b) {
    int64_t w = order[first + b];
    auto shard = std::upper_bound(first_window_.begin(), first_window_.end(), w) - first_window_.begin() - 1;
    shards_[shard].read((w - first_window_[shard]) * T, T + 1, window.data());
    std::copy(window.begin(), window.end() - 1, inputs + b * T);
    std::copy(window.begin() + 1, window.end(), targets + b * T);
  }
  if (++cursor_.step == steps_per_epoch_) cursor_ = {cursor_.epoch + 1, 0};
  return batch;
}

void TokenWindowLoader::seek(TokenWindowCursor cursor) {
  GENESIS_CHECK(cursor.epoch >= 0 && cursor.step >= 0 && cursor.step < steps_per_epoch_, ValueError,
                "token window cursor (epoch ", cursor.epoch, ", step ", cursor.step, ") is outside the ",
                steps_per_epoch_, " steps of an epoch");
  cursor_ = cursor;
}

}  // namespace genesis::data
