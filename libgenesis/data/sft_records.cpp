#include "libgenesis/data/sft_records.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "libgenesis/core/error.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/json_text.h"

namespace genesis::data {

namespace fs = std::filesystem;
using nlohmann::json;

std::optional<SftFormat> parse_sft_format(const std::string& name) {
  if (name == "auto") return SftFormat::automatic;
  if (name == "messages") return SftFormat::messages;
  if (name == "prompt_completion") return SftFormat::prompt_completion;
  if (name == "text") return SftFormat::text;
  return std::nullopt;
}

const char* sft_format_name(SftFormat format) {
  switch (format) {
    case SftFormat::automatic: return "auto";
    case SftFormat::messages: return "messages";
    case SftFormat::prompt_completion: return "prompt_completion";
    case SftFormat::text: return "text";
  }
  return "?";
}

namespace {

bool is_jsonl(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.ends_with(".jsonl") || name.ends_with(".jsonl.gz");
}

// A value of a record as a message quotes it: JSON text, cut to 120 bytes, control characters
// and invalid UTF-8 escaped (a record may hold anything).
std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 120) text = text.substr(0, 117) + "...";
  return text;
}

const char* json_type(const json& v) { return v.type_name(); }

}  // namespace

std::vector<fs::path> sft_files(const std::vector<std::string>& entries) {
  std::vector<fs::path> files;
  for (const std::string& entry : entries) {
    const fs::path p = entry;
    std::error_code ec;
    const fs::file_status status = fs::status(p, ec);
    GENESIS_CHECK(fs::exists(status), UsageError, "data.path: ", entry, " does not exist");
    if (fs::is_directory(status)) {
      std::vector<fs::path> found;
      for (const fs::directory_entry& e : fs::directory_iterator(p, ec))
        if (e.is_regular_file() && is_jsonl(e.path())) found.push_back(e.path());
      GENESIS_CHECK(!ec, UsageError, "data.path: cannot list ", entry, ": ", ec.message());
      GENESIS_CHECK(!found.empty(), UsageError, "data.path: the directory ", entry,
                    " holds no .jsonl or .jsonl.gz files");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      GENESIS_CHECK(is_jsonl(p), UsageError, "data.path: ", entry,
                    " is not a .jsonl or .jsonl.gz file (one JSON record per line)");
      files.push_back(p);
    }
  }
  GENESIS_CHECK(!files.empty(), UsageError, "data.path names no files: give .jsonl files or directories of them");
  return files;
}

// One open file: zlib reads gzip'd and plain files alike.
struct SftReader::File {
  fs::path path;
  gzFile gz = nullptr;
  ~File() {
    if (gz) gzclose(gz);
  }
};

SftReader::SftReader(std::vector<fs::path> files, SftFormat format, bool skip_bad)
    : files_(std::move(files)), format_(format), skip_bad_(skip_bad) {
  for (const fs::path& p : files_) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(p, ec);
    GENESIS_CHECK(!ec, IoError, "cannot read ", p.string(), ": ", ec.message());
    total_bytes_ += size;
  }
}

SftReader::~SftReader() = default;

uint64_t SftReader::bytes_read() const {
  if (!file_) return done_bytes_;
  const z_off_t at = gzoffset(file_->gz);
  return done_bytes_ + static_cast<uint64_t>(std::max<z_off_t>(at, 0));
}

bool SftReader::open_next_file() {
  if (file_) done_bytes_ += fs::file_size(file_->path);
  file_.reset();
  if (next_file_ == files_.size()) return false;
  auto f = std::make_unique<File>();
  f->path = files_[next_file_++];
  f->gz = gzopen(f->path.c_str(), "rb");
  if (!f->gz) io::throw_io_error("cannot open", f->path, errno);
  gzbuffer(f->gz, 1 << 18);
  file_ = std::move(f);
  file_format_ = format_;
  line_ = 0;
  return true;
}

// The next line of the current file without its end of line; nullopt at its end.
std::optional<std::string> SftReader::next_line() {
  std::string line;
  char chunk[1 << 16];
  bool any = false;
  while (gzgets(file_->gz, chunk, sizeof chunk) != nullptr) {
    any = true;
    line.append(chunk);
    GENESIS_CHECK(line.size() <= kMaxSftRecordBytes, ValueError, file_->path.string(), ":", line_ + 1,
                  ": a line longer than ", kMaxSftRecordBytes >> 20,
                  " MiB; a JSONL file holds one record per line (is this a JSON array or a binary file?)");
    if (!line.empty() && line.back() == '\n') break;
  }
  int err = Z_OK;
  const char* message = gzerror(file_->gz, &err);
  GENESIS_CHECK(err == Z_OK || err == Z_BUF_ERROR, IoError, "cannot read ", file_->path.string(), " near line ",
                line_ + 1, ": ", err == Z_ERRNO ? std::strerror(errno) : message,
                " (a truncated or corrupt .gz file?)");
  if (!any) return std::nullopt;
  ++line_;
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return line;
}

