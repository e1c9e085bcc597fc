// `strata predict RUN_DIR --input X.npy [--replica R] [--out SCORES.npy]`: the model's outputs
// for the examples in X.npy. A stream job that is still running answers from a replica's live
// weights: the request goes through the orchestrator's control socket (which only the run's user
// can reach), and the orchestrator, which holds the run token, passes it on to the replica
// (StreamReplica.Predict). A finished run answers from its final model (a stream replica's final
// weights, or checkpoints/final.ckpt), which strata-evaluator loads, since the orchestrator has no
// LibTorch. docs/user-guide.md, "Predictions".
//
// The examples are read as hostile input: the .npy header is parsed strictly, a value that is not
// finite is refused with its row, and the shape is checked against the model's by whoever runs it.
// uint8 arrays are pixels and are scaled by 1/255, as the data sets read them.
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <nlohmann/json.hpp>

#include "orchestrator/commands.h"
#include "orchestrator/lib/local_run.h"
#include "orchestrator/run/control_server.h"
#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/base/status.h"
#include "services/common/config/resolved_job.h"
#include "services/common/process/child_process.h"
#include "services/common/wire/npy_file.h"

namespace strata::cli {
namespace {

// A live request holds at most this many examples (the replica's limit) and about this many bytes
// (well under a gRPC message's 64 MiB, so that an example of any size fits a request of its own).
constexpr int64_t kExamplesPerRequest = 1024;
constexpr int64_t kBytesPerRequest = 8 << 20;
// One request through the orchestrator to a replica, on a loaded machine.
constexpr std::chrono::seconds kRequestDeadline{60};

struct PredictArgs {
  std::string run_dir, input, out, checkpoint;
  int replica = 0;
};

// The model's outputs and where they came from.
struct Predictions {
  std::vector<float> scores;
  std::vector<int64_t> shape;  // [N, the output per example]
  std::string source;          // "replica 0, live weights, model version 1234"
};

// The examples as float32, the way the data sets hold them.
absl::StatusOr<std::vector<float>> ReadExamples(const NpyArray& x) {
  if (!NpyIsFloat(x.dtype()) && x.dtype() != NpyDType::kUInt8) {
    return absl::InvalidArgumentError(absl::StrCat(
        x.origin(), ": ", x.Describe(),
        "; examples are float32 or float64 (as the data set's features), or uint8 pixels"));
  }
  if (x.shape().size() < 2 || x.rows() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        x.origin(), ": ", x.Describe(),
        "; the examples come as an array of shape (N, the example's shape), N >= 1 (one example "
        "x: x[None])"));
  }
  if (const std::optional<int64_t> row = FirstNonFiniteRow(x); row.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        x.origin(), ": example ", *row, " holds a value that is not finite (NaN or infinity)"));
  }
  std::vector<float> floats(static_cast<size_t>(x.elements()));
  RowsToFloat(x, 0, x.rows(), floats.data());
  if (x.dtype() == NpyDType::kUInt8) {
    for (float& v : floats) v *= 1.0f / 255.0f;
  }
  return floats;
}

// From a replica of the running stream job, through the orchestrator.
absl::StatusOr<Predictions> PredictLive(const std::string& socket, const NpyArray& x,
                                        const std::vector<float>& floats, int replica) {
  Predictions p;
  const int64_t row_floats = x.row_elements();
  const int64_t per_request = std::clamp<int64_t>(
      kBytesPerRequest / std::max<int64_t>(1, row_floats * 4), 1, kExamplesPerRequest);
  uint64_t lowest = UINT64_MAX, highest = 0;
  uint32_t answered_by = 0;
  for (int64_t first = 0; first < x.rows(); first += per_request) {
    const int64_t n = std::min(per_request, x.rows() - first);
    v1::RunPredictRequest request;
    request.set_replica(replica);
    v1::TensorChunk* input = request.mutable_request()->mutable_input();
    input->mutable_header()->set_name("examples");
    input->mutable_header()->set_dtype(v1::DTYPE_FLOAT32);
    input->mutable_header()->add_shape(n);
    for (size_t d = 1; d < x.shape().size(); ++d) input->mutable_header()->add_shape(x.shape()[d]);
    input->set_data(reinterpret_cast<const char*>(floats.data() + first * row_floats),
                    static_cast<size_t>(n * row_floats) * sizeof(float));
    STRATA_ASSIGN_OR_RETURN(v1::PredictReply reply,
                            PredictThroughRun(socket, request, kRequestDeadline));
    const v1::TensorHeader& h = reply.scores().header();
    std::vector<int64_t> shape(h.shape().begin(), h.shape().end());
    const int64_t per_example =
        shape.empty() || shape[0] != n ? -1 : static_cast<int64_t>(reply.scores().data().size()) /
                                                  4 / n;
    if (per_example <= 0 || static_cast<int64_t>(reply.scores().data().size()) != n * per_example * 4) {
      return absl::DataLossError(absl::StrCat("replica ", replica, " answered ", n,
                                              " examples with scores of shape [",
                                              absl::StrJoin(shape, ", "), "]"));
    }
    const float* values = reinterpret_cast<const float*>(reply.scores().data().data());
    p.scores.insert(p.scores.end(), values, values + n * per_example);
    p.shape = shape;
    answered_by = reply.replica();
    lowest = std::min<uint64_t>(lowest, reply.model_version());
    highest = std::max<uint64_t>(highest, reply.model_version());
  }
  p.shape[0] = x.rows();
  // The replica named is the one that says it answered.
  p.source = absl::StrCat("replica ", answered_by, ", live weights, model version ", lowest,
                          highest != lowest ? absl::StrCat(" to ", highest) : "",
                          " (gradients applied)");
  return p;
}

