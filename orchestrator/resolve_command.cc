// `strata resolve JOB.yaml [--set key=value ...] [--out FILE]`: the job as the services read it
// (docs/architecture.md, "The resolved job"). `strata run` resolves the spec itself; a container
// plan's one-shot step runs this with the replica counts the deployment really has, so that every
// container of the job reads the same numbers.
#include <cstdio>

#include "orchestrator/commands.h"
#include "services/common/base/files.h"
#include "services/common/config/resolved_job.h"

namespace strata::cli {

void AddResolveCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "resolve", "print (or write) the resolved job every service reads: enums, derived numbers");
  auto job = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  cmd->add_option("job", *job, "job spec (YAML)")->required();
  cmd->add_option("--set", *overrides, "override a key, e.g. --set cluster.workers=4 (repeatable)");
  cmd->add_option("--out", *out, "write it to this file (atomically) instead of standard output");
  cmd->callback([=] {
    absl::StatusOr<v1::ResolvedJob> resolved = LoadServiceJob({"", *job, *overrides});
    absl::Status written = resolved.status();
    if (resolved.ok() && !out->empty()) {
      written = WriteFileAtomic(*out, ResolvedJobText(*resolved));
    } else if (resolved.ok()) {
      std::fputs(ResolvedJobText(*resolved).c_str(), stdout);
    }
    if (!written.ok()) {
      std::fprintf(stderr, "strata resolve: %s\n", std::string(written.message()).c_str());
      *exit_code = 2;
      return;
    }
    *exit_code = 0;
  });
}

}  // namespace strata::cli
