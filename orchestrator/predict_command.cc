// `strata predict RUN_DIR --input X.npy [--replica R] [--out SCORES.npy]`: the model's outputs
// for the examples in X.npy. A running job answers from its live model: the request goes through
// the orchestrator's control socket (which only the run's user can reach), and the orchestrator,
// which holds the run token, passes it on: to a stream job's replica (StreamReplica.Predict), or,
// for any other strategy, to the evaluator, which fetches the model where the run keeps it now
// (Evaluator.Predict). A finished run answers from its final model (a stream replica's final
// weights, or checkpoints/final.ckpt), which strata-evaluator loads, since the orchestrator has no
// LibTorch. docs/user-guide.md, "Predictions".
//
// The examples are read as hostile input: the .npy header is parsed strictly, a value that is not
// finite is refused with its row, and the shape is checked against the model's by whoever runs it.
// uint8 arrays are pixels and are scaled by 1/255, as the data sets read them.
#include <stdlib.h>

#include <algorithm>
#include <cstring>
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

// What any model could take: a float or uint8 array of N >= 1 examples, every value finite.
absl::Status CheckExamples(const NpyArray& x) {
  if (!NpyIsFloat(x.dtype()) && x.dtype() != NpyDType::kUInt8) {
    return absl::InvalidArgumentError(absl::StrCat(
        x.origin(), ": ", x.Describe(),
        "; examples are float32 or float64 (as the data set's features), or uint8 pixels"));
  }
  if (x.shape().size() < 2 || x.rows() == 0 || x.row_elements() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        x.origin(), ": ", x.Describe(),
        "; the examples come as an array of shape (N, the example's shape), N >= 1 (one example "
        "x: x[None])"));
  }
  if (const std::optional<int64_t> row = FirstNonFiniteRow(x); row.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        x.origin(), ": example ", *row, " holds a value that is not finite (NaN or infinity)"));
  }
  return absl::OkStatus();
}

// Examples [first, first + n) as float32, the way the data sets hold them (uint8 scaled by 1/255).
std::vector<float> ExamplesAsFloat(const NpyArray& x, int64_t first, int64_t n) {
  std::vector<float> floats(static_cast<size_t>(n * x.row_elements()));
  RowsToFloat(x, first, n, floats.data());
  if (x.dtype() == NpyDType::kUInt8) {
    for (float& v : floats) v *= 1.0f / 255.0f;
  }
  return floats;
}

// The outputs per example a reply for `n` examples holds, or an error when its header and its
// data disagree (the answer comes from another process: it is checked before it is read).
absl::StatusOr<int64_t> OutputsPerExample(const v1::TensorChunk& scores, int64_t n) {
  const v1::TensorHeader& h = scores.header();
  const std::vector<int64_t> shape(h.shape().begin(), h.shape().end());
  int64_t per = shape.size() >= 2 && shape[0] == n ? 1 : -1;
  for (size_t d = 1; per > 0 && d < shape.size(); ++d) {
    per = shape[d] >= 1 && shape[d] <= (int64_t{1} << 31) / per ? per * shape[d] : -1;
  }
  if (h.dtype() != v1::DTYPE_FLOAT32 || per <= 0 ||
      scores.data().size() != static_cast<size_t>(n * per) * sizeof(float)) {
    return absl::DataLossError(absl::StrCat("an answer for ", n, " examples with scores of shape [",
                                            absl::StrJoin(shape, ", "), "] and ",
                                            scores.data().size(), " bytes"));
  }
  return per;
}

