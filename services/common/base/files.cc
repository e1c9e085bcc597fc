#include "services/common/base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include <absl/strings/str_cat.h>

namespace strata {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::Status(errno == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kInternal,
                      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  // stat first: merely opening some devices has effects, and opening a FIFO without O_NONBLOCK
  // waits for a writer for ever.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoError("cannot open", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path, ": not a regular file"));
  }
  // O_NONBLOCK and the fstat below close the race with a FIFO swapped in after the stat.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open", path);
  absl::Status status;
  std::string out;
  if (::fstat(fd, &st) != 0) {
    status = ErrnoError("cannot stat", path);
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::InvalidArgumentError(absl::StrCat("cannot read ", path, ": not a regular file"));
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    status = absl::ResourceExhaustedError(
        absl::StrCat("cannot read ", path, ": ", st.st_size, " bytes, the limit is ", max_bytes));
  } else {
    // st_size is a hint (a file may grow, /proc files report 0): read to EOF, but never past
    // the cap.
    out.reserve(static_cast<size_t>(st.st_size));
    char buffer[1 << 16];
    for (;;) {
      ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n < 0) {
        if (errno == EINTR) continue;
        status = ErrnoError("cannot read", path);
        break;
      }
      if (n == 0) break;
      if (out.size() + static_cast<size_t>(n) > max_bytes) {
        status = absl::ResourceExhaustedError(
            absl::StrCat("cannot read ", path, ": more than the limit of ", max_bytes, " bytes"));
        break;
      }
      out.append(buffer, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  if (!status.ok()) return status;
  return out;
}

absl::Status WriteFileAtomic(const std::string& path, std::string_view contents) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  absl::Status status = WriteAll(fd, contents, tmp);
  if (status.ok() && ::fsync(fd) != 0) status = ErrnoError("cannot fsync", tmp);
  if (::close(fd) != 0 && status.ok()) status = ErrnoError("cannot close", tmp);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoError("cannot rename into", path);
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  // Make the rename itself durable.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create directory ", path, ": ", ec.message()));
  return absl::OkStatus();
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace strata