// From the run's final model (or --checkpoint), by strata-evaluator.
absl::StatusOr<Predictions> PredictFinished(const PredictArgs& args, const RunPaths& paths,
                                            bool stream, const NpyArray& x,
                                            const std::vector<float>& floats) {
  std::string checkpoint = args.checkpoint;
  if (checkpoint.empty()) {
    checkpoint = stream ? paths.StreamReplicaModel(args.replica)
                        : paths.At(run_files::kFinalCheckpoint);
  }
  if (!FileExists(checkpoint)) {
    return absl::FailedPreconditionError(absl::StrCat(
        checkpoint, " does not exist: the run has not finished (and is not a stream job that "
                    "answers while it runs); give --checkpoint to use other weights"));
  }
  char dir[] = "/tmp/strata-predict-XXXXXX";
  if (::mkdtemp(dir) == nullptr) return absl::InternalError("cannot make a temporary directory");
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } cleanup{dir};
  // The evaluator reads float32 only: the conversion is done once, here.
  const std::string examples = absl::StrCat(dir, "/examples.npy");
  const std::string scores = absl::StrCat(dir, "/scores.npy");
  STRATA_RETURN_IF_ERROR(WriteNpy(examples, NpyDType::kFloat32, x.shape(), floats.data()));
  SpawnOptions o;
  o.name = "strata-evaluator --predict";
  o.argv = {ExecutableDir() + "/strata-evaluator", "--job", paths.job_resolved, "--predict",
            checkpoint, "--input", examples, "--out", scores};
  o.log_path = absl::StrCat(dir, "/evaluator.log");
  STRATA_ASSIGN_OR_RETURN(auto child, ChildProcess::Spawn(o));
  if (!child->WaitFor(std::chrono::hours(1)) || !child->succeeded()) {
    std::string said = ReadFile(o.log_path).value_or("");
    while (!said.empty() && said.back() == '\n') said.pop_back();
    // The evaluator names its own temporary copy: the user gave the original.
    for (size_t at; (at = said.find(examples)) != std::string::npos;) {
      said.replace(at, examples.size(), args.input);
    }
    return absl::InvalidArgumentError(said.empty() ? absl::StrCat("strata-evaluator ",
                                                                  child->ExitDescription())
                                                   : said);
  }
  STRATA_ASSIGN_OR_RETURN(NpyArray out, OpenNpy(scores));
  Predictions p;
  p.shape = out.shape();
  p.scores.resize(static_cast<size_t>(out.elements()));
  RowsToFloat(out, 0, out.rows(), p.scores.data());
  p.source = absl::StrCat("the final weights in ", checkpoint);
  return p;
}

// One line per example: the class with the highest score (training.loss cross_entropy), else
// the outputs themselves (regression values, or multi-label logits).
void Print(const Predictions& p, bool classes) {
  const int64_t n = p.shape[0];
  const int64_t per = n > 0 ? static_cast<int64_t>(p.scores.size()) / n : 0;
  for (int64_t e = 0; e < n; ++e) {
    const float* row = p.scores.data() + e * per;
    if (classes) {
      const int64_t best = std::max_element(row, row + per) - row;
      std::printf("example %lld: class %lld (score %.4f)\n", static_cast<long long>(e),
                  static_cast<long long>(best), row[best]);
    } else {
      std::vector<std::string> values;
      for (int64_t i = 0; i < per; ++i) values.push_back(absl::StrFormat("%.6g", row[i]));
      std::printf("example %lld: %s\n", static_cast<long long>(e),
                  absl::StrJoin(values, " ").c_str());
    }
  }
}

