// `strata sweep SWEEP.yaml [--out DIR] [--report] [--hosts FILE]`: every cell x seed of a sweep
// file as one `strata run` (on emulated hosts with --hosts), resumable, with results.csv, summary.csv and (--report) report.html in DIR.
// `strata sweep --report OUT` rewrites the tables and the report of an existing sweep directory.
#include <sys/stat.h>

#include "orchestrator/commands.h"
#include "orchestrator/sweep/sweep_runner.h"

namespace strata::cli {

void AddSweepCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "sweep", "run every cell x seed of a sweep file (resumable) and summarise across seeds");
  auto options = std::make_shared<sweep::SweepOptions>();
  cmd->add_option("sweep", options->sweep_path,
                  "sweep file (YAML), or with --report alone a sweep's output directory")
      ->required();
  cmd->add_option("--out", options->out_dir,
                  "output directory (default: the file's out:, else runs/sweep-<name>)");
  cmd->add_flag("--report", options->report, "also write OUT/report.html (charts)");
  cmd->add_option("--hosts", options->hosts_file,
                  "run every job on the emulated hosts this file lists (strata run --hosts)");
  cmd->add_flag("--check", options->check_only,
                "check the sweep file and every cell's job, list the runs, run nothing");
  cmd->callback([options, exit_code] {
    struct stat st;
    const bool is_dir = ::stat(options->sweep_path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    if (is_dir) {
      if (!options->report || !options->out_dir.empty()) {
        std::fprintf(stderr,
                     "strata sweep: %s is a directory: give a sweep file, or --report alone to "
                     "rebuild the report of a sweep's output directory\n",
                     options->sweep_path.c_str());
        *exit_code = 2;
        return;
      }
      *exit_code = sweep::ReportSweep(options->sweep_path);
      return;
    }
    options->strata_exe = sweep::SelfExecutable();
    *exit_code = sweep::RunSweep(*options);
  });
}

}  // namespace strata::cli
