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

#include "services/common/config/job_spec.h"

namespace strata {

struct CheckedJob {
  JobSpec spec;
  std::string yaml_text;  // the file as read (before --set)
};

struct JobCheckOptions {
  std::vector<std::string> overrides;  // --set key=value
  bool for_run = false;                // `strata run` also needs a launcher it can drive here
};

// Parses and checks the job spec at `path`; the error lists every problem, one per line: the
// schema's first, then these checks (each skipped when the schema refused one of its inputs).
absl::StatusOr<CheckedJob> LoadAndCheckJob(const std::string& path, const JobCheckOptions& options);

// What `strata render` and `strata submit` check: the schema, and the one check beyond it that
// concerns any machine (no more servers than tensors). The data files are not looked for: they
// live in the image, not on the machine that renders.
absl::StatusOr<JobSpec> LoadContainerJob(const std::string& path,
                                         const std::vector<std::string>& overrides);

// The number of tensors the parameter servers partition (trainable parameters, then float
// buffers) for each model of services/common/ml/models.cc. The orchestrator does not link LibTorch,
// so this is a table; tests/integration/orchestrator checks it against `strata-evaluator
// --describe`.
std::optional<int> ModelTensorCount(const std::string& arch);

// 1-based line of the dotted `key` ("dataset.path", "cluster.stragglers[0].worker") in the YAML
// text, or 0 when the key is not in the text (a default or a --set value).
int KeyLine(const std::string& yaml_text, const std::string& key);

}  // namespace strata
