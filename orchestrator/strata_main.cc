// strata: the one program a user runs. Subcommands are defined in orchestrator/*_command.cc.
#include <cstdlib>

#include <CLI/CLI.hpp>

#include "orchestrator/commands.h"

int main(int argc, char** argv) {
  // Inherited by every service this launches: several LibTorch processes share the cores, and
  // OpenMP threads that spin while they wait starve each other (measured: a 784x784 eigh went
  // from 0.05 s to 21 s under load). Set here, before any thread exists; a user's choice wins.
  setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  CLI::App app{
      "Strata: distributed training with a live switch from all-reduce to parameter servers"};
  app.require_subcommand(1);
  int exit_code = 0;
  strata::cli::AddValidateCommand(app, &exit_code);
  strata::cli::AddKeysCommand(app, &exit_code);
  strata::cli::AddExportCommand(app, &exit_code);
  strata::cli::AddResolveCommand(app, &exit_code);
  strata::cli::AddShardCommand(app, &exit_code);
  strata::cli::AddRunCommand(app, &exit_code);
  strata::cli::AddResumeCommand(app, &exit_code);
  strata::cli::AddSwitchCommand(app, &exit_code);
  strata::cli::AddStatusCommand(app, &exit_code);
  strata::cli::AddReportCommand(app, &exit_code);
  strata::cli::AddSweepCommand(app, &exit_code);
  strata::cli::AddRenderCommand(app, &exit_code);
  strata::cli::AddSubmitCommand(app, &exit_code);
  strata::cli::AddLogsCommand(app, &exit_code);
  strata::cli::AddDeleteCommand(app, &exit_code);
  strata::cli::AddSuperviseCommand(app, &exit_code);
  strata::cli::AddCertificatesCommand(app, &exit_code);
  strata::cli::AddProduceCommand(app, &exit_code);
  strata::cli::AddPredictCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11's own codes (106 for a missing argument, 109 for an extra one, ...) are not what
    // docs/user-guide.md promises: a usage error exits 2, after CLI11's message; --help exits 0.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
