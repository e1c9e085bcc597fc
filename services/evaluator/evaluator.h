// The evaluator: scores a model on the held-out split. It fetches the model from where the run
// currently keeps it — worker 0 during all-reduce (Worker.GetModel), the parameter servers after
// the switch (ParameterServer.Pull of every partition) or a checkpoint file — and streams the
// metrics to every watcher. The orchestrator decides when (once per global epoch) and from where.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/config/resolved_job.h"
#include "services/common/metrics/metrics_endpoint.h"
#include "services/common/wire/checkpoint.h"
#include "services/common/wire/tensor.h"
#include "strata/v1/evaluator.pb.h"

namespace strata {

struct EvaluatorOptions {
  v1::ResolvedJob job;
  std::string listen = "127.0.0.1:0";
  std::string port_file;
  int threads = 1;  // intra-op threads: the evaluator shares the cores with the workers
  std::chrono::milliseconds fetch_deadline{60000};  // per model fetch (GetModel / Pull)
  // The only directory whose checkpoints Evaluate may read (services/common/base/run_paths.h);
  // empty: Evaluate accepts no checkpoint path.
  std::string run_dir;
  // The Prometheus endpoint: evaluations, the latest loss and accuracy. No listen address: none.
  MetricsEndpointOptions metrics;
};

// Runs the gRPC service until Stop or SIGTERM.
absl::Status RunEvaluator(const EvaluatorOptions& options);

// `strata-evaluator --describe`: the model's tensors (what the parameter servers partition) and
// the data set's sizes, as JSON. The orchestrator does not link LibTorch; this answers for it.
absl::StatusOr<std::string> DescribeJob(const v1::ResolvedJob& job);

// `--write-init-checkpoint`: the initial model of the job (the seed's weights), so that parameter
// servers of a pure `ps` job start from the same model a worker would build.
absl::Status WriteInitialCheckpoint(const v1::ResolvedJob& job, const std::string& path);

// `strata-evaluator --check`: what `strata validate` cannot check without LibTorch, for a job of
// the user's own model or data. The data files read as the services will read them (every
// feature scanned for NaN and infinities), the held-out files are there, the labels or targets
// suit training.loss, the model loads, and a forward pass on one example gives an output that
// fits them: logits for every label's class, or one value per target. Each problem names the file
// and starts with the job key it is about ("dataset.path: ...", "model.torchscript: ...").
absl::Status CheckDataAndModel(const v1::ResolvedJob& job);

// `strata-evaluator --export CHECKPOINT --out FILE` (what `strata export` runs): the trained
// weights written back into the job's TorchScript model.
absl::Status ExportModel(const v1::ResolvedJob& job, const std::string& checkpoint,
                         const std::string& out);

// `strata-evaluator --predict CHECKPOINT --input X.npy --out SCORES.npy` (what `strata predict`
// runs for a finished run): the model's outputs for the examples in X.npy (float32, shape
// [N, the job's example shape], every value finite) with the checkpoint's weights, written as
// float32 [N, the output per example].
absl::Status PredictFromCheckpoint(const v1::ResolvedJob& job, const std::string& checkpoint,
                                   const std::string& input, const std::string& out);

// The fetched tensors as a checkpoint a Trainer loads: names are sorted into parameters and
// buffers by the model's own layout; an unknown name is an error naming it.
absl::StatusOr<Checkpoint> TensorsToCheckpoint(std::vector<NamedTensor> tensors,
                                               const std::vector<std::string>& parameter_names,
                                               const std::vector<std::string>& buffer_names);

}  // namespace strata
