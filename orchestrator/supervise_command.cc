// `strata supervise JOB.yaml --run-dir DIR --workers A,B [--parameter-servers P,...] --evaluator E`:
// the orchestrator of a run whose services were started by docker-compose or Kubernetes (the
// files `strata render` writes run it). It does what `strata run` does once the services listen.
#include <absl/strings/str_split.h>

#include "orchestrator/commands.h"
#include "orchestrator/lib/local_run.h"

namespace strata::cli {
namespace {

std::vector<std::string> SplitList(const std::string& list) {
  return absl::StrSplit(list, ',', absl::SkipWhitespace());
}

}  // namespace

void AddSuperviseCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "supervise",
      "orchestrate a run whose services already run (containers): train, evaluate, switch, stop");
  auto options = std::make_shared<LocalRunOptions>();
  auto servers = std::make_shared<std::string>();
  auto workers = std::make_shared<std::string>();
  auto evaluator = std::make_shared<std::string>();
  cmd->add_option("job", options->job_path, "job spec (YAML)")->required();
  cmd->add_option("--run-dir", options->out_dir,
                  "the run directory the services share; the sharder's output is in shards/")
      ->required();
  cmd->add_option("--set", options->overrides, "override a key (repeatable)");
  cmd->add_option("--workers", *workers, "the workers' host:port, by rank, comma-separated")
      ->required();
  cmd->add_option("--parameter-servers", *servers,
                  "the parameter servers' host:port, by partition, comma-separated");
  cmd->add_option("--evaluator", *evaluator, "the evaluator's host:port")->required();
  cmd->add_flag("--quiet", options->quiet, "print only the final line (and errors)");
  auto startup_s = std::make_shared<int>(300);
  cmd->add_option("--startup-timeout-s", *startup_s,
                  "how long the services may take to answer their health check, seconds")
      ->check(CLI::PositiveNumber);
  cmd->callback([=] {
    AttachedServices attached;
    attached.parameter_servers = SplitList(*servers);
    attached.workers = SplitList(*workers);
    attached.evaluator = *evaluator;
    options->attached = std::move(attached);
    options->startup_timeout = std::chrono::seconds(*startup_s);
    *exit_code = SuperviseJob(*options);
  });
}

}  // namespace strata::cli
