#include "services/evaluator/evaluator.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <set>
#include <thread>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <grpcpp/grpcpp.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/base/run_paths.h"
#include "services/common/base/status.h"
#include "services/common/ml/predict_input.h"
#include "services/common/ml/trainer.h"
#include "services/common/wire/npy_file.h"
#include "services/common/wire/partition_plan.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/tensor_codec.h"
#include "strata/v1/evaluator.grpc.pb.h"
#include "strata/v1/parameter_server.grpc.pb.h"
#include "strata/v1/worker.grpc.pb.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

// Examples per forward pass of --predict: what one Predict request to a live replica holds.
constexpr int64_t kPredictBatch = 1024;

std::atomic<bool> g_signalled{false};
void OnSignal(int) { g_signalled = true; }

absl::StatusOr<std::unique_ptr<Trainer>> MakeTrainer(const v1::ResolvedJob& job, int threads) {
  STRATA_ASSIGN_OR_RETURN(Dataset dataset, LoadDataset(DatasetOptionsFor(job)));
  ConfigureTorchThreads(threads);
  // The model a worker builds from the job's seed; the evaluator only scores it.
  TrainerOptions options = TrainerOptions::ForWorker(job);
  options.threads = threads;
  options.augment = false;
  return Trainer::Create(options, std::make_shared<const Dataset>(std::move(dataset)));
}

std::vector<std::string> Names(const FlatLayout& layout) {
  std::vector<std::string> names;
  for (const FlatEntry& e : layout.entries()) names.push_back(e.spec.name);
  return names;
}

// What the evaluator shows Prometheus (docs/user-guide.md, "Watching a job").
class EvaluatorMetrics {
 public:
  explicit EvaluatorMetrics(prometheus::Registry& registry)
      : evaluations_(prometheus::BuildCounter()
                         .Name("strata_evaluator_evaluations_total")
                         .Help("Models scored on the held-out split")
                         .Register(registry)
                         .Add({})),
        val_loss_(prometheus::BuildGauge()
                      .Name("strata_evaluator_val_loss")
                      .Help("Held-out loss of the last model scored")
                      .Register(registry)
                      .Add({})),
        val_accuracy_(prometheus::BuildGauge()
                          .Name("strata_evaluator_val_accuracy")
                          .Help("Held-out accuracy (0 to 1) of the last model scored")
                          .Register(registry)
                          .Add({})),
        seconds_(prometheus::BuildHistogram()
                     .Name("strata_evaluator_evaluation_seconds")
                     .Help("Time to score one model on the held-out split (its fetch not included)")
                     .Register(registry)
                     .Add({}, ExponentialBuckets(0.01, 2, 14))) {}

  void Scored(double loss, double accuracy, double seconds) {
    val_loss_.Set(loss);
    val_accuracy_.Set(accuracy);
    seconds_.Observe(seconds);
    evaluations_.Increment();  // last: a scrape that sees the count sees its figures
  }

 private:
  prometheus::Counter& evaluations_;
  prometheus::Gauge& val_loss_;
  prometheus::Gauge& val_accuracy_;
  prometheus::Histogram& seconds_;
};

class EvaluatorService final : public v1::Evaluator::Service {
 public:
  EvaluatorService(const EvaluatorOptions& options, Trainer* trainer, EvaluatorMetrics* metrics)
      : options_(options), trainer_(trainer), metrics_(metrics) {}

