#pragma once
// Checkpoints as directories that appear atomically. A checkpoints directory holds
//   step_00000100/  step_00000200/  ...  latest -> step_00000200
// Each checkpoint is written into `<name>.tmp-<pid>` and renamed into place only when complete,
// so a crash leaves either the previous state or the new checkpoint, never a partial one.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace genesis::io {

// Creates `<final_dir>.tmp-<pid>` (and the parent directories) for the caller to fill through
// path(); commit() flushes everything in it and renames it to `final_dir`. Destroyed without
// commit(), the temp directory is removed. Throws IoError when `final_dir` exists, unless
// `replace`: then commit() swaps the new directory in and deletes the old one.
class DirectoryTransaction {
 public:
  explicit DirectoryTransaction(std::filesystem::path final_dir, bool replace = false);
  ~DirectoryTransaction();
  DirectoryTransaction(const DirectoryTransaction&) = delete;
  DirectoryTransaction& operator=(const DirectoryTransaction&) = delete;

  // Where to write: the temp directory before commit(), the final one after.
  const std::filesystem::path& path() const { return committed_ ? final_dir_ : temp_dir_; }
  const std::filesystem::path& final_path() const { return final_dir_; }
  bool committed() const { return committed_; }
  void commit();

 private:
  std::filesystem::path final_dir_;
  std::filesystem::path temp_dir_;
  bool replace_;
  bool committed_ = false;
};

// "step_00000042": the directory name of the checkpoint at `step`.
std::string checkpoint_name(int64_t step);
// The step of a name of the form step_<digits>; nullopt for any other name.
std::optional<int64_t> checkpoint_step(const std::string& name);

struct CheckpointEntry {
  int64_t step;
  std::filesystem::path path;
};
// The step_<digits> directories of `checkpoints_dir`, by increasing step.
std::vector<CheckpointEntry> list_checkpoints(const std::filesystem::path& checkpoints_dir);

// Points `checkpoints_dir/latest` at the checkpoint `name` (which must exist there): a relative
// symlink, or a text file holding the name where symlinks are not supported. Replaced atomically.
void update_latest_pointer(const std::filesystem::path& checkpoints_dir, const std::string& name);
// The checkpoint directory `checkpoints_dir/latest` points at (not checked to exist); nullopt
// when there is no pointer.
std::optional<std::filesystem::path> read_latest_pointer(const std::filesystem::path& checkpoints_dir);

// Deletes all but the `keep_last` checkpoints with the highest steps, never the one `latest`
// points at. Returns the removed directories.
std::vector<std::filesystem::path> prune_checkpoints(const std::filesystem::path& checkpoints_dir, size_t keep_last);

// What interrupted writes and prunes leave in `checkpoints_dir` (`<name>.tmp-<pid>`,
// `<name>.deleting-<pid>` of processes no longer alive, `latest.tmp`).
std::vector<std::filesystem::path> stale_temporaries(const std::filesystem::path& checkpoints_dir);
// Removes the stale_temporaries; returns what it removed. Call before a run writes there.
std::vector<std::filesystem::path> remove_stale_temporaries(const std::filesystem::path& checkpoints_dir);

// The checkpoint directory meant by `path`: a checkpoint directory itself, a `latest` pointer,
// a checkpoints directory (its `latest` pointer, else its highest step) or a run directory
// (its checkpoints directory's). Throws IoError
// naming the path when nothing resolves.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path);

}  // namespace genesis::io
