#include "libgenesis/io/checkpoint_dir.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "libgenesis/io/dir_lock.h"
#include "libgenesis/io/file_util.h"

namespace genesis::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLatest = "latest";

std::string pid_suffix() {
  return std::to_string(::getpid());
}

bool path_exists(const fs::path& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw_io_error("cannot rename '" + from.string() + "' to", to, errno);
}

// Trailing slashes would make "<dir>/.tmp-<pid>" out of "<dir>/" + ".tmp-<pid>".
fs::path without_trailing_slash(fs::path path) {
  path = path.lexically_normal();
  return path.has_filename() || !path.has_parent_path() ? path : path.parent_path();
}

// The checkpoint a pointer (symlink, or a one-line text file) names, relative to the pointer's
// directory unless absolute. Not checked to exist.
fs::path pointer_target(const fs::path& pointer) {
  std::error_code ec;
  fs::file_status status = fs::symlink_status(pointer, ec);
  fs::path target;
  if (fs::is_symlink(status)) {
    target = fs::read_symlink(pointer, ec);
    if (ec) throw_io_error("cannot read the link", pointer, ec.value());
  } else if (fs::is_regular_file(status)) {
    std::string text = read_file(pointer);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
    GENESIS_CHECK(
        !text.empty() && text.size() < 4096 && text.find_first_of(std::string("\n\0", 2)) == std::string::npos, IoError,
        "'", pointer.string(), "' is a file but not a checkpoint pointer (one line naming a checkpoint)");
    target = text;
  } else {
    GENESIS_THROW(IoError, "'", pointer.string(), "' is neither a symlink nor a pointer file");
  }
  return (target.is_absolute() ? target : pointer.parent_path() / target).lexically_normal();
}

fs::path existing_checkpoint_at(const fs::path& pointer) {
  fs::path target = pointer_target(pointer);
  std::error_code ec;
  GENESIS_CHECK(fs::is_directory(target, ec), IoError, "'", pointer.string(), "' points to '", target.string(),
                "', which is not an existing directory");
  return target;
}

// A directory is a checkpoints directory when it has a `latest` pointer or step_<N> children;
// otherwise it is taken to be a checkpoint itself.
fs::path resolve_directory(const fs::path& dir) {
  // A run directory: its checkpoints.
  if (!fs::exists(dir / "model.safetensors") && fs::is_directory(dir / "checkpoints")) return resolve_directory(dir / "checkpoints");
  if (path_exists(dir / kLatest)) return existing_checkpoint_at(dir / kLatest);
  std::vector<CheckpointEntry> entries = list_checkpoints(dir);
  if (!entries.empty()) return entries.back().path;
  GENESIS_CHECK(!empty_but_for_lock(dir), IoError, "no checkpoint at '", dir.string(), "': the directory is empty");
  return dir;
}

}  // namespace

DirectoryTransaction::DirectoryTransaction(fs::path final_dir, bool replace)
    : final_dir_(without_trailing_slash(std::move(final_dir))), replace_(replace) {
  GENESIS_CHECK(final_dir_.has_filename(), ValueError, "DirectoryTransaction: '", final_dir_.string(),
                "' does not name a directory");
  GENESIS_CHECK(replace_ || !path_exists(final_dir_), IoError, "checkpoint directory '", final_dir_.string(),
                "' already exists (pass replace=true to overwrite it)");
  temp_dir_ = final_dir_.string() + ".tmp-" + pid_suffix();
  std::error_code ec;
  if (final_dir_.has_parent_path()) {
    fs::create_directories(final_dir_.parent_path(), ec);
    if (ec) throw_io_error("cannot create directory", final_dir_.parent_path(), ec.value());
  }
  // A leftover of a crashed process that had the same pid (pids repeat across container runs).
  fs::remove_all(temp_dir_, ec);
  if (ec) throw_io_error("cannot remove stale directory", temp_dir_, ec.value());
  fs::create_directory(temp_dir_, ec);
  if (ec) throw_io_error("cannot create directory", temp_dir_, ec.value());
}

DirectoryTransaction::~DirectoryTransaction() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(temp_dir_, ec);  // best effort: a destructor must not throw
}

void DirectoryTransaction::commit() {
  GENESIS_CHECK(!committed_, IoError, "checkpoint directory '", final_dir_.string(), "' was already committed");
  fsync_tree(temp_dir_);
  if (!path_exists(final_dir_)) {
    rename_or_throw(temp_dir_, final_dir_);
    committed_ = true;
    fsync_parent(final_dir_);
    return;
  }
  GENESIS_CHECK(replace_, IoError, "cannot commit '", final_dir_.string(),
                "': it was created by someone else meanwhile (pass replace=true to overwrite it)");
  // Rename the old directory away first: there is no atomic swap of two directories, and this
  // way a crash leaves either the old checkpoint or the new one under the final name.
  fs::path old_dir = final_dir_.string() + ".old-" + pid_suffix();
  std::error_code ec;
  fs::remove_all(old_dir, ec);
  rename_or_throw(final_dir_, old_dir);
  if (::rename(temp_dir_.c_str(), final_dir_.c_str()) != 0) {
    int err = errno;
    ::rename(old_dir.c_str(), final_dir_.c_str());
    throw_io_error("cannot rename '" + temp_dir_.string() + "' to", final_dir_, err);
  }
  committed_ = true;
  fsync_parent(final_dir_);
  fs::remove_all(old_dir, ec);
  if (ec) throw_io_error("committed, but cannot remove the replaced directory", old_dir, ec.value());
}

