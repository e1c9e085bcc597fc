// Paths named by a request, confined to the service's run directory.
//
// A gRPC caller may name files (SaveCheckpoint, LoadCheckpoint, Evaluate's checkpoint, the
// sharder's config and plan directory). The service only ever needs files of its run, so every
// such path is resolved against --run-dir and refused if it leaves it: after lexical
// normalisation ("..") and after following symlinks, so neither "../../etc/shadow" nor a link in
// the run directory pointing at /dev/zero gets through. Paths the operator gives on the command
// line (--init-checkpoint, --config) are trusted and do not pass through here.
#pragma once

#include <string>

#include <absl/status/statusor.h>
#include <absl/strings/string_view.h>

namespace strata {

// The absolute, symlink-free form of `requested` (relative paths are taken from `run_dir`), or
//   FAILED_PRECONDITION  `run_dir` is empty (the service was started without --run-dir),
//   INVALID_ARGUMENT     `requested` is empty or holds a NUL byte,
//   PERMISSION_DENIED    the resolved path is not inside `run_dir`.
// `what` names the request field for the message ("SaveCheckpoint path"). Components that do not
// exist yet are allowed (a checkpoint to be written); the existing prefix is resolved.
absl::StatusOr<std::string> ResolveInRunDir(const std::string& run_dir,
                                            const std::string& requested, absl::string_view what);

}  // namespace strata
