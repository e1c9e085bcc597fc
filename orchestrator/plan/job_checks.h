// What `strata validate` and `strata run` check beyond the schema of
// services/common/config/job_spec.h: facts about the machine and the model that the parser cannot
// know (the data files exist, there are at least as many model tensors as parameter servers, an
// at_fraction switch comes before training ends, the launcher is one `run` can drive). Every
// problem is one line in the parser's form ("FILE:LINE: key: what", or "(from --set KEY=VALUE):
// key: what"), after the schema's own.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "strata/v1/job.pb.h"

namespace strata {

struct JobCheckOptions {
  std::vector<std::string> overrides;  // --set key=value
  bool for_run = false;                // `strata run` also needs a launcher it can drive here
  // Where strata-evaluator is: a job of the user's own model or data (model.torchscript,
  // dataset.name npy) is read by it as the run will read it (--check). Empty: not checked.
  std::string bin_dir;
};

// Parses and checks the job spec at `path`; the error lists every problem, one per line: the
// schema's first, then these checks (each skipped when the schema refused one of its inputs).
absl::StatusOr<v1::ResolvedJob> LoadAndCheckJob(const std::string& path,
                                                const JobCheckOptions& options);

// The first step of the entry points that run a job (`strata run`, `strata supervise`, the
// compose run): LoadAndCheckJob, or nullopt after "COMMAND: PATH is not a valid job spec; nothing
// was NOTHING_WAS:" and the problems on stderr, when the caller exits 2.
std::optional<v1::ResolvedJob> LoadJobOrSayWhy(const std::string& command, const std::string& path,
                                               const JobCheckOptions& options,
                                               const std::string& nothing_was = "launched");

// What `strata render` and `strata submit` check for `target` (compose or Kubernetes): the
// schema, and the checks beyond it that concern any machine (no more servers than tensors; the
// user's own model, data and certificates, which go into the containers from this machine; TLS,
// which only compose carries so far). The built-in data sets are not looked for: they live in the
// image, not on the machine that renders.
absl::StatusOr<v1::ResolvedJob> LoadContainerJob(const std::string& path,
                                                 const std::vector<std::string>& overrides,
                                                 v1::LauncherKind target);

}  // namespace strata
