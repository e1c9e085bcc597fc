// `strata run JOB.yaml [--out DIR] [--set key=value ...] [--quiet]`: one training run, end to end.
#include "orchestrator/commands.h"
#include "orchestrator/lib/local_run.h"

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
  cmd->callback([options, bin_dir, exit_code] {
    options->bin_dir = bin_dir->empty() ? ExecutableDir() : *bin_dir;
    *exit_code = RunLocalJob(*options);
  });
}

}  // namespace strata::cli
