// `strata export RUN_DIR --out FILE`: the trained model of a run of a user's TorchScript model,
// written back into that module (docs/data-and-models.md, "Your own model"): the weights and
// buffers the evaluator scored last, so that torch.jit.load(FILE) in Python gives the predictions
// whose accuracy the run reported. The orchestrator has no LibTorch; strata-evaluator writes it.
#include <cstdio>

#include <absl/strings/str_cat.h>

#include "orchestrator/commands.h"
#include "orchestrator/lib/local_run.h"
#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/process/child_process.h"

namespace strata::cli {

void AddExportCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "export", "write a run's trained model back into its TorchScript module (model.torchscript)");
  auto run_dir = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto checkpoint = std::make_shared<std::string>();
  cmd->add_option("run_dir", *run_dir, "the run directory")->required();
  cmd->add_option("--out", *out, "the TorchScript file to write")->required();
  cmd->add_option("--checkpoint", *checkpoint,
                  "the weights to write (default: the model the evaluator scored last, "
                  "RUN_DIR/checkpoints/final.ckpt)");
  cmd->callback([=] {
    const RunPaths paths(*run_dir);
    auto fail = [&](const std::string& what) {
      std::fprintf(stderr, "strata export: %s\n", what.c_str());
      *exit_code = 2;
    };
    if (!FileExists(paths.job_resolved)) {
      return fail(absl::StrCat(*run_dir, " is not a run directory (no job.resolved.txtpb)"));
    }
    const std::string weights =
        checkpoint->empty() ? paths.At(run_files::kFinalCheckpoint) : *checkpoint;
    if (!FileExists(weights)) {
      return fail(absl::StrCat(weights,
                               " does not exist: the run has not finished its last evaluation "
                               "(give --checkpoint to export another model)"));
    }
    SpawnOptions o;
    o.name = "strata-evaluator --export";
    o.argv = {ExecutableDir() + "/strata-evaluator", "--job", paths.job_resolved, "--export",
              weights, "--out", *out};
    o.inherit_output = true;
    auto child = ChildProcess::Spawn(o);
    if (!child.ok()) return fail(std::string(child.status().message()));
    (*child)->WaitFor(std::chrono::hours(1));
    if (!(*child)->succeeded()) {
      *exit_code = 2;
      return;
    }
    std::printf("strata export: wrote %s: the weights of %s in the run's TorchScript module\n",
                out->c_str(), weights.c_str());
    *exit_code = 0;
  });
}

}  // namespace strata::cli
