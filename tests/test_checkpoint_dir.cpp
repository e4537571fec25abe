// Checkpoint directories: atomic commit, abort without a trace, replace, the `latest` pointer,
// listing and pruning by step, and resolving what a user passes as "the checkpoint".
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/io/safetensors.h"
#include "tests/testing.h"

using namespace genesis;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

using testing::TempDir;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  REQUIRE(out.good());
}

std::vector<std::string> entries_of(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A committed checkpoint holding one file.
void make_checkpoint(const fs::path& dir, const std::string& content = "x") {
  io::DirectoryTransaction transaction(dir);
  write_text(transaction.path() / "state.txt", content);
  transaction.commit();
}

}  // namespace

TEST_CASE("checkpoint transaction commits a directory atomically", "[cpu][io]") {
  TempDir root;
  fs::path final_dir = root / "run" / "checkpoints" / "step_00000010";
  io::DirectoryTransaction transaction(final_dir);
  // The work happens in a temp directory next to the final one (same file system, so rename is atomic).
  CHECK(transaction.path() == fs::path(final_dir.string() + ".tmp-" + std::to_string(::getpid())));
  CHECK(fs::is_directory(transaction.path()));
  CHECK(!fs::exists(final_dir));
  write_text(transaction.path() / "a.txt", "alpha");
  fs::create_directory(transaction.path() / "nested");
  write_text(transaction.path() / "nested" / "b.txt", "beta");
  transaction.commit();

  CHECK(transaction.committed());
  CHECK(transaction.path() == final_dir);
  CHECK(io::read_file(final_dir / "a.txt") == "alpha");
  CHECK(io::read_file(final_dir / "nested" / "b.txt") == "beta");
  CHECK(entries_of(final_dir.parent_path()) == std::vector<std::string>{"step_00000010"});
  CHECK_THROWS_AS(transaction.commit(), IoError);
}

TEST_CASE("checkpoint transaction without commit leaves no trace", "[cpu][io]") {
  TempDir root;
  fs::path final_dir = root / "step_00000001";
  {
    io::DirectoryTransaction transaction(final_dir);
    write_text(transaction.path() / "partial.bin", "half written");
  }
  CHECK(entries_of(root.path()).empty());
  // Also when the writer fails with an exception.
  try {
    io::DirectoryTransaction transaction(final_dir);
    write_text(transaction.path() / "partial.bin", "half written");
    throw ValueError("writer failed");
  } catch (const ValueError&) {
  }
  CHECK(entries_of(root.path()).empty());
  // A temp directory left by a crashed process with the same pid is cleared.
  fs::path stale = final_dir.string() + ".tmp-" + std::to_string(::getpid());
  fs::create_directory(stale);
  write_text(stale / "junk", "junk");
  make_checkpoint(final_dir);
  CHECK(entries_of(root.path()) == std::vector<std::string>{"step_00000001"});
  CHECK(entries_of(final_dir) == std::vector<std::string>{"state.txt"});
}

TEST_CASE("checkpoint transaction refuses an existing directory unless told to replace it", "[cpu][io]") {
  TempDir root;
  fs::path final_dir = root / "step_00000005";
  make_checkpoint(final_dir, "old");
  write_text(final_dir / "old_only.txt", "stale");

  CHECK_THROWS_AS(io::DirectoryTransaction(final_dir), IoError);
  CHECK_THROWS_WITH(io::DirectoryTransaction(final_dir), Contains(final_dir.string()) && Contains("already exists"));
  CHECK_THROWS_AS(io::DirectoryTransaction(final_dir.string() + "/"), IoError);

  {
    io::DirectoryTransaction transaction(final_dir, /*replace=*/true);
    write_text(transaction.path() / "state.txt", "new");
    // Until commit, the old checkpoint is intact.
    CHECK(io::read_file(final_dir / "state.txt") == "old");
    transaction.commit();
  }
  CHECK(io::read_file(final_dir / "state.txt") == "new");
  CHECK(!fs::exists(final_dir / "old_only.txt"));
  CHECK(entries_of(root.path()) == std::vector<std::string>{"step_00000005"});

  // Someone else creating the directory between start and commit is caught too.
  fs::path contested = root / "step_00000006";
  io::DirectoryTransaction transaction(contested);
  fs::create_directory(contested);
  write_text(contested / "theirs", "theirs");
  CHECK_THROWS_WITH(transaction.commit(), Contains("meanwhile"));
  CHECK(io::read_file(contested / "theirs") == "theirs");
}

