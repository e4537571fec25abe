// Directory locks (io::DirLock): one holder at a time, named in the refusal; released with the
// holder; the lock file survives emptying the directory and hides from listings of its content;
// the run directory takes the lock before it is prepared. tests/cli/test_run_lock.sh runs the
// same against real `genesis train` and `genesis data tokenize` processes.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <optional>

#include "libgenesis/io/checkpoint_dir.h"
#include "libgenesis/io/dir_lock.h"
#include "libgenesis/io/file_util.h"
#include "libgenesis/train/run_dir.h"
#include "tests/testing.h"

using namespace genesis;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

using testing::TempDir;

const std::string kThisProcess = "in use by process " + std::to_string(::getpid()) + " (started ";

}  // namespace

TEST_CASE("a directory lock has one holder, named in the refusal, until it is released", "[cpu][io]") {
  TempDir root;
  const fs::path dir = root / "runs" / "x";
  std::optional<io::DirLock> first;
  first.emplace(dir, "wait for it");
  CHECK(fs::is_directory(dir));
  CHECK(io::has_dir_lock(dir));
  CHECK(io::empty_but_for_lock(dir));
  CHECK_THAT(io::read_file(dir / ".genesis.lock"), Contains("\"pid\":" + std::to_string(::getpid())));

  // flock belongs to the open file, so a second lock of this process is refused as another's is.
  CHECK_THROWS_AS(io::DirLock(dir, "wait for it"), UsageError);
  CHECK_THROWS_WITH(io::DirLock(dir, "wait for it"), Contains(dir.string() + " is " + kThisProcess) &&
                                                         Contains("): wait for it"));
  CHECK_THROWS_WITH(io::DirLock::check_free(dir, "wait"), Contains(kThisProcess));

  first.reset();
  CHECK_NOTHROW(io::DirLock::check_free(dir, "wait"));
  io::DirLock second(dir, "wait for it");
  CHECK(io::has_dir_lock(dir));
}

TEST_CASE("a lock file of a dead holder does not lock, one held by an unnamed process does", "[cpu][io]") {
  TempDir root;
  const fs::path dir = root / "x";
  fs::create_directories(dir);
  // What a SIGKILLed holder leaves: its name, no lock (the kernel released it).
  io::write_file_atomic(dir / ".genesis.lock", R"({"host":"elsewhere","pid":1,"started":0})" "\n");
  { io::DirLock lock(dir, "wait"); }
  io::write_file_atomic(dir / ".genesis.lock", "");
  // Held by a process that wrote no name (flock(1), say): refused, after the wait for a name.
  const int fd = ::open((dir / ".genesis.lock").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  CHECK_THROWS_WITH(io::DirLock(dir, "wait"), Contains(dir.string() + " is in use by another process: wait"));
  ::close(fd);
  CHECK_NOTHROW(io::DirLock(dir, "wait"));
}

TEST_CASE("check_free creates nothing and locks nothing", "[cpu][io]") {
  TempDir root;
  CHECK_NOTHROW(io::DirLock::check_free(root / "missing", "wait"));
  CHECK(!fs::exists(root / "missing"));
  CHECK_NOTHROW(io::DirLock::check_free(root.path(), "wait"));
  CHECK(!io::has_dir_lock(root.path()));
}

TEST_CASE("emptying a locked directory keeps its lock", "[cpu][io]") {
  TempDir root;
  const fs::path dir = root / "x";
  io::DirLock lock(dir, "wait");
  io::write_file_atomic(dir / "metrics.jsonl", "{}\n");
  fs::create_directories(dir / "checkpoints" / "step_00000001");
  CHECK(!io::empty_but_for_lock(dir));
  io::clear_locked_dir(dir);
  CHECK(io::empty_but_for_lock(dir));
  CHECK(io::has_dir_lock(dir));
  CHECK_THROWS_AS(io::DirLock(dir, "wait"), UsageError);
  // A run directory holding only its lock file is no checkpoint.
  CHECK_THROWS_WITH(io::resolve_checkpoint(dir), Contains("the directory is empty"));
}

TEST_CASE("the run directory is locked before it is prepared, refusals come first where none was", "[cpu][train]") {
  TempDir root;
  const fs::path dir = root / "run";
  train::TrainOptions fresh, resume, overwrite;
  resume.resume = true;
  overwrite.overwrite = true;
  // --resume of a directory that does not exist: refused without creating it.
  CHECK_THROWS_WITH(train::lock_run_dir(dir, resume), Contains("--resume: no checkpoint in"));
  CHECK(!fs::exists(dir));
  // Not a run directory: refused without a lock file left in it.
  fs::create_directories(dir);
  io::write_file_atomic(dir / "notes.txt", "mine");
  CHECK_THROWS_WITH(train::lock_run_dir(dir, overwrite), Contains("does not look like a genesis run"));
  CHECK(!io::has_dir_lock(dir));
  fs::remove(dir / "notes.txt");

  std::string note;
  {
    io::DirLock lock = train::lock_run_dir(dir, fresh);
    CHECK(!train::prepare_run_dir(dir, fresh, note));
    io::write_file_atomic(dir / "recipe.toml", "");
    io::write_file_atomic(dir / "metrics.jsonl", "{\"loss\":1.0,\"step\":5}\n");
    // Another run, --resume or --overwrite while it is held: refused naming the holder.
    for (const train::TrainOptions& o : {fresh, resume, overwrite})
      CHECK_THROWS_WITH(train::lock_run_dir(dir, o), Contains(kThisProcess) && Contains("--out DIR"));
    // The holder's own --overwrite empties everything but the lock.
    CHECK(!train::prepare_run_dir(dir, overwrite, note));
    CHECK(io::empty_but_for_lock(dir));
  }
  // Released: a directory holding only a start (and the lock file) starts again from step 0.
  io::write_file_atomic(dir / "recipe.toml", "");
  {
    io::DirLock lock = train::lock_run_dir(dir, resume);
    CHECK(!train::prepare_run_dir(dir, resume, note));
    CHECK_THAT(note, Contains("has no checkpoint yet; starting from step 0"));
  }
  // So does one that never had a lock file, killed inside its first checkpoint write: the
  // refusals made before the lock count its temporaries as gone, as the run then removes them.
  const fs::path killed = root / "killed";
  fs::create_directories(killed / "checkpoints" / "step_00000003.tmp-3999999");
  io::write_file_atomic(killed / "recipe.toml", "");
  io::DirLock lock = train::lock_run_dir(killed, resume);
  io::remove_stale_temporaries(killed / "checkpoints");
  CHECK(!train::prepare_run_dir(killed, resume, note));
}