  // The model at `request`'s source: a worker, the parameter servers or a checkpoint in the run
  // directory; *source says which, for the metrics.
  absl::Status Fetch(const v1::EvaluateModelRequest& request, std::vector<NamedTensor>* tensors,
                     std::string* source) {
    if (!request.worker().empty()) {
      *source = absl::StrCat("worker ", request.worker());
      // An epoch of all-reduce is scored on the model the worker kept at its end; the live model
      // only if it no longer holds that one, and the source says so.
      if (request.phase() == "allreduce" && request.epoch() > 0) {
        const absl::Status held = FetchFromWorker(request.worker(), request.epoch(), tensors);
        if (!absl::IsFailedPrecondition(held)) return held;
        absl::StrAppend(source, " (its live model: ", held.message(), ")");
      }
      return FetchFromWorker(request.worker(), 0, tensors);
    }
    if (request.parameter_servers_size() > 0) {
      *source = absl::StrCat(request.parameter_servers_size(), " parameter server(s)");
      std::vector<NamedTensor> pieces;
      for (int i = 0; i < request.parameter_servers_size(); ++i) {
        STRATA_RETURN_IF_ERROR(FetchFromServer(i, request.parameter_servers(i), &pieces));
      }
      // Tensors split over the servers come back whole (partition_plan.h).
      STRATA_ASSIGN_OR_RETURN(std::vector<NamedTensor> joined, JoinPieces(std::move(pieces)));
      for (NamedTensor& t : joined) tensors->push_back(std::move(t));
      return absl::OkStatus();
    }
    if (!request.checkpoint().empty()) {
      *source = absl::StrCat("checkpoint ", request.checkpoint());
      STRATA_ASSIGN_OR_RETURN(
          std::string path,
          ResolveInRunDir(options_.run_dir, request.checkpoint(), "Evaluate checkpoint"));
      STRATA_ASSIGN_OR_RETURN(Checkpoint c, ReadCheckpoint(path, options_.run_dir));
      for (auto& e : c.entries) {
        if (e.kind != TensorKind::kMomentum) tensors->push_back(std::move(e.tensor));
      }
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        "Evaluate: name a source (worker, parameter_servers or checkpoint)");
  }

  // `strata predict` on a running job of a strategy other than stream: the model where the run
  // keeps it now, fetched as Evaluate fetches it, answers; the request is checked first.
  grpc::Status Predict(grpc::ServerContext*, const v1::EvaluatorPredictRequest* request,
                       v1::PredictReply* reply) override {
    auto input = CheckPredictInput(request->request().input(), trainer_->dataset());
    if (!input.ok()) return ToGrpcStatus(input.status());
    std::vector<NamedTensor> tensors;
    std::string source;
    if (absl::Status s = Fetch(request->source(), &tensors, &source); !s.ok()) {
      return ToGrpcStatus(s);
    }
    std::lock_guard<std::mutex> lock(eval_mu_);  // one model in the trainer at a time
    auto c = TensorsToCheckpoint(std::move(tensors), Names(trainer_->parameters()),
                                 Names(trainer_->buffers()));
    if (!c.ok()) return ToGrpcStatus(c.status());
    if (absl::Status s = Annotate(trainer_->LoadCheckpoint(*c), source); !s.ok()) {
      return ToGrpcStatus(s);
    }
    std::vector<int64_t> shape;
    auto scores = trainer_->Predict(input->features, input->examples, &shape);
    if (!scores.ok()) return ToGrpcStatus(scores.status());
    SetPredictScores(*scores, shape, reply->mutable_scores());
    reply->set_source(source);
    return grpc::Status::OK;
  }

  grpc::Status Evaluate(grpc::ServerContext*, const v1::EvaluateModelRequest* request,
                        v1::EvalMetrics* reply) override {
    const auto start = Clock::now();
    std::vector<NamedTensor> tensors;
    std::string source;
    const absl::Status fetched = Fetch(*request, &tensors, &source);
    if (!fetched.ok()) return ToGrpcStatus(fetched);
    auto metrics =
        Score(std::move(tensors), source, request->epoch() >= options_.job.training().epochs());
    if (!metrics.ok()) return ToGrpcStatus(metrics.status());
    metrics->set_epoch(request->epoch());
    metrics->set_phase(request->phase());
    metrics->set_train_loss(request->train_loss());
    metrics->set_wall_s(request->wall_s());
    metrics->set_eval_s(std::chrono::duration<double>(Clock::now() - start).count());
    Publish(*metrics);
    *reply = *metrics;
    return grpc::Status::OK;
  }