TEST_CASE("checkpoint names and listing by step", "[cpu][io]") {
  CHECK(io::checkpoint_name(0) == "step_00000000");
  CHECK(io::checkpoint_name(42) == "step_00000042");
  CHECK(io::checkpoint_name(123456789) == "step_123456789");
  CHECK_THROWS_AS(io::checkpoint_name(-1), ValueError);
  CHECK(io::checkpoint_step("step_00000042") == 42);
  CHECK(io::checkpoint_step("step_123456789") == 123456789);
  CHECK(!io::checkpoint_step("step_").has_value());
  CHECK(!io::checkpoint_step("step_12a").has_value());
  CHECK(!io::checkpoint_step("step_-1").has_value());
  CHECK(!io::checkpoint_step("step_00000001.tmp-7").has_value());
  CHECK(!io::checkpoint_step("step_99999999999999999999999").has_value());
  CHECK(!io::checkpoint_step("latest").has_value());

  TempDir root;
  for (int64_t step : {10, 2, 123456789, 1}) fs::create_directory(root / io::checkpoint_name(step));
  fs::create_directory(root / "step_abc");
  fs::create_directory(root / "step_00000005.tmp-12");
  write_text(root / "step_00000007", "a file, not a checkpoint");
  write_text(root / "latest", "step_00000010\n");
  std::vector<io::CheckpointEntry> entries = io::list_checkpoints(root.path());
  std::vector<int64_t> steps;
  for (const auto& entry : entries) steps.push_back(entry.step);
  CHECK(steps == std::vector<int64_t>{1, 2, 10, 123456789});
  CHECK(entries[2].path == root / "step_00000010");
  CHECK_THROWS_AS(io::list_checkpoints(root / "missing"), IoError);
}

TEST_CASE("latest pointer is replaced atomically and read back", "[cpu][io]") {
  TempDir root;
  CHECK(!io::read_latest_pointer(root.path()).has_value());
  make_checkpoint(root / "step_00000010");
  make_checkpoint(root / "step_00000020");

  io::update_latest_pointer(root.path(), "step_00000010");
  CHECK(fs::is_symlink(root / "latest"));
  CHECK(fs::read_symlink(root / "latest") == "step_00000010");  // relative: the directory can move
  CHECK(io::read_latest_pointer(root.path()) == root / "step_00000010");

  io::update_latest_pointer(root.path(), "step_00000020");
  CHECK(io::read_latest_pointer(root.path()) == root / "step_00000020");
  CHECK(entries_of(root.path()) == std::vector<std::string>{"latest", "step_00000010", "step_00000020"});

  CHECK_THROWS_WITH(io::update_latest_pointer(root.path(), "step_00000030"), Contains("step_00000030"));
  CHECK_THROWS_AS(io::update_latest_pointer(root.path(), "../elsewhere"), ValueError);
  CHECK(io::read_latest_pointer(root.path()) == root / "step_00000020");

  // Where symlinks are unavailable the pointer is a text file; it reads the same.
  fs::remove(root / "latest");
  write_text(root / "latest", "step_00000010\n");
  CHECK(io::read_latest_pointer(root.path()) == root / "step_00000010");
  // Updating replaces the text file.
  io::update_latest_pointer(root.path(), "step_00000020");
  CHECK(io::read_latest_pointer(root.path()) == root / "step_00000020");
}

TEST_CASE("prune keeps the newest checkpoints and the one latest points at", "[cpu][io]") {
  TempDir root;
  for (int64_t step : {1, 2, 3, 4, 5}) make_checkpoint(root / io::checkpoint_name(step));
  io::update_latest_pointer(root.path(), io::checkpoint_name(1));  // e.g. after a rollback

  std::vector<fs::path> removed = io::prune_checkpoints(root.path(), 2);
  CHECK(removed == std::vector<fs::path>{root / "step_00000002", root / "step_00000003"});
  CHECK(entries_of(root.path()) ==
        std::vector<std::string>{"latest", "step_00000001", "step_00000004", "step_00000005"});
  CHECK(io::prune_checkpoints(root.path(), 2).empty());
  CHECK(io::prune_checkpoints(root.path(), 10).empty());

  io::update_latest_pointer(root.path(), io::checkpoint_name(5));
  removed = io::prune_checkpoints(root.path(), 0);
  CHECK(removed == std::vector<fs::path>{root / "step_00000001", root / "step_00000004"});
  CHECK(entries_of(root.path()) == std::vector<std::string>{"latest", "step_00000005"});
}

