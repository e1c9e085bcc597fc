// strata-evaluator: scores the run's model on the held-out split once per global epoch. Usually
// started by `strata run`; see docs/user-guide.md.
#include <sys/prctl.h>

#include <csignal>
#include <cstdio>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "services/common/base/logging.h"
#include "services/common/config/job_flags.h"
#include "services/common/wire/rpc_auth.h"
#include "services/common/wire/tls_flags.h"
#include "services/evaluator/evaluator.h"

int main(int argc, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGTERM);  // never outlive the orchestrator
  CLI::App app{"Strata evaluator"};
  std::string log_file, init_checkpoint;
  bool describe = false;
  int fetch_deadline_s = 60;
  strata::EvaluatorOptions options;
  strata::JobFlags job_flags(&app, "an evaluator");
  app.add_option("--listen", options.listen, "address to serve on (port 0 = pick a free one)");
  app.add_option("--port-file", options.port_file, "write the bound port here once serving");
  app.add_option("--metrics-listen", options.metrics.listen,
                 "serve Prometheus metrics at http://ADDRESS/metrics (port 0 = pick a free one)");
  app.add_option("--metrics-port-file", options.metrics.port_file,
                 "write the metrics port here once serving");
  app.add_option("--log-file", log_file, "log file (in addition to stderr)");
  app.add_option("--threads", options.threads, "intra-op threads")->check(CLI::PositiveNumber);
  app.add_option("--fetch-deadline-s", fetch_deadline_s, "deadline of one model fetch, seconds")
      ->check(CLI::PositiveNumber);
  app.add_option("--run-dir", options.run_dir,
                 "run directory: the only place Evaluate may read a checkpoint from");
  app.add_flag("--describe", describe,
               "print the model's tensors and the data set's sizes as JSON and exit");
  app.add_option("--write-init-checkpoint", init_checkpoint,
                 "write the job's initial model as a checkpoint and exit");
  bool check = false;
  app.add_flag("--check", check,
               "check the job's data and model as a run will read them (a user's .npy data, "
               "a TorchScript model) and exit: 0 and nothing printed when they suit each other");
  std::string export_from, export_to;
  app.add_option("--export", export_from,
                 "write these trained weights (a checkpoint) back into the job's TorchScript "
                 "model, to --out, and exit");
  std::string predict_from, predict_input;
  app.add_option("--predict", predict_from,
                 "the outputs of the model with these weights (a checkpoint) for the examples "
                 "in --input, written to --out as .npy, and exit");
  app.add_option("--input", predict_input, "--predict: the examples, a float32 .npy file");
  app.add_option("--out", export_to, "where --export or --predict writes");
  bool insecure_no_auth = false;
  app.add_flag(strata::kInsecureNoAuthFlag, insecure_no_auth, strata::kInsecureNoAuthHelp);
  strata::TlsFlagValues tls;
  strata::AddTlsFlags(&app, &tls);
  CLI11_PARSE(app, argc, argv);
  // Checked before the job spec is loaded (seconds with LibTorch) but only when serving: --describe
  // and --write-init-checkpoint serve nothing.
  const bool one_shot = describe || !init_checkpoint.empty() || check || !export_from.empty() ||
                        !predict_from.empty();
  if ((!export_from.empty() || !predict_from.empty()) && export_to.empty()) {
    std::fprintf(stderr, "strata-evaluator: --export and --predict need --out\n");
    return 2;
  }
  if (!predict_from.empty() && predict_input.empty()) {
    std::fprintf(stderr, "strata-evaluator: --predict needs --input\n");
    return 2;
  }
  if (!one_shot) {
    if (absl::Status s = strata::InitServiceAuth("strata-evaluator", insecure_no_auth); !s.ok()) {
      std::fprintf(stderr, "strata-evaluator: %s\n", std::string(s.message()).c_str());
      return 2;
    }
    if (absl::Status s = strata::InitServiceTls(tls); !s.ok()) {
      std::fprintf(stderr, "strata-evaluator: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }

  auto job = strata::LoadServiceJob(job_flags.Source());
  if (!job.ok()) {
    std::fprintf(stderr, "strata-evaluator: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  if (check || !export_from.empty() || !predict_from.empty()) {
    absl::Status s =
        check                 ? strata::CheckDataAndModel(*job)
        : !export_from.empty() ? strata::ExportModel(*job, export_from, export_to)
                               : strata::PredictFromCheckpoint(*job, predict_from, predict_input,
                                                               export_to);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 2;
    }
    return 0;
  }
  if (describe) {
    auto text = strata::DescribeJob(*job);
    if (!text.ok()) {
      std::fprintf(stderr, "strata-evaluator: %s\n", std::string(text.status().message()).c_str());
      return 1;
    }
    std::printf("%s\n", text->c_str());
    return 0;
  }
  if (!init_checkpoint.empty()) {
    absl::Status s = strata::WriteInitialCheckpoint(*job, init_checkpoint);
    if (!s.ok()) {
      std::fprintf(stderr, "strata-evaluator: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    return 0;
  }
  strata::InitLogging({"evaluator", log_file, "info"});
  options.job = *std::move(job);
  options.fetch_deadline = std::chrono::seconds(fetch_deadline_s);
  absl::Status status = strata::RunEvaluator(options);
  if (!status.ok()) spdlog::error("{}", std::string(status.message()));
  strata::ExitProcess(status.ok() ? 0 : 1);
}
