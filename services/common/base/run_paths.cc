#include "services/common/base/run_paths.h"

#include <filesystem>
#include <system_error>

#include <absl/strings/str_cat.h>

namespace strata {
namespace fs = std::filesystem;

namespace {

// True if `path` is `dir` or below it, component by component (so /run2 is not inside /run).
bool IsWithin(const fs::path& path, const fs::path& dir) {
  auto p = path.begin(), d = dir.begin();
  for (; d != dir.end(); ++d, ++p) {
    if (d->empty()) continue;  // a trailing separator gives an empty last component
    if (p == path.end() || *p != *d) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::string> ResolveInRunDir(const std::string& run_dir,
                                            const std::string& requested, absl::string_view what) {
  if (run_dir.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " '", requested,
                     "': this service was started without --run-dir, so it accepts no "
                     "file paths from requests"));
  }
  if (requested.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  if (requested.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, " holds a NUL byte"));
  }
  std::error_code ec;
  // weakly_canonical follows every symlink of the existing prefix and normalises the rest, so
  // the check below sees where the kernel would actually go.
  const fs::path root = fs::weakly_canonical(fs::absolute(run_dir, ec), ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("run directory ", run_dir, " cannot be resolved: ", ec.message()));
  }
  fs::path joined = fs::path(requested);
  if (joined.is_relative()) joined = root / joined;
  const fs::path resolved = fs::weakly_canonical(joined, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", requested, "' cannot be resolved: ", ec.message()));
  }
  if (!IsWithin(resolved, root)) {
    return absl::PermissionDeniedError(absl::StrCat(what, " '", requested, "' resolves to ",
                                                    resolved.string(),
                                                    ", outside the run directory ", root.string()));
  }
  return resolved.string();
}

}  // namespace strata
