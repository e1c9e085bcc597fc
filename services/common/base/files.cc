#include "services/common/base/files.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <vector>

#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>

namespace strata {
namespace {
namespace fs = std::filesystem;

absl::Status ErrnoError(absl::string_view what, const std::string& path, int error = 0) {
  if (error == 0) error = errno;
  return absl::Status(error == ENOENT ? absl::StatusCode::kNotFound : absl::StatusCode::kInternal,
                      absl::StrCat(what, " ", path, ": ", std::strerror(error)));
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

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = other.fd_;
      other.fd_ = -1;
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// True if `path` is `dir` or below it, component by component.
bool IsWithin(const fs::path& path, const fs::path& dir) {
  auto p = path.begin(), d = dir.begin();
  for (; d != dir.end(); ++d, ++p) {
    if (d->empty()) continue;
    if (p == path.end() || *p != *d) return false;
  }
  return true;
}

// The directory that holds `path`'s last component, opened, and that component's name.
struct Parent {
  Fd dir;
  std::string leaf;
};

absl::StatusOr<Parent> OpenParent(const std::string& path, const FileAccessOptions& options,
                                  bool create_dirs) {
  if (path.empty() || path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("bad file name '", path, "'"));
  }
  Parent parent;
  if (options.beneath.empty()) {
    const fs::path p(path);
    parent.leaf = p.filename().string();
    std::string dir = p.parent_path().string();
    if (dir.empty()) dir = ".";
    parent.dir = Fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (parent.dir.get() < 0) return ErrnoError("cannot open", path);
  } else {
    std::error_code ec;
    const fs::path root_given = fs::absolute(options.beneath, ec).lexically_normal();
    const fs::path root_real = fs::weakly_canonical(options.beneath, ec);
    const fs::path p = fs::absolute(path, ec).lexically_normal();
    fs::path relative;
    if (!root_real.empty() && IsWithin(p, root_real)) {
      relative = p.lexically_relative(root_real);
    } else if (IsWithin(p, root_given)) {
      relative = p.lexically_relative(root_given);
    } else {
      return absl::PermissionDeniedError(
          absl::StrCat(path, " is outside the directory ", options.beneath));
    }
    std::vector<std::string> parts;
    for (const fs::path& part : relative) {
      const std::string s = part.string();
      if (s.empty() || s == ".") continue;
      if (s == "..") {
        return absl::PermissionDeniedError(
            absl::StrCat(path, " is outside the directory ", options.beneath));
      }
      parts.push_back(s);
    }
    if (parts.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " names no file"));
    parent.dir = Fd(::open(options.beneath.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (parent.dir.get() < 0) return ErrnoError("cannot open directory", options.beneath);
    std::string walked = options.beneath;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      absl::StrAppend(&walked, "/", parts[i]);
      int fd = ::openat(parent.dir.get(), parts[i].c_str(),
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0 && errno == ENOENT && create_dirs) {
        if (::mkdirat(parent.dir.get(), parts[i].c_str(), options.dir_mode) != 0 &&
            errno != EEXIST) {
          return ErrnoError("cannot create directory", walked);
        }
        fd = ::openat(parent.dir.get(), parts[i].c_str(),
                      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      }
      if (fd < 0) {
        const int error = errno;
        struct stat st;
        if (::fstatat(parent.dir.get(), parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISLNK(st.st_mode)) {
          return absl::PermissionDeniedError(absl::StrCat(
              walked, " is a symbolic link; links are not followed below ", options.beneath));
        }
        return ErrnoError("cannot open", path, error);
      }
      parent.dir = Fd(fd);
    }
    parent.leaf = parts.back();
  }
  if (parent.leaf.empty() || parent.leaf == "." || parent.leaf == "..") {
    return absl::InvalidArgumentError(absl::StrCat(path, " names no file"));
  }
  return parent;
}

absl::Status NotRegular(const std::string& path, const struct stat& st) {
  if (S_ISLNK(st.st_mode)) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read ", path, ": a symbolic link, which is not followed here"));
  }
  return absl::InvalidArgumentError(absl::StrCat("cannot read ", path, ": not a regular file"));
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  FileAccessOptions options;
  options.max_bytes = max_bytes;
  return ReadFile(path, options);
}

absl::StatusOr<std::string> ReadFile(const std::string& path, const FileAccessOptions& options) {
  const size_t max_bytes = options.max_bytes;
  absl::StatusOr<Parent> parent = OpenParent(path, options, /*create_dirs=*/false);
  if (!parent.ok()) return parent.status();
  // stat first: merely opening some devices has effects, and opening a FIFO without O_NONBLOCK
  // waits for a writer for ever. Below a confined directory the last component is not followed
  // either.
  const int follow = options.beneath.empty() ? 0 : AT_SYMLINK_NOFOLLOW;
  struct stat st;
  if (::fstatat(parent->dir.get(), parent->leaf.c_str(), &st, follow) != 0) {
    return ErrnoError("cannot open", path);
  }
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st);
  // O_NONBLOCK and the fstat below close the race with a FIFO or a link swapped in after the stat.
  const int nofollow = options.beneath.empty() ? 0 : O_NOFOLLOW;
  Fd fd(::openat(parent->dir.get(), parent->leaf.c_str(),
                 O_RDONLY | O_NONBLOCK | O_CLOEXEC | nofollow));
  if (fd.get() < 0) {
    if (errno == ELOOP && nofollow != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot read ", path, ": a symbolic link, which is not followed here"));
    }
    return ErrnoError("cannot open", path);
  }
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("cannot stat", path);
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot read ", path, ": ", st.st_size, " bytes, the limit is ", max_bytes));
  }
  // st_size is a hint (a file may grow, /proc files report 0): read to EOF, but never past the cap.
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot read", path);
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot read ", path, ": more than the limit of ", max_bytes, " bytes"));
    }
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

absl::Status WriteFileAtomic(const std::string& path, std::string_view contents,
                             const FileAccessOptions& options) {
  absl::StatusOr<Parent> parent = OpenParent(path, options, /*create_dirs=*/true);
  if (!parent.ok()) return parent.status();
  // A random name created exclusively: a link or file planted under a predictable name would
  // otherwise have been followed and truncated.
  char random[8];
  if (::getrandom(random, sizeof random, 0) != static_cast<ssize_t>(sizeof random)) {
    return ErrnoError("cannot draw a temporary name for", path);
  }
  const std::string tmp_leaf =
      absl::StrCat(".", parent->leaf, ".tmp.", absl::BytesToHexString({random, sizeof random}));
  const std::string tmp = absl::StrCat(path, " (temporary ", tmp_leaf, ")");
  Fd fd(::openat(parent->dir.get(), tmp_leaf.c_str(),
                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, options.mode));
  if (fd.get() < 0) return ErrnoError("cannot create", tmp);
  absl::Status status = WriteAll(fd.get(), contents, tmp);
  if (status.ok() && ::fsync(fd.get()) != 0) status = ErrnoError("cannot fsync", tmp);
  if (::close(fd.Release()) != 0 && status.ok()) status = ErrnoError("cannot close", tmp);
  if (status.ok() && ::renameat(parent->dir.get(), tmp_leaf.c_str(), parent->dir.get(),
                                parent->leaf.c_str()) != 0) {
    status = ErrnoError("cannot rename into", path);
  }
  if (!status.ok()) {
    ::unlinkat(parent->dir.get(), tmp_leaf.c_str(), 0);
    return status;
  }
  // Make the rename itself durable.
  ::fsync(parent->dir.get());
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& path, mode_t mode) {
  if (path.empty()) return absl::InvalidArgumentError("cannot create a directory with no name");
  fs::path so_far;
  for (const fs::path& part : fs::path(path)) {
    so_far /= part;
    const std::string s = so_far.string();
    if (part.empty() || part == "/" || part == "." || part == "..") continue;
    if (::mkdir(s.c_str(), mode) == 0) continue;
    const int error = errno;
    struct stat st;
    if (error == EEXIST && ::stat(s.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    return absl::InternalError(
        absl::StrCat("cannot create directory ", s, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace strata
