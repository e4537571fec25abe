#pragma once
// One process at a time in a directory it writes: a run directory (`genesis train`), the shards of
// `genesis data tokenize`. Two runs sharing one directory would interleave their metrics and
// replace each other's checkpoints, so the second is refused at start with the first one named.
#include <filesystem>
#include <string>
#include <string_view>

namespace genesis::io {

// The lock file inside a locked directory. genesis never deletes it, not even when it empties the
// directory: a process that removed it while holding the lock would let a second one lock a new
// file of the same name, and both would hold "the" lock.
inline constexpr std::string_view kDirLockName = ".genesis.lock";

// An exclusive lock on a directory: flock(LOCK_EX) on DIR/.genesis.lock, held until destruction.
// The kernel releases it when the process ends however it ends, so a killed run leaves no stale
// lock. The file names the holder (pid, host, start time) for the message of the next one.
class DirLock {
 public:
  // Creates `dir` (and its parents) when missing and locks it. When another process holds it,
  // throws UsageError: "<dir> is in use by process N (started <time>): <what_to_do>".
  DirLock(std::filesystem::path dir, std::string_view what_to_do);
  ~DirLock();
  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&&) = delete;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  const std::filesystem::path& dir() const { return dir_; }

  // Throws the UsageError above when another process holds `dir`'s lock; takes nothing and
  // creates nothing. What a launcher checks before it starts the ranks, one of which locks.
  static void check_free(const std::filesystem::path& dir, std::string_view what_to_do);

 private:
  std::filesystem::path dir_;
  int fd_ = -1;
};

// Whether `path` is a directory's lock file (what a listing of the directory's content skips).
bool is_dir_lock_file(const std::filesystem::path& path);
// Whether `dir` has a lock file: some genesis process locked it, now or before.
bool has_dir_lock(const std::filesystem::path& dir);
// Whether `dir` holds nothing but its lock file (a missing directory holds nothing).
bool empty_but_for_lock(const std::filesystem::path& dir);
// Removes everything in `dir` except its lock file: how the holder empties a locked directory.
void clear_locked_dir(const std::filesystem::path& dir);

}  // namespace genesis::io
