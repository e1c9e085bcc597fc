// File helpers: whole-file reads with clear errors, and atomic writes (temp, fsync, rename) so a
// crash never leaves a half-written checkpoint, manifest or shard file behind.
#pragma once

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

// Writes `contents` to `path` through a temporary file in the same directory.
absl::Status WriteFileAtomic(const std::string& path, std::string_view contents);

// True if something (a file, a directory, a link that resolves) is at `path`.
bool FileExists(const std::string& path);

// Creates the directory and its parents; ok if it exists.
absl::Status MakeDirs(const std::string& path);

}  // namespace strata