  grpc::Status EvaluateTensors(grpc::ServerContext*, const v1::EvaluateRequest* request,
                               v1::EvalMetrics* reply) override {
    std::vector<v1::TensorChunk> chunks(request->tensors().begin(), request->tensors().end());
    auto tensors = DecodeAll(chunks);
    if (!tensors.ok()) return ToGrpcStatus(tensors.status());
    auto metrics = Score(std::move(*tensors), "request");
    if (!metrics.ok()) return ToGrpcStatus(metrics.status());
    Publish(*metrics);
    *reply = *metrics;
    return grpc::Status::OK;
  }

  grpc::Status Watch(grpc::ServerContext* context, const v1::WatchMetricsRequest*,
                     grpc::ServerWriter<v1::EvalMetrics>* writer) override {
    size_t sent = 0;
    for (;;) {
      std::vector<v1::EvalMetrics> pending;
      {
        std::unique_lock<std::mutex> lock(mu_);
        // Wakes at least every 200 ms to notice a cancelled stream or Stop.
        cv_.wait_for(lock, std::chrono::milliseconds(200),
                     [&] { return stopping_ || history_.size() > sent; });
        if (stopping_) return grpc::Status::OK;
        pending.assign(history_.begin() + static_cast<long>(sent), history_.end());
        sent = history_.size();
      }
      for (const auto& m : pending) {
        if (!writer->Write(m)) return grpc::Status::OK;
      }
      if (context->IsCancelled()) return grpc::Status::OK;
    }
  }

  grpc::Status GetStatus(grpc::ServerContext*, const v1::EvaluatorStatusRequest*,
                         v1::EvaluatorStatus* reply) override {
    std::lock_guard<std::mutex> lock(mu_);
    reply->set_evaluations(static_cast<int64_t>(history_.size()));
    if (!history_.empty()) {
      reply->set_last_epoch(history_.back().epoch());
      reply->set_source(history_.back().source());
    }
    return grpc::Status::OK;
  }

  grpc::Status Stop(grpc::ServerContext*, const v1::StopRequest* request, v1::StopReply*) override {
    spdlog::info("stop requested: {}", request->reason());
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    return grpc::Status::OK;
  }

  bool stopping() {
    std::lock_guard<std::mutex> lock(mu_);
    return stopping_;
  }

