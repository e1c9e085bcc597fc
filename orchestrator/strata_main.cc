// strata: the one program a user runs. Subcommands are defined in orchestrator/*_command.cc.
#include <CLI/CLI.hpp>

#include "orchestrator/commands.h"

int main(int argc, char** argv) {
  CLI::App app{
      "Strata: distributed training with a live switch from all-reduce to parameter servers"};
  app.require_subcommand(1);
  int exit_code = 0;
  strata::cli::AddValidateCommand(app, &exit_code);
  strata::cli::AddShardCommand(app, &exit_code);
  strata::cli::AddRunCommand(app, &exit_code);
  strata::cli::AddSwitchCommand(app, &exit_code);
  strata::cli::AddStatusCommand(app, &exit_code);
  strata::cli::AddReportCommand(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