std::string checkpoint_name(int64_t step) {
  GENESIS_CHECK(step >= 0, ValueError, "checkpoint_name: step must be >= 0, got ", step);
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return name;
}

std::optional<int64_t> checkpoint_step(const std::string& name) {
  constexpr std::string_view prefix = "step_";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  if (!std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  int64_t step = 0;
  auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last) return std::nullopt;
  return step;
}

std::vector<CheckpointEntry> list_checkpoints(const fs::path& checkpoints_dir) {
  std::error_code ec;
  GENESIS_CHECK(fs::is_directory(checkpoints_dir, ec), IoError, "checkpoints directory '", checkpoints_dir.string(),
                "' does not exist or is not a directory");
  std::vector<CheckpointEntry> entries;
  for (auto it = fs::directory_iterator(checkpoints_dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::optional<int64_t> step = checkpoint_step(it->path().filename().string());
    std::error_code dir_ec;
    if (step && it->is_directory(dir_ec)) entries.push_back({*step, it->path()});
  }
  if (ec) throw_io_error("cannot list", checkpoints_dir, ec.value());
  std::sort(entries.begin(), entries.end(), [](const CheckpointEntry& a, const CheckpointEntry& b) {
    return a.step != b.step ? a.step < b.step : a.path < b.path;
  });
  return entries;
}

void update_latest_pointer(const fs::path& checkpoints_dir, const std::string& name) {
  GENESIS_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..", ValueError,
                "update_latest_pointer: '", name, "' is not a checkpoint name inside '", checkpoints_dir.string(), "'");
  std::error_code ec;
  GENESIS_CHECK(fs::is_directory(checkpoints_dir / name, ec), IoError, "cannot point '",
                (checkpoints_dir / kLatest).string(), "' at '", name, "': '", (checkpoints_dir / name).string(),
                "' is not a directory");
  fs::path latest = checkpoints_dir / kLatest;
  GENESIS_CHECK(!fs::is_directory(fs::symlink_status(latest, ec)), IoError, "'", latest.string(),
                "' is a directory, not a pointer; remove it first");
  fs::path temp = latest.string() + ".tmp";
  fs::remove(temp, ec);
  fs::create_symlink(name, temp, ec);
  if (ec) {
    // File systems without symlinks get a text file holding the name.
    write_file_atomic(latest, name + "\n");
    return;
  }
  if (::rename(temp.c_str(), latest.c_str()) != 0) {
    int err = errno;
    fs::remove(temp, ec);
    throw_io_error("cannot rename '" + temp.string() + "' to", latest, err);
  }
  fsync_parent(latest);
}

std::optional<fs::path> read_latest_pointer(const fs::path& checkpoints_dir) {
  fs::path latest = checkpoints_dir / kLatest;
  if (!path_exists(latest)) return std::nullopt;
  return pointer_target(latest);
}

std::vector<fs::path> prune_checkpoints(const fs::path& checkpoints_dir, size_t keep_last) {
  std::vector<CheckpointEntry> entries = list_checkpoints(checkpoints_dir);
  std::optional<fs::path> latest = read_latest_pointer(checkpoints_dir);
  std::vector<fs::path> removed;
  for (size_t i = 0; i + keep_last < entries.size(); ++i) {
    const fs::path& path = entries[i].path;
    std::error_code ec;
    if (latest && fs::equivalent(path, *latest, ec)) continue;
    // Renamed away first so that a crash mid-delete never leaves a partial step_<N> directory.
    fs::path doomed = path.string() + ".deleting-" + pid_suffix();
    rename_or_throw(path, doomed);
    fs::remove_all(doomed, ec);
    if (ec) throw_io_error("cannot remove checkpoint", doomed, ec.value());
    removed.push_back(path);
  }
  if (!removed.empty()) fsync_path(checkpoints_dir);
  return removed;
}

std::vector<fs::path> stale_temporaries(const fs::path& checkpoints_dir) {
  std::vector<fs::path> stale_paths;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return stale_paths;
  for (const fs::directory_entry& e : fs::directory_iterator(checkpoints_dir)) {
    const std::string name = e.path().filename().string();
    bool stale = name == "latest.tmp";
    for (const char* marker : {".tmp-", ".deleting-"}) {
      const size_t at = name.rfind(marker);
      if (at == std::string::npos) continue;
      const std::string pid = name.substr(at + std::strlen(marker));
      const bool numeric = !pid.empty() && pid.find_first_not_of("0123456789") == std::string::npos;
      // A live process with that pid may be writing it now (or a reused pid: then it waits for
      // the next start).
      stale = numeric && pid.size() < 10 && (::kill(std::stoi(pid), 0) != 0 && errno == ESRCH);
    }
    if (stale) stale_paths.push_back(e.path());
  }
  return stale_paths;
}

std::vector<fs::path> remove_stale_temporaries(const fs::path& checkpoints_dir) {
  const std::vector<fs::path> stale = stale_temporaries(checkpoints_dir);
  for (const fs::path& p : stale) {
    std::error_code ec;
    fs::remove_all(p, ec);
    if (ec) throw_io_error("cannot remove stale temporary", p, ec.value());
  }
  return stale;
}

fs::path resolve_checkpoint(const fs::path& path) {
  std::error_code ec;
  fs::file_status status = fs::symlink_status(path, ec);
  GENESIS_CHECK(fs::exists(status), IoError, "no checkpoint at '", path.string(), "': the path does not exist");
  if (fs::is_directory(status)) return resolve_directory(path);
  // A pointer: `latest` or any symlink to a checkpoint or to a checkpoints directory.
  return resolve_directory(existing_checkpoint_at(path));
}

}  // namespace genesis::io