// From a replica of the running stream job, through the orchestrator.
absl::StatusOr<Predictions> PredictLive(const std::string& socket, const NpyArray& x, int replica) {
  Predictions p;
  const int64_t row_floats = x.row_elements();
  const int64_t per_request = std::clamp<int64_t>(
      kBytesPerRequest / std::max<int64_t>(1, row_floats * 4), 1, kExamplesPerRequest);
  uint64_t lowest = UINT64_MAX, highest = 0;
  uint32_t answered_by = 0;
  std::string evaluator_source;  // a job of another strategy: the evaluator says where from
  for (int64_t first = 0; first < x.rows(); first += per_request) {
    const int64_t n = std::min(per_request, x.rows() - first);
    const std::vector<float> floats = ExamplesAsFloat(x, first, n);
    v1::RunPredictRequest request;
    request.set_replica(replica);
    v1::TensorChunk* input = request.mutable_request()->mutable_input();
    input->mutable_header()->set_name("examples");
    input->mutable_header()->set_dtype(v1::DTYPE_FLOAT32);
    input->mutable_header()->add_shape(n);
    for (size_t d = 1; d < x.shape().size(); ++d) input->mutable_header()->add_shape(x.shape()[d]);
    input->set_data(reinterpret_cast<const char*>(floats.data()), floats.size() * sizeof(float));
    STRATA_ASSIGN_OR_RETURN(v1::PredictReply reply,
                            PredictThroughRun(socket, request, kRequestDeadline));
    auto per = OutputsPerExample(reply.scores(), n);
    if (!per.ok()) return Annotate(per.status(), absl::StrCat("replica ", replica));
    const v1::TensorHeader& h = reply.scores().header();
    std::vector<int64_t> shape(h.shape().begin(), h.shape().end());
    shape[0] = x.rows();
    if (!p.shape.empty() && shape != p.shape) {
      return absl::DataLossError(absl::StrCat("replica ", replica,
                                              " answered with another output shape midway"));
    }
    p.shape = shape;
    const size_t at = p.scores.size();
    p.scores.resize(at + static_cast<size_t>(n * *per));
    std::memcpy(p.scores.data() + at, reply.scores().data().data(), reply.scores().data().size());
    answered_by = reply.replica();
    evaluator_source = reply.source();
    lowest = std::min<uint64_t>(lowest, reply.model_version());
    highest = std::max<uint64_t>(highest, reply.model_version());
  }
  // The replica named is the one that says it answered.
  p.source = !evaluator_source.empty()
                 ? absl::StrCat("the live model of ", evaluator_source, " (by the evaluator)")
                 : absl::StrCat("replica ", answered_by, ", live weights, model version ", lowest,
                                highest != lowest ? absl::StrCat(" to ", highest) : "",
                                " (gradients applied)");
  return p;
}

// From the run's final model (or --checkpoint), by strata-evaluator.
absl::StatusOr<Predictions> PredictFinished(const PredictArgs& args, const RunPaths& paths,
                                            bool stream, const NpyArray& x) {
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
  std::string pattern =
      (std::filesystem::temp_directory_path() / "strata-predict-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot make a temporary directory (", pattern, ")"));
  }
  const std::string dir = pattern;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } cleanup{dir};
  // The evaluator reads float32 only: another dtype is converted once, here.
  std::string examples = args.input;
  if (x.dtype() != NpyDType::kFloat32) {
    examples = absl::StrCat(dir, "/examples.npy");
    STRATA_RETURN_IF_ERROR(WriteNpy(examples, NpyDType::kFloat32, x.shape(),
                                    ExamplesAsFloat(x, 0, x.rows()).data()));
  }
  const std::string scores = absl::StrCat(dir, "/scores.npy");
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
    for (size_t at; examples != args.input && (at = said.find(examples)) != std::string::npos;) {
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
  if (absl::Status s = CheckExamples(*x); !s.ok()) return fail(std::string(s.message()));

  // What the run is comes from its job; whether it still runs, from status.json and the control
  // socket (a stream run writes status.json only once its replicas have started).
  const bool stream = job->strategy().kind() == v1::STRATEGY_KIND_STREAM;
  const int replicas = job->cluster().workers();
  if (stream && (args.replica < 0 || args.replica >= replicas)) {
    return fail(absl::StrCat("there is no replica ", args.replica, ": the run has ", replicas,
                             " (0 to ", replicas - 1, ")"));
  }
  nlohmann::json status = nlohmann::json::parse(ReadFile(paths.status).value_or(""), nullptr,
                                                /*allow_exceptions=*/false);
  if (!status.is_object()) status = nlohmann::json::object();
  const std::string socket = status.value("control_socket", "");
  const bool running = status.value("state", "") == "running" &&
                       ProbeOrchestrator(socket, status.value("updated", 0.0)) !=
                           OrchestratorLiveness::kGone;
  absl::StatusOr<Predictions> p;
  if (running && args.checkpoint.empty()) {
    if (socket.empty()) {
      return fail("the run publishes no control socket (its orchestrator runs elsewhere)");
    }
    p = PredictLive(socket, *x, args.replica);
  } else if (stream && !status.contains("state") && !FileExists(paths.summary)) {
    return fail("the stream run has not started serving yet: ask again in a few seconds");
  } else {
    p = PredictFinished(args, paths, stream, *x);
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
      "the model's outputs for examples in a .npy file: a running job answers from its live "
      "model (a stream replica's, or the one its evaluator fetches), a finished run from its "
      "final model");
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