std::optional<SftRecord> SftReader::parse(const std::string& line, std::string& error) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    error = "not a JSON record: " + io::json_error_text(e);
    return std::nullopt;
  }
  if (!j.is_object()) {
    error = "a record is a JSON object, not " + std::string(json_type(j));
    return std::nullopt;
  }
  SftFormat format = file_format_;
  if (format == SftFormat::automatic) {
    format = j.contains("messages")                          ? SftFormat::messages
             : j.contains("prompt") && j.contains("completion") ? SftFormat::prompt_completion
             : j.contains("text")                              ? SftFormat::text
                                                               : SftFormat::automatic;
    if (format == SftFormat::automatic) {
      std::string keys;
      for (auto it = j.begin(); it != j.end() && keys.size() < 100; ++it) keys += (keys.empty() ? "" : ", ") + it.key();
      error = "a record with keys {" + keys +
              "} has none of the formats: \"messages\", \"prompt\" + \"completion\", or \"text\"";
      return std::nullopt;
    }
  }
  auto string_field = [&](const json& object, const char* key, std::string& out, const std::string& at) {
    const auto it = object.find(key);
    if (it == object.end()) {
      error = at + " has no \"" + key + "\"";
      return false;
    }
    if (!it->is_string()) {
      error = at + "\"" + key + "\" is " + json_type(*it) + " " + shown(*it) + ", not a string";
      return false;
    }
    out = it->get<std::string>();
    return true;
  };
  SftRecord r;
  r.format = format;
  if (format == SftFormat::messages) {
    const auto it = j.find("messages");
    if (it == j.end() || !it->is_array()) {
      error = it == j.end() ? "the record has no \"messages\" (the file's first record has them)"
                            : std::string("\"messages\" is ") + json_type(*it) + ", not a list of turns";
      return std::nullopt;
    }
    if (it->empty()) {
      error = "\"messages\" is an empty conversation";
      return std::nullopt;
    }
    bool assistant = false;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& turn = (*it)[i];
      const std::string at = "turn " + std::to_string(i) + " ";
      if (!turn.is_object()) {
        error = at + "is " + json_type(turn) + " " + shown(turn) + ", not {\"role\", \"content\"}";
        return std::nullopt;
      }
      ChatMessage m;
      if (!string_field(turn, "role", m.role, at) || !string_field(turn, "content", m.content, at)) return std::nullopt;
      if (m.role != "system" && m.role != "user" && m.role != "assistant") {
        error = at + "has the role " + shown(turn["role"]) + "; the roles are system, user and assistant";
        return std::nullopt;
      }
      assistant |= m.role == "assistant";
      r.messages.push_back(std::move(m));
    }
    if (!assistant) {
      error = "the conversation has no assistant turn: nothing to learn from it";
      return std::nullopt;
    }
  } else if (format == SftFormat::prompt_completion) {
    if (!string_field(j, "prompt", r.prompt, "the record ") || !string_field(j, "completion", r.completion, "the record "))
      return std::nullopt;
  } else {
    if (!string_field(j, "text", r.text, "the record ")) return std::nullopt;
    if (r.text.empty()) {
      error = "\"text\" is empty";
      return std::nullopt;
    }
  }
  return r;
}

std::optional<SftRecord> SftReader::next() {
  while (true) {
    if (!file_ && !open_next_file()) return std::nullopt;
    std::optional<std::string> line = next_line();
    if (!line) {
      if (!open_next_file()) return std::nullopt;
      continue;
    }
    if (line->find_first_not_of(" \t") == std::string::npos) continue;  // blank lines separate nothing
    const std::string where = file_->path.string() + ":" + std::to_string(line_);
    std::string error;
    std::optional<SftRecord> record = parse(*line, error);
    if (!record) {
      GENESIS_CHECK(skip_bad_, ValueError, where, ": ", error, " (fix the record, or set data.skip_bad = true to skip such records)");
      if (skipped_++ == 0) first_skipped_ = where + ": " + error;
      continue;
    }
    // The file's format is its first good record's.
    if (file_format_ == SftFormat::automatic) file_format_ = record->format;
    record->where = where;
    ++records_;
    return record;
  }
}

}  // namespace genesis::data
