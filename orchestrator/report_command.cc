// `strata report RUN_DIR`: (re)writes report.html from the run directory; works while it runs.
#include <cstdio>

#include "orchestrator/commands.h"
#include "orchestrator/record/report.h"
#include "services/common/base/run_directory.h"

namespace strata::cli {

void AddReportCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand("report", "write RUN_DIR/report.html (charts of the run)");
  auto dir = std::make_shared<std::string>();
  cmd->add_option("run_dir", *dir, "run directory")->required();
  cmd->callback([=] {
    absl::Status s = WriteRunReport(*dir);
    if (!s.ok()) {
      std::fprintf(stderr, "strata report: %s\n", std::string(s.message()).c_str());
      *exit_code = 2;
      return;
    }
    std::printf("%s\n", RunPaths(*dir).report.c_str());
    *exit_code = 0;
  });
}

}  // namespace strata::cli