int RunPredict(const PredictArgs& args) {
  auto fail = [](const std::string& what) {
    std::fprintf(stderr, "strata predict: %s\n", what.c_str());
    return 2;
  };
  const RunPaths paths(args.run_dir);
  if (!FileExists(paths.job_resolved)) {
    return fail(absl::StrCat(args.run_dir, " is not a run directory (no job.resolved.txtpb)"));
  }
  auto job = LoadResolvedJob(paths.job_resolved);
  if (!job.ok()) return fail(std::string(job.status().message()));
  auto x = OpenNpy(args.input);
  if (!x.ok()) return fail(std::string(x.status().message()));
  auto floats = ReadExamples(*x);
  if (!floats.ok()) return fail(std::string(floats.status().message()));

  nlohmann::json status = nlohmann::json::parse(ReadFile(paths.status).value_or(""), nullptr,
                                                /*allow_exceptions=*/false);
  if (!status.is_object()) status = nlohmann::json::object();
  const bool stream = status.value("strategy", "") == "stream";
  const int replicas = status.value("replicas", 1);
  if (stream && (args.replica < 0 || args.replica >= replicas)) {
    return fail(absl::StrCat("there is no replica ", args.replica, ": the run has ", replicas,
                             " (0 to ", replicas - 1, ")"));
  }
  const std::string socket = status.value("control_socket", "");
  const bool running = status.value("state", "") == "running" &&
                       ProbeOrchestrator(socket, status.value("updated", 0.0)) !=
                           OrchestratorLiveness::kGone;
  absl::StatusOr<Predictions> p;
  if (running && args.checkpoint.empty()) {
    if (!stream) {
      return fail(absl::StrCat(
          "the run is still training (strategy ", status.value("strategy", "?"),
          "): only a stream job's replicas answer while it trains; ask once it has finished "
          "(its final model answers), or give --checkpoint"));
    }
    if (socket.empty()) {
      return fail("the run publishes no control socket (its orchestrator runs elsewhere)");
    }
    p = PredictLive(socket, *x, *floats, args.replica);
  } else {
    p = PredictFinished(args, paths, stream, *x, *floats);
  }
  if (!p.ok()) return fail(std::string(p.status().message()));
  if (!args.out.empty()) {
    if (absl::Status s = WriteNpy(args.out, NpyDType::kFloat32, p->shape, p->scores.data());
        !s.ok()) {
      return fail(std::string(s.message()));
    }
  } else {
    Print(*p, job->training().loss() == v1::LOSS_CROSS_ENTROPY);
  }
  std::fflush(stdout);  // the lines before the summary, whichever stream it goes to
  std::fprintf(args.out.empty() ? stderr : stdout,
               "strata predict: %lld example(s) from %s%s\n", static_cast<long long>(p->shape[0]),
               p->source.c_str(),
               args.out.empty() ? ""
                                : absl::StrCat("; outputs, shape [", absl::StrJoin(p->shape, ", "),
                                               "], in ", args.out)
                                      .c_str());
  return 0;
}

}  // namespace

void AddPredictCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "predict",
      "the model's outputs for examples in a .npy file: a running stream job answers from a "
      "replica's live weights, a finished run from its final model");
  auto args = std::make_shared<PredictArgs>();
  cmd->add_option("run_dir", args->run_dir, "the run directory")->required();
  cmd->add_option("--input", args->input,
                  "the examples: a .npy array of shape (N, the example's shape), float32, float64 "
                  "or uint8 pixels")
      ->required();
  cmd->add_option("--replica", args->replica,
                  "a stream job's replica that answers (default 0)");
  cmd->add_option("--out", args->out,
                  "write the outputs here (.npy, float32 [N, outputs]) instead of printing the "
                  "class of each example");
  cmd->add_option("--checkpoint", args->checkpoint,
                  "answer from these weights instead (a checkpoint of the run's model)");
  cmd->callback([=] { *exit_code = RunPredict(*args); });
}

}  // namespace strata::cli
