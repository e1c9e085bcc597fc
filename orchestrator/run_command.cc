// `strata run JOB.yaml [--out DIR] [--set key=value ...] [--quiet] [--image IMAGE]`: one training
// run, end to end, with the launcher the job names: child processes on this machine (`local`) or
// a docker-compose project on this machine's Docker daemon (`compose`).
#include "orchestrator/commands.h"
#include "orchestrator/lib/compose_run.h"
#include "orchestrator/lib/local_run.h"
#include "orchestrator/plan/job_checks.h"

namespace strata::cli {

void AddRunCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("run", "run a job: shard, launch, train, switch, report");
  auto options = std::make_shared<LocalRunOptions>();
  cmd->add_option("job", options->job_path, "job spec (YAML)")->required();
  cmd->add_option("--out", options->out_dir, "run directory (default runs/<name>-<timestamp>)");
  cmd->add_option("--set", options->overrides,
                  "override a key, e.g. --set training.epochs=3 (repeatable)");
  cmd->add_flag("--quiet", options->quiet, "print only the final line (and errors)");
  auto bin_dir = std::make_shared<std::string>();
  cmd->add_option("--bin-dir", *bin_dir,
                  "where the strata-* service binaries are (default: beside strata)");
  auto image = std::make_shared<std::string>("strata:latest");
  cmd->add_option("--image", *image,
                  "launcher.kind compose: the image the containers run (built if missing)");
  cmd->callback([options, bin_dir, image, exit_code] {
    options->bin_dir = bin_dir->empty() ? ExecutableDir() : *bin_dir;
    // The launcher decides the path; a job that does not load is reported by RunLocalJob.
    JobCheckOptions check;
    check.overrides = options->overrides;
    auto job = LoadAndCheckJob(options->job_path, check);
    if (job.ok() && job->launcher().kind() == v1::LAUNCHER_KIND_COMPOSE) {
      ComposeRunOptions compose;
      compose.job_path = options->job_path;
      compose.overrides = options->overrides;
      compose.out_dir = options->out_dir;
      compose.quiet = options->quiet;
      compose.bin_dir = options->bin_dir;
      compose.image = *image;
      *exit_code = RunComposeJob(compose);
      return;
    }
    *exit_code = RunLocalJob(*options);
  });
}

}  // namespace strata::cli
