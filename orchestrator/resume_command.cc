// `strata resume RUN_DIR [--quiet] [--bin-dir DIR]`: takes up a local run whose orchestrator was
// killed (or which was interrupted or failed) from its last checkpoints, in the same run
// directory (docs/user-guide.md, "Resuming a run").
#include "orchestrator/commands.h"
#include "orchestrator/lib/local_run.h"

namespace strata::cli {

void AddResumeCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "resume", "take up a run that did not finish from its last checkpoints, in its directory");
  auto options = std::make_shared<LocalRunOptions>();
  cmd->add_option("run_dir", options->out_dir, "the run directory (holds job.yaml)")->required();
  cmd->add_flag("--quiet", options->quiet, "print only the final line (and errors)");
  auto bin_dir = std::make_shared<std::string>();
  cmd->add_option("--bin-dir", *bin_dir,
                  "where the strata-* service binaries are (default: beside strata)");
  cmd->callback([options, bin_dir, exit_code] {
    options->bin_dir = bin_dir->empty() ? ExecutableDir() : *bin_dir;
    *exit_code = ResumeLocalJob(*options);
  });
}

}  // namespace strata::cli
