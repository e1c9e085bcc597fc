// `strata run JOB.yaml [--out DIR] [--set key=value ...] [--quiet] [--image IMAGE] [--hosts FILE]`:
// one training run, end to end, with the launcher the job names: child processes on this machine
// (`local`, on emulated hosts with --hosts) or a docker-compose project on this machine's Docker
// daemon (`compose`).
#include <cstdio>

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
  auto hosts_file = std::make_shared<std::string>();
  cmd->add_option("--hosts", *hosts_file,
                  "launcher.kind local: spread the services over the emulated hosts this file "
                  "lists (bench/network/emulated_hosts.sh hosts-file)");
  cmd->callback([options, bin_dir, image, hosts_file, exit_code] {
    options->bin_dir = bin_dir->empty() ? ExecutableDir() : *bin_dir;
    // The launcher decides the path; a job that does not load is reported by RunLocalJob.
    JobCheckOptions check;
    check.overrides = options->overrides;
    auto job = LoadAndCheckJob(options->job_path, check);
    const bool compose_job = job.ok() && job->launcher().kind() == v1::LAUNCHER_KIND_COMPOSE;
    if (!hosts_file->empty()) {
      if (compose_job) {
        std::fprintf(stderr,
                     "strata run: --hosts places the processes of the local launcher; this job "
                     "runs on docker-compose (launcher.kind compose); nothing was launched\n");
        *exit_code = 2;
        return;
      }
      auto hosts = HostPlacement::Load(*hosts_file);
      if (!hosts.ok()) {
        std::fprintf(stderr, "strata run: %s; nothing was launched\n",
                     std::string(hosts.status().message()).c_str());
        *exit_code = 2;
        return;
      }
      options->hosts = std::move(*hosts);
    }
    if (compose_job) {
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
