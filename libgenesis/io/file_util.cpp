#include "libgenesis/io/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace genesis::io {

namespace fs = std::filesystem;

void throw_io_error(std::string_view what, const fs::path& path, int err) {
  GENESIS_THROW(IoError, what, " '", path.string(), "': ", std::error_code(err, std::generic_category()).message());
}

namespace {

int open_or_throw(const fs::path& path, int flags, std::string_view what, mode_t mode = 0) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_io_error(what, path, errno);
  return fd;
}

void fsync_fd(int fd, const fs::path& path) {
  if (::fsync(fd) != 0) {
    int err = errno;
    // Some file systems cannot sync directories; that is no reason to fail the write.
    if (err == EINVAL || err == EROFS) return;
    ::close(fd);
    throw_io_error("cannot fsync", path, err);
  }
}

}  // namespace

void fsync_path(const fs::path& path) {
  int fd = open_or_throw(path, O_RDONLY, "cannot open for fsync");
  fsync_fd(fd, path);
  ::close(fd);
}

void fsync_parent(const fs::path& path) {
  fs::path parent = path.parent_path();
  fsync_path(parent.empty() ? fs::path(".") : parent);
}

void fsync_tree(const fs::path& root) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    fs::file_status status = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_regular_file(status) || fs::is_directory(status)) fsync_path(it->path());
  }
  if (ec) throw_io_error("cannot list", root, ec.value());
  fsync_path(root);
}

AtomicFile::AtomicFile(fs::path path) : path_(std::move(path)), temp_path_(path_.string() + ".tmp") {
  fd_ = open_or_throw(temp_path_, O_WRONLY | O_CREAT | O_TRUNC, "cannot create", 0644);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t nbytes) {
  GENESIS_CHECK(fd_ >= 0, IoError, "write to '", path_.string(), "' after commit");
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    ssize_t n = ::write(fd_, p, nbytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_io_error("cannot write", temp_path_, errno);
    }
    p += n;
    nbytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t nbytes) {
  GENESIS_CHECK(fd_ >= 0, IoError, "write to '", path_.string(), "' after commit");
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    ssize_t n = ::pwrite(fd_, p, nbytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_io_error("cannot write", temp_path_, errno);
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    nbytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  GENESIS_CHECK(fd_ >= 0, IoError, "'", path_.string(), "' was already committed");
  if (::fsync(fd_) != 0) throw_io_error("cannot fsync", temp_path_, errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(temp_path_.c_str());
    throw_io_error("cannot close", temp_path_, err);
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(temp_path_.c_str());
    throw_io_error("cannot rename '" + temp_path_.string() + "' to", path_, err);
  }
  fsync_parent(path_);
}

void write_file_atomic(const fs::path& path, std::string_view content) {
  AtomicFile file(path);
  file.write(content.data(), content.size());
  file.commit();
}

size_t regular_file_size(int fd, const fs::path& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_io_error("cannot stat", path, errno);
  GENESIS_CHECK(S_ISREG(st.st_mode), IoError, path.string(), " is not a regular file (",
                S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket",
                "); give the path of a file");
  return static_cast<size_t>(st.st_size);
}

std::string read_file(const fs::path& path, size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer before we can refuse it.
  int fd = open_or_throw(path, O_RDONLY | O_NONBLOCK, "cannot open");
  size_t size = 0;
  try {
    size = regular_file_size(fd, path);
    GENESIS_CHECK(size <= max_bytes, IoError, path.string(), " is ", size, " bytes, more than the ", max_bytes,
                  " this file may have; is it the right path?");
  } catch (...) {
    ::close(fd);
    throw;
  }
  std::string content;
  content.reserve(size);
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw_io_error("cannot read", path, err);
    }
    if (n == 0) break;
    content.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return content;
}

}  // namespace genesis::io
