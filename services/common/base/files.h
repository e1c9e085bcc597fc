// File helpers: whole-file reads with clear errors, and atomic writes (temp, fsync, rename) so a
// crash never leaves a half-written checkpoint, manifest or shard file behind.
//
// Run directories are shared (every container of a compose or Kubernetes job mounts the same
// volume), so anything that can write there may plant a symlink where a service is about to
// create or open a file. The writes therefore create their temporary file exclusively, without
// following a link, under an unpredictable name, mode 0600; and a path confined to a directory
// (`beneath`) is opened component by component from a descriptor of that directory, none of the
// components below it followed if it is a link, so a link swapped in after a check redirects
// nothing.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

#include <absl/status/statusor.h>

namespace strata {

// A whole-file read is only ever meant for a checkpoint, a job spec or a small index: 4 GiB is
// far above any of them and far below what would exhaust the machine.
inline constexpr size_t kMaxReadFileBytes = size_t{4} << 30;

// Reads a regular file of at most `max_bytes`. Anything else (a device such as /dev/zero, a
// FIFO, a directory) is refused with INVALID_ARGUMENT before a byte is read, and a file above the
// cap with RESOURCE_EXHAUSTED, so that a path from a request can neither block the reading thread
// nor grow the process without bound.
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes = kMaxReadFileBytes);

// Where a read or write may go and what it creates.
struct FileAccessOptions {
  // When not empty, `path` must lie inside this directory (an absolute path, or one relative to
  // the working directory), and no component of `path` below it may be a symlink: each is opened
  // with O_NOFOLLOW relative to the descriptor of its parent. A link anywhere below is refused
  // with PERMISSION_DENIED naming it. The directory's own path is the operator's and is followed.
  std::string beneath;
  // Reads: the most bytes accepted (RESOURCE_EXHAUSTED above it).
  size_t max_bytes = kMaxReadFileBytes;
  // Writes: the mode of the file created (the umask still applies). 0600 by default: a run's
  // checkpoints hold the model that the run token protects.
  mode_t mode = 0600;
  // Writes under `beneath`: missing directories below it are created with this mode.
  mode_t dir_mode = 0700;
};

// True if something (a file, a directory, a link that resolves) is at `path`.
bool FileExists(const std::string& path);

absl::StatusOr<std::string> ReadFile(const std::string& path, const FileAccessOptions& options);

// Writes `contents` to `path` through a temporary file in the same directory: created with
// O_EXCL | O_NOFOLLOW under a random name, written, fsynced and renamed over `path` (a rename
// replaces a link at `path`, it never writes through it).
absl::Status WriteFileAtomic(const std::string& path, std::string_view contents,
                             const FileAccessOptions& options = {});

// Creates the directory and its parents with `mode` (0700 by default: a run directory holds the
// model and the logs of a run, for its user only); ok if it exists (its mode is left alone).
absl::Status MakeDirs(const std::string& path, mode_t mode = 0700);

}  // namespace strata