 private:
  // The worker's model at the end of `epoch`, or its live model for epoch 0 (v1::ModelRequest).
  absl::Status FetchFromWorker(const std::string& address, int64_t epoch,
                               std::vector<NamedTensor>* out) {
    auto stub = v1::Worker::NewStub(MakeChannel(address));
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(options_.fetch_deadline));
    v1::ModelRequest request;
    request.set_epoch(epoch);
    auto reader = stub->GetModel(&context, request);
    std::vector<v1::TensorChunk> chunks;
    v1::TensorChunk chunk;
    while (reader->Read(&chunk)) chunks.push_back(chunk);
    STRATA_RETURN_IF_ERROR(
        FromGrpcStatus(reader->Finish(), absl::StrCat("GetModel from worker at ", address)));
    STRATA_ASSIGN_OR_RETURN(auto tensors, DecodeAll(chunks));
    for (auto& t : tensors) out->push_back(std::move(t));
    return absl::OkStatus();
  }

  absl::Status FetchFromServer(int partition, const std::string& address,
                               std::vector<NamedTensor>* out) {
    auto stub = v1::ParameterServer::NewStub(MakeChannel(address));
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(options_.fetch_deadline));
    v1::PullRequest request;
    // An observer, not a worker: -1 takes no part in BSP rounds or SSP clocks, clock 0 never waits.
    request.set_worker(-1);
    request.set_clock(0);
    auto reader = stub->Pull(&context, request);
    std::vector<v1::TensorChunk> chunks;
    v1::PullResponse response;
    while (reader->Read(&response)) {
      if (response.has_chunk()) chunks.push_back(response.chunk());
    }
    STRATA_RETURN_IF_ERROR(FromGrpcStatus(
        reader->Finish(), absl::StrCat("Pull from parameter server ", partition, " at ", address)));
    STRATA_ASSIGN_OR_RETURN(auto tensors, DecodeAll(chunks));
    for (auto& t : tensors) out->push_back(std::move(t));
    return absl::OkStatus();
  }

  // `final_epoch`: the model at the end of training, which the run keeps.
  absl::StatusOr<v1::EvalMetrics> Score(std::vector<NamedTensor> tensors, const std::string& source,
                                        bool final_epoch = false) {
    // One model in the trainer at a time.
    std::lock_guard<std::mutex> lock(eval_mu_);
    STRATA_ASSIGN_OR_RETURN(Checkpoint c,
                            TensorsToCheckpoint(std::move(tensors), Names(trainer_->parameters()),
                                                Names(trainer_->buffers())));
    const auto began = Clock::now();
    STRATA_RETURN_IF_ERROR(Annotate(trainer_->LoadCheckpoint(c), source));
    STRATA_ASSIGN_OR_RETURN(EvalResult r, trainer_->Evaluate());
    metrics_->Scored(r.loss, r.accuracy,
                     std::chrono::duration<double>(Clock::now() - began).count());
    v1::EvalMetrics m;
    m.set_val_loss(r.loss);
    m.set_val_acc(r.accuracy);
    m.set_val_rmse(r.rmse);
    m.set_examples(r.examples);
    m.set_source(source);
    spdlog::info("evaluated model from {}: val_loss {:.4f} val_acc {:.4f} on {} examples", source,
                 r.loss, r.accuracy, r.examples);
    if (final_epoch && !options_.run_dir.empty()) {
      // The model whose score the run reports last: what `strata export` hands back.
      const std::string path = RunPaths(options_.run_dir).At(run_files::kFinalCheckpoint);
      if (absl::Status s = WriteCheckpoint(path, trainer_->ToCheckpoint(0, 0, 0)); !s.ok()) {
        spdlog::warn("cannot keep the final model in {}: {}", path, std::string(s.message()));
      }
    }
    return m;
  }

  void Publish(const v1::EvalMetrics& m) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      history_.push_back(m);
    }
    cv_.notify_all();
  }

  const EvaluatorOptions& options_;
  Trainer* trainer_;
  EvaluatorMetrics* const metrics_;
  std::mutex eval_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::EvalMetrics> history_;
  bool stopping_ = false;
};

}  // namespace

absl::StatusOr<Checkpoint> TensorsToCheckpoint(std::vector<NamedTensor> tensors,
                                               const std::vector<std::string>& parameter_names,
                                               const std::vector<std::string>& buffer_names) {
  const std::set<std::string> params(parameter_names.begin(), parameter_names.end());
  const std::set<std::string> buffers(buffer_names.begin(), buffer_names.end());
  std::set<std::string> seen;
  Checkpoint c;
  for (NamedTensor& t : tensors) {
    TensorKind kind;
    if (params.count(t.name())) {
      kind = TensorKind::kParameter;
    } else if (buffers.count(t.name())) {
      kind = TensorKind::kBuffer;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name(), "' is not part of the model"));
    }
    if (!seen.insert(t.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name(), "' arrived twice"));
    }
    c.entries.push_back({kind, std::move(t)});
  }
  return c;
}

