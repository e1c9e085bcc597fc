// strata-worker: one training replica. Usually started by `strata run`; see docs/protocol.md.
#include <sys/prctl.h>

#include <csignal>
#include <cstdio>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "services/collective/grpc_ring_link.h"
#include "services/common/base/logging.h"
#include "services/common/config/job_flags.h"
#include "services/common/config/resolved_job.h"
#include "services/common/wire/rpc_auth.h"
#include "services/common/wire/tls_flags.h"
#include "services/worker/worker.h"

int main(int argc, char** argv) {
  // The orchestrator owns shutdown: a worker never outlives it.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  // Process-wide allocator settings for the ring's gRPC receive buffers, before any thread starts.
  strata::TuneAllocatorForRing();
  CLI::App app{"Strata worker"};
  std::string log_file;
  int deadline_s = 120;
  strata::WorkerOptions options;
  strata::JobFlags job_flags(&app, "a worker");
  app.add_option("--rank", options.rank, "this worker's rank")
      ->required()
      ->check(CLI::NonNegativeNumber);
  job_flags.AddShorthand("--world", "cluster.workers", "number of workers");
  job_flags.AddShorthand("--epochs", "training.epochs", "epochs to train");
  app.add_option("--shard-file", options.shard_file, "index file of this worker's shard");
  app.add_option("--listen", options.listen, "address to serve on (port 0 = pick a free one)");
  app.add_option("--ring-listen", options.ring_listen,
                 "also serve the ring all-reduce here (e.g. unix-abstract:NAME)");
  app.add_option("--port-file", options.port_file, "write the bound port here once serving");
  app.add_option("--metrics-listen", options.metrics.listen,
                 "serve Prometheus metrics at http://ADDRESS/metrics (port 0 = pick a free one)");
  app.add_option("--metrics-port-file", options.metrics.port_file,
                 "write the metrics port here once serving");
  app.add_option("--run-dir", options.run_dir, "run directory (checkpoints are written under it)");
  app.add_option("--log-file", log_file, "log file (in addition to stderr)");
  app.add_option("--deadline-s", deadline_s, "deadline of every blocking operation, seconds")
      ->check(CLI::PositiveNumber);
  double checkpoint_every_s = -1;  // -1: the job's
  app.add_option("--checkpoint-every-s", checkpoint_every_s,
                 "rank 0: save the all-reduce model to <run-dir>/checkpoints/ring.ckpt this often "
                 "(what strata resume continues from); 0: never; default with --run-dir: the "
                 "job's recovery.ring_checkpoint_s")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stream-address", options.stream_address,
                 "strategy.kind stream: the broker to read instead of stream.address");
  app.add_option("--stream-run", options.stream_run,
                 "strategy.kind stream: the run's nonce, under which the replicas find each other")
      ->default_val("default");
  app.add_option("--parameter-servers", options.parameter_servers,
                 "strategy.kind stream with stream.sync servers: the servers' host:port, in "
                 "partition order")
      ->delimiter(',');
  bool insecure_no_auth = false;
  app.add_flag(strata::kInsecureNoAuthFlag, insecure_no_auth, strata::kInsecureNoAuthHelp);
  strata::TlsFlagValues tls;
  strata::AddTlsFlags(&app, &tls);
  CLI11_PARSE(app, argc, argv);
  if (absl::Status s = strata::InitServiceAuth("strata-worker", insecure_no_auth); !s.ok()) {
    std::fprintf(stderr, "strata-worker: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (absl::Status s = strata::InitServiceTls(tls); !s.ok()) {
    std::fprintf(stderr, "strata-worker: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto job = strata::LoadServiceJob(job_flags.Source());
  if (!job.ok()) {
    std::fprintf(stderr, "strata-worker: %s\n", std::string(job.status().message()).c_str());
    return 2;
  }
  options.job = *std::move(job);
  if (options.rank >= options.world()) {
    std::fprintf(stderr, "strata-worker: --rank %d must be below the job's %d workers\n",
                 options.rank, options.world());
    return 2;
  }
  strata::InitLogging({"worker-" + std::to_string(options.rank), log_file, "info"});
  options.deadline = std::chrono::seconds(deadline_s);
  if (checkpoint_every_s > 0 && options.run_dir.empty()) {
    std::fprintf(stderr, "strata-worker: --checkpoint-every-s needs --run-dir\n");
    return 2;
  }
  // The ring's model is the same on every replica: rank 0's copy is the state `strata resume`
  // continues from.
  if (checkpoint_every_s < 0) {
    checkpoint_every_s =
        options.rank == 0 && !options.run_dir.empty() && strata::UsesRing(options.job)
            ? options.job.recovery().ring_checkpoint_s()
            : 0;
  }
  options.ring_checkpoint_every =
      std::chrono::milliseconds(static_cast<int64_t>(checkpoint_every_s * 1000));
  absl::Status status = strata::RunWorker(options);
  if (!status.ok()) spdlog::error("{}", std::string(status.message()));
  strata::ExitProcess(status.ok() ? 0 : 1);
}
