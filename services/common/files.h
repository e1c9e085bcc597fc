// File helpers: whole-file reads with clear errors, and atomic writes (temp, fsync, rename) so a
// crash never leaves a half-written checkpoint, manifest or shard file behind.
#pragma once

#include <string>
#include <string_view>

#include <absl/status/statusor.h>

namespace strata {

absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes `contents` to `path` through a temporary file in the same directory.
absl::Status WriteFileAtomic(const std::string& path, std::string_view contents);

// Creates the directory and its parents; ok if it exists.
absl::Status MakeDirs(const std::string& path);

}  // namespace strata
