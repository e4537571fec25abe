#include "libgenesis/io/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <ctime>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "libgenesis/core/error.h"
#include "libgenesis/io/file_util.h"

namespace genesis::io {

namespace fs = std::filesystem;

namespace {

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof(name) - 1) == 0 ? std::string(name) : std::string();
}

// "process N (started <local time>)" from the lock file's content; nullopt when it names no live
// process: the holder has the lock but has not written its name yet, or the name is a previous
// holder's. A process of another host (a run directory on a shared file system) is taken to be live.
std::optional<std::string> live_holder(int fd) {
  std::string text(4096, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  if (n <= 0) return std::nullopt;
  text.resize(static_cast<size_t>(n));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer() || !j.contains("host") ||
      !j["host"].is_string() || !j.contains("started") || !j["started"].is_number_integer())
    return std::nullopt;
  const int64_t pid = j["pid"].get<int64_t>();
  const std::string host = j["host"].get<std::string>();
  const bool here = host == host_name();
  if (here && (pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH))) return std::nullopt;
  const time_t started = j["started"].get<int64_t>();
  tm parts{};
  char when[32] = "an unknown time";
  if (localtime_r(&started, &parts)) std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &parts);
  return "process " + std::to_string(pid) + (here ? "" : " on " + host) + " (started " + when + ")";
}

// flock(operation | LOCK_NB) on fd. Returns nullopt once it holds, else who holds it. A holder
// that has not named itself yet, or a process that only probes the lock (check_free), is given
// half a second to do so or let go, which keeps a refusal "at once" and its message exact.
std::optional<std::string> lock_or_holder(int fd, const fs::path& path, int operation) {
  for (int attempt = 0;; ++attempt) {
    if (::flock(fd, operation | LOCK_NB) == 0) return std::nullopt;
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) throw_io_error("cannot lock", path, errno);
    if (std::optional<std::string> holder = live_holder(fd)) return holder;
    if (attempt == 50) return "another process";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

[[noreturn]] void throw_in_use(const fs::path& dir, const std::string& holder, std::string_view what_to_do) {
  GENESIS_THROW(UsageError, dir.string(), " is in use by ", holder, ": ", what_to_do);
}

}  // namespace

DirLock::DirLock(fs::path dir, std::string_view what_to_do) : dir_(std::move(dir)) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw_io_error("cannot create directory", dir_, ec.value());
  const fs::path path = dir_ / kDirLockName;
  // O_CLOEXEC: a program the holder starts must not keep the lock after the holder is gone.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_io_error("cannot open the lock file", path, errno);
  try {
    if (std::optional<std::string> holder = lock_or_holder(fd_, path, LOCK_EX)) throw_in_use(dir_, *holder, what_to_do);
    // This process's name, for the message of the next one that tries.
    const nlohmann::json me{{"pid", ::getpid()}, {"host", host_name()}, {"started", int64_t{std::time(nullptr)}}};
    const std::string name = me.dump() + "\n";
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, name.data(), name.size(), 0) != static_cast<ssize_t>(name.size()))
      throw_io_error("cannot write", path, errno);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

DirLock::DirLock(DirLock&& other) noexcept : dir_(std::move(other.dir_)), fd_(std::exchange(other.fd_, -1)) {}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (see kDirLockName)
}

void DirLock::check_free(const fs::path& dir, std::string_view what_to_do) {
  const fs::path path = dir / kDirLockName;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // never locked; a lock file that cannot be read is reported by the lock itself
  // A shared lock: probes do not refuse each other, only a holder.
  std::optional<std::string> holder;
  try {
    holder = lock_or_holder(fd, path, LOCK_SH);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (holder) throw_in_use(dir, *holder, what_to_do);
}

bool is_dir_lock_file(const fs::path& path) { return path.filename() == kDirLockName; }

bool has_dir_lock(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / kDirLockName, ec);
}

bool empty_but_for_lock(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return !fs::exists(dir, ec);
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (!is_dir_lock_file(e.path())) return false;
  return true;
}

void clear_locked_dir(const fs::path& dir) {
  std::vector<fs::path> doomed;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (!is_dir_lock_file(e.path())) doomed.push_back(e.path());
  for (const fs::path& p : doomed) {
    std::error_code ec;
    fs::remove_all(p, ec);
    if (ec) throw_io_error("cannot remove", p, ec.value());
  }
}

}  // namespace genesis::io