absl::StatusOr<std::string> DescribeJob(const v1::ResolvedJob& job) {
  STRATA_ASSIGN_OR_RETURN(auto trainer, MakeTrainer(job, 1));
  nlohmann::json tensors = nlohmann::json::array();
  for (const FlatEntry& e : trainer->parameters().entries()) {
    tensors.push_back({{"name", e.spec.name}, {"shape", e.spec.shape}, {"kind", "parameter"}});
  }
  for (const FlatEntry& e : trainer->buffers().entries()) {
    tensors.push_back({{"name", e.spec.name}, {"shape", e.spec.shape}, {"kind", "buffer"}});
  }
  nlohmann::json out = {{"arch", Spelled(job.arch())},
                        {"dataset", Spelled(job.dataset().name())},
                        {"train_examples", trainer->dataset().train.size()},
                        {"test_examples", trainer->dataset().test.size()},
                        {"parameters", trainer->parameter_count()},
                        {"tensor_count", tensors.size()},
                        {"tensors", tensors}};
  return out.dump(2);
}

absl::Status WriteInitialCheckpoint(const v1::ResolvedJob& job, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(auto trainer, MakeTrainer(job, 1));
  return WriteCheckpoint(path, trainer->ToCheckpoint(0, 0, 0));
}

namespace {

// The checks of CheckDataAndModel, each problem without the key it is about.
absl::Status CheckDataAndModelUnkeyed(const v1::ResolvedJob& job, std::string* key) {
  *key = "dataset.path";
  DatasetOptions data = DatasetOptionsFor(job);
  data.scan_features = true;
  STRATA_ASSIGN_OR_RETURN(Dataset dataset, LoadDataset(data));
  const std::string origin = job.dataset().name() == v1::DATASET_NPY
                                 ? std::string(kNpyTrainTargets)
                                 : Spelled(job.dataset().name());
  if (dataset.test.size() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(job.dataset().path(), ": no held-out examples (", kNpyTestFeatures, " and ",
                     kNpyTestTargets, "): every job evaluates its model on them after each epoch"));
  }
  const v1::Loss loss = job.training().loss();
  *key = "training.loss";
  if (loss == v1::LOSS_CROSS_ENTROPY && !dataset.class_labels()) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin,
        ": float targets, but training.loss cross_entropy needs class labels (an integer "
        "array); use training.loss mse or bce_with_logits"));
  }
  if (loss != v1::LOSS_CROSS_ENTROPY && dataset.class_labels()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": class labels, but training.loss ", Spelled(loss),
                     " needs float targets; use training.loss cross_entropy"));
  }
  *key = "dataset.path";
  if (loss == v1::LOSS_BCE_WITH_LOGITS) {
    for (const DatasetSplit* split : {&dataset.train, &dataset.test}) {
      for (size_t i = 0; i < split->targets.size(); ++i) {
        const float t = split->targets[i];
        if (t < 0 || t > 1) {
          return absl::InvalidArgumentError(
              absl::StrCat(origin, ": example ", i / dataset.target_floats(), " holds the target ",
                           t, "; bce_with_logits needs targets in [0, 1]"));
        }
      }
    }
  }
  const int64_t classes_seen = dataset.num_classes;
  *key = job.model().torchscript().empty() ? "model.arch" : "model.torchscript";
  auto shared = std::make_shared<const Dataset>(std::move(dataset));
  TrainerOptions options = TrainerOptions::ForWorker(job);
  options.threads = 1;
  STRATA_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(options, shared));
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> out, trainer->ProbeOutputShape());
  const std::string model = job.model().torchscript().empty()
                                ? absl::StrCat("model ", Spelled(job.arch()))
                                : job.model().torchscript();
  auto shape = [](const std::vector<int64_t>& s) { return absl::StrJoin(s, "x"); };
  if (loss == v1::LOSS_CROSS_ENTROPY) {
    if (out.size() != 2 || out[0] != 1 || out[1] < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(model, ": outputs ", shape(out),
                       " for one example; cross_entropy needs logits [1, C] "
                       "with C >= 2 classes"));
    }
    if (classes_seen > out[1]) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": labels up to ", classes_seen - 1, ", but ", model, " outputs ",
                       out[1], " logits: every label must lie in [0, ", out[1], ")"));
    }
  } else {
    int64_t values = 1;
    for (int64_t d : out) values *= d;
    if (values != static_cast<int64_t>(shared->target_floats())) {
      return absl::InvalidArgumentError(
          absl::StrCat(model, ": outputs ", shape(out), " for one example, but each target holds ",
                       shared->target_floats(), " value(s) (", origin, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDataAndModel(const v1::ResolvedJob& job) {
  std::string key;
  absl::Status s = CheckDataAndModelUnkeyed(job, &key);
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(key, ": ", s.message()));
}

absl::Status ExportModel(const v1::ResolvedJob& job, const std::string& checkpoint,
                         const std::string& out) {
  if (job.model().torchscript().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job trains the built-in model ", Spelled(job.arch()),
                     ", which has no TorchScript module to write back into; its weights are in ",
                     checkpoint, " (docs/data-and-models.md, \"Checkpoints\")"));
  }
  STRATA_ASSIGN_OR_RETURN(Checkpoint c, ReadCheckpoint(checkpoint));
  return ExportTorchScript(job.model().torchscript(), c, out);
}

absl::Status PredictFromCheckpoint(const v1::ResolvedJob& job, const std::string& checkpoint,
                                   const std::string& input, const std::string& out) {
  STRATA_ASSIGN_OR_RETURN(NpyArray x, OpenNpy(input));
  if (x.dtype() != NpyDType::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat(input, ": ", x.Describe(), "; the examples must be float32"));
  }
  STRATA_ASSIGN_OR_RETURN(auto trainer, MakeTrainer(job, 1));
  STRATA_RETURN_IF_ERROR(Annotate(trainer->dataset().CheckExampleBatch(x.shape(), 0), input));
  if (const std::optional<int64_t> row = FirstNonFiniteRow(x); row.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        input, ": example ", *row, " holds a value that is not finite (NaN or infinity)"));
  }
  STRATA_ASSIGN_OR_RETURN(Checkpoint c, ReadCheckpoint(checkpoint));
  STRATA_RETURN_IF_ERROR(Annotate(trainer->LoadCheckpoint(c), checkpoint));
  // In batches of the size Predict takes live, so that memory does not grow with the input.
  std::vector<float> scores;
  std::vector<int64_t> shape;
  const int64_t floats = x.row_elements();
  for (int64_t first = 0; first < x.rows(); first += kPredictBatch) {
    const int64_t n = std::min<int64_t>(kPredictBatch, x.rows() - first);
    std::vector<float> features(static_cast<size_t>(n * floats));
    RowsToFloat(x, first, n, features.data());
    STRATA_ASSIGN_OR_RETURN(std::vector<float> part, trainer->Predict(features, n, &shape));
    scores.insert(scores.end(), part.begin(), part.end());
  }
  shape[0] = x.rows();
  return WriteNpy(out, NpyDType::kFloat32, shape, scores.data());
}

absl::Status RunEvaluator(const EvaluatorOptions& options) {
  STRATA_ASSIGN_OR_RETURN(auto trainer, MakeTrainer(options.job, options.threads));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<MetricsEndpoint> metrics_endpoint,
                          MetricsEndpoint::Start(options.metrics));
  EvaluatorMetrics metrics(metrics_endpoint->registry());
  if (metrics_endpoint->port() > 0) {
    spdlog::info("metrics on port {} (/metrics)", metrics_endpoint->port());
  }
  EvaluatorService service(options, trainer.get(), &metrics);
  int port = 0;
  std::unique_ptr<grpc::Server> server = StartServer(options.listen, {&service}, &port);
  if (!server || port == 0)
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  if (!options.port_file.empty()) {
    STRATA_RETURN_IF_ERROR(WriteFileAtomic(options.port_file, std::to_string(port) + "\n"));
  }
  spdlog::info("evaluator serving on port {} ({} held-out examples, model {})", port,
               trainer->dataset().test.size(), ModelText(options.job));
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  while (!service.stopping() && !g_signalled) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // waiting for Stop or a signal
  }
  server->Shutdown(DeadlineAfter(std::chrono::seconds(2)));
  return absl::OkStatus();
}

}  // namespace strata
