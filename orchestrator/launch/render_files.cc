#include "orchestrator/launch/render_files.h"

#include <unistd.h>

#include <filesystem>

#include <absl/strings/str_cat.h>

#include "services/common/base/files.h"

namespace strata {

absl::Status WriteRenderedFiles(const std::string& out_dir, const RenderedFiles& files) {
  if (out_dir.empty()) return absl::InvalidArgumentError("--out: the output directory is empty");
  // The directory itself first, so that a bad --out is named as given and nothing is written.
  if (absl::Status s = MakeDirs(out_dir); !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the output directory ", out_dir, ": ", s.message()));
  }
  if (::access(out_dir.c_str(), W_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write to the output directory ", out_dir, ": not writable"));
  }
  // Deployment files, meant to be read by the platform's tools and the containers' own user (a
  // compose bind mount keeps the host file's mode), and holding no secret (the run token is a
  // file of its own): readable, unlike the private files of a run directory.
  FileAccessOptions readable;
  readable.mode = 0644;
  for (const auto& [path, contents] : files) {
    const std::filesystem::path full = std::filesystem::path(out_dir) / path;
    const std::string dir = full.parent_path().string();
    if (absl::Status s = MakeDirs(dir, 0755); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create the output directory ", dir, ": ", s.message()));
    }
    if (::access(dir.c_str(), W_OK) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write to the output directory ", dir, ": not writable"));
    }
    if (absl::Status s = WriteFileAtomic(full.string(), contents, readable); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write ", full.string(), ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace strata