TEST_CASE("resolve_checkpoint accepts a checkpoint or a latest pointer or a checkpoints directory", "[cpu][io]") {
  TempDir root;
  fs::path ckpts = root / "checkpoints";
  make_checkpoint(ckpts / "step_00000100");
  make_checkpoint(ckpts / "step_00000200");

  // No pointer yet: the highest step.
  CHECK(io::resolve_checkpoint(ckpts) == ckpts / "step_00000200");
  io::update_latest_pointer(ckpts, "step_00000100");
  CHECK(io::resolve_checkpoint(ckpts) == ckpts / "step_00000100");
  CHECK(io::resolve_checkpoint(ckpts / "latest") == ckpts / "step_00000100");
  CHECK(io::resolve_checkpoint(ckpts / "step_00000200") == ckpts / "step_00000200");
  fs::create_directory_symlink(ckpts, root / "link_to_checkpoints");
  CHECK(fs::equivalent(io::resolve_checkpoint(root / "link_to_checkpoints"), ckpts / "step_00000100"));

  // A text-file pointer.
  fs::remove(ckpts / "latest");
  write_text(ckpts / "latest", "step_00000200\n");
  CHECK(io::resolve_checkpoint(ckpts) == ckpts / "step_00000200");
  CHECK(io::resolve_checkpoint(ckpts / "latest") == ckpts / "step_00000200");

  CHECK_THROWS_WITH(io::resolve_checkpoint(root / "nope"),
                    Contains((root / "nope").string()) && Contains("does not exist"));
  fs::create_directory(root / "empty");
  CHECK_THROWS_WITH(io::resolve_checkpoint(root / "empty"), Contains("empty"));
  write_text(ckpts / "latest", "step_00000300\n");
  CHECK_THROWS_WITH(io::resolve_checkpoint(ckpts), Contains((ckpts / "latest").string()) && Contains("step_00000300"));
  write_text(root / "notes.txt", "two\nlines\n");
  CHECK_THROWS_AS(io::resolve_checkpoint(root / "notes.txt"), IoError);
}

TEST_CASE("a training checkpoint end to end with safetensors in a transaction then latest and resolve", "[cpu][io]") {
  TempDir root;
  fs::path ckpts = root / "checkpoints";
  Tensor weight = testing::rand_values({4, 3});
  for (int64_t step : {100, 200, 300}) {
    io::DirectoryTransaction transaction(ckpts / io::checkpoint_name(step));
    io::save_safetensors(transaction.path() / "model.safetensors", {{"w", weight * double(step)}},
                         {{"step", std::to_string(step)}});
    transaction.commit();
    io::update_latest_pointer(ckpts, io::checkpoint_name(step));
    io::prune_checkpoints(ckpts, 2);
  }
  CHECK(entries_of(ckpts) == std::vector<std::string>{"latest", "step_00000200", "step_00000300"});
  io::SafetensorsFile file(io::resolve_checkpoint(ckpts) / "model.safetensors");
  CHECK(file.metadata().at("step") == "300");
  testing::require_close(file.tensor("w"), weight * 300.0);
}

// Regression (issue 14): a write or prune killed midway left step_N.tmp-PID/ (and
// .deleting-PID/) directories forever. A run's start removes those of dead processes.
TEST_CASE("stale checkpoint temporaries of dead processes are removed", "[cpu][io]") {
  TempDir root;
  const fs::path dir = root.path();
  // 4194399 is above Linux's largest pid (2^22): no such process.
  auto named = [](std::string base, const std::string& pid) { return base.append(pid); };
  const std::string tmp_dead = named("step_00000004.tmp-", "4194399");
  const std::string deleting_dead = named("step_00000001.deleting-", "4194399");
  const std::string tmp_alive = named("step_00000006.tmp-", std::to_string(::getpid()));
  for (const std::string& name :
       std::vector<std::string>{"step_00000002", tmp_dead, deleting_dead, tmp_alive, "notes.tmp-x"}) {
    fs::create_directories(dir / name);
    std::ofstream(dir / name / "model.safetensors") << "x";
  }
  std::ofstream(dir / "latest.tmp") << "step_00000002";
  const std::vector<fs::path> removed = io::remove_stale_temporaries(dir);
  CHECK(removed.size() == 3);
  CHECK(!fs::exists(dir / tmp_dead));
  CHECK(!fs::exists(dir / deleting_dead));
  CHECK(!fs::exists(dir / "latest.tmp"));
  CHECK(fs::exists(dir / "step_00000002"));
  CHECK(fs::exists(dir / tmp_alive));      // its writer may still be running
  CHECK(fs::exists(dir / "notes.tmp-x"));  // not a name genesis writes
  CHECK(io::remove_stale_temporaries(dir / "missing").empty());
}
