// The `strata` command line: each subcommand lives in its own file and registers itself here.
#pragma once

#include <CLI/CLI.hpp>

namespace strata::cli {

// Each Add*Command adds a subcommand to `app` whose callback sets *exit_code.
void AddShardCommand(CLI::App& app, int* exit_code);
void AddValidateCommand(CLI::App& app, int* exit_code);
void AddKeysCommand(CLI::App& app, int* exit_code);
void AddExportCommand(CLI::App& app, int* exit_code);
void AddResolveCommand(CLI::App& app, int* exit_code);
void AddRunCommand(CLI::App& app, int* exit_code);
void AddResumeCommand(CLI::App& app, int* exit_code);
void AddSwitchCommand(CLI::App& app, int* exit_code);
void AddStatusCommand(CLI::App& app, int* exit_code);
void AddReportCommand(CLI::App& app, int* exit_code);
void AddSweepCommand(CLI::App& app, int* exit_code);
void AddRenderCommand(CLI::App& app, int* exit_code);
void AddSubmitCommand(CLI::App& app, int* exit_code);
void AddLogsCommand(CLI::App& app, int* exit_code);
void AddDeleteCommand(CLI::App& app, int* exit_code);
void AddSuperviseCommand(CLI::App& app, int* exit_code);
void AddCertificatesCommand(CLI::App& app, int* exit_code);
void AddProduceCommand(CLI::App& app, int* exit_code);
void AddPredictCommand(CLI::App& app, int* exit_code);

}  // namespace strata::cli
