// `strata validate JOB.yaml [--set key=value ...]`: every problem of a job spec, with key and line.
#include <cstdio>

#include "orchestrator/commands.h"
#include "orchestrator/lib/local_run.h"
#include "orchestrator/plan/job_checks.h"
#include "services/common/config/resolved_job.h"
#include "services/common/config/job_keys.h"

namespace strata::cli {

void AddValidateCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd =
      app.add_subcommand("validate", "check a job spec: every problem with its key and line");
  auto job = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  cmd->add_option("job", *job, "job spec (YAML)")->required();
  cmd->add_option("--set", *overrides, "override a key, e.g. --set training.lr=0.05 (repeatable)");
  cmd->callback([=] {
    JobCheckOptions options;
    options.overrides = *overrides;
    options.bin_dir = ExecutableDir();
    auto checked = LoadAndCheckJob(*job, options);
    if (!checked.ok()) {
      std::fprintf(stderr, "%s\n", std::string(checked.status().message()).c_str());
      *exit_code = 2;
      return;
    }
    const v1::ResolvedJob& s = *checked;
    std::printf("%s: ok — %s, %s on %s, %d epochs, %d worker(s), strategy %s\n", job->c_str(),
                s.name().c_str(), ModelText(s).c_str(), Spelled(s.dataset().name()).c_str(),
                s.training().epochs(), s.cluster().workers(), Spelled(s.strategy().kind()).c_str());
    *exit_code = 0;
  });
}

}  // namespace strata::cli
