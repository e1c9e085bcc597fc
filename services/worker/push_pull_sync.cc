#include "services/worker/push_pull_sync.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <thread>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <spdlog/spdlog.h>

#include "services/common/flat_layout.h"
#include "services/common/rpc.h"
#include "services/common/status.h"
#include "services/common/tensor_codec.h"
#include "strata/v1/parameter_server.grpc.pb.h"

namespace strata {
namespace {

// One model tensor as the worker holds it: trainable parameters live in the trainer's fused
// buffers (parameters, gradients), float buffers in a copy the synchroniser keeps.
struct ModelTensor {
  TensorSpec spec;
  bool is_buffer = false;
  size_t offset = 0;  // floats, into the fused parameter buffer or the buffer copy
};

struct ServerLink {
  int index = 0;
  std::string address;
  std::unique_ptr<v1::ParameterServer::Stub> stub;
  std::vector<size_t> tensors;  // indices into the model tensor list, in model order
  int64_t version = 0;          // the model version last pulled from this partition
  int64_t installed_version = 0;  // the version of this partition the trainer computes on
  int64_t samples = 0, sample_budget = 0;  // as of the last reply (PullHeader)
  bool reply_ended = false;  // the last reply's stream was read to its end (or broke)
  std::string context(const char* what) const {
    return absl::StrCat(what, " parameter server ", index, " (", address, ")");
  }
};

// What one exchange reads (the step's gradients and buffer values) and where it writes the reply
// (weights in the trainer's fused layout, buffer values).
struct ExchangeBuffers {
  const float* gradients = nullptr;
  const float* buffers_out = nullptr;
  float* parameters_in = nullptr;
  float* buffers_in = nullptr;
};

class PushPullSynchroniser final : public Synchroniser {
 public:
  PushPullSynchroniser(PushPullOptions options, std::vector<ModelTensor> model,
                       std::vector<ServerLink> servers, size_t parameter_floats,
                       size_t buffer_floats)
      : options_(std::move(options)),
        model_(std::move(model)),
        servers_(std::move(servers)),
        buffers_(buffer_floats) {
    if (options_.pipeline) {
      gradients_out_.resize(parameter_floats);
      buffers_out_.resize(buffer_floats);
      parameters_in_.resize(parameter_floats);
      buffers_in_.resize(buffer_floats);
    }
  }

  std::string name() const override { return options_.pipeline ? "push-pull (pipelined)" : "push-pull"; }

  absl::Status Start(Trainer& trainer) override {
    STRATA_RETURN_IF_ERROR(ForEachServer([&](ServerLink& s) { return PullFrom(s, trainer); }));
    trainer.SetBuffersFrom(buffers_.data());
    for (ServerLink& s : servers_) s.installed_version = s.version;
    return absl::OkStatus();
  }

  absl::StatusOr<StepOutcome> Step(Trainer& trainer, const StepContext& context) override {
    ++steps_;
    // Push/pull workers do not move in lockstep: a vote concerns this worker alone.
    StepOutcome outcome;
    outcome.all_ready_to_switch = context.ready_to_switch;
    if (!options_.pipeline) {
      trainer.CopyBuffersTo(buffers_.data());
      const ExchangeBuffers x{trainer.gradient_data(), buffers_.data(), trainer.parameter_data(),
                              buffers_.data()};
      STRATA_RETURN_IF_ERROR(
          ForEachServer([&](ServerLink& s) { return Exchange(s, x, context); }));
      trainer.SetBuffersFrom(buffers_.data());
      for (ServerLink& s : servers_) s.installed_version = s.version;
      ReadBudget(outcome);
      return outcome;
    }
    // The previous step's exchange has been travelling while this step computed; its model is
    // the one the next step computes on, so this step's gradients reach the servers one version
    // later than without the pipeline (the staleness it adds, at most one).
    STRATA_RETURN_IF_ERROR(Drain(trainer));
    ReadBudget(outcome);  // before the next exchange starts writing the links
    if (outcome.budget_spent) return outcome;  // the servers would discard this step's push
    std::memcpy(gradients_out_.data(), trainer.gradient_data(),
                gradients_out_.size() * sizeof(float));
    trainer.CopyBuffersTo(buffers_out_.data());
    const ExchangeBuffers x{gradients_out_.data(), buffers_out_.data(), parameters_in_.data(),
                            buffers_in_.data()};
    in_flight_ = std::async(std::launch::async, [this, x, context] {
      return ForEachServer([&](ServerLink& s) { return Exchange(s, x, context); });
    });
    return outcome;
  }

  // Waits for the exchange in flight (pipelined) and gives the trainer its model.
  absl::Status Drain(Trainer& trainer) override {
    if (!in_flight_.valid()) return absl::OkStatus();
    STRATA_RETURN_IF_ERROR(in_flight_.get());
    std::memcpy(trainer.parameter_data(), parameters_in_.data(),
                parameters_in_.size() * sizeof(float));
    trainer.SetBuffersFrom(buffers_in_.data());
    for (ServerLink& s : servers_) s.installed_version = s.version;
    return absl::OkStatus();
  }

 private:
  // The job's sample budget as the last replies reported it. Every partition counts every push;
  // any one that has reached the budget ends the job.
  void ReadBudget(StepOutcome& outcome) const {
    for (const ServerLink& s : servers_) {
      outcome.has_budget = outcome.has_budget || s.sample_budget > 0;
      outcome.budget_spent =
          outcome.budget_spent || (s.sample_budget > 0 && s.samples >= s.sample_budget);
    }
  }

  // Runs `f` for every partition at once (the last on this thread); returns the first error in
  // partition order, so the message names the server that failed.
  template <typename F>
  absl::Status ForEachServer(F&& f) {
    std::vector<absl::Status> results(servers_.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i + 1 < servers_.size(); ++i) {
      threads.emplace_back([&, i] { results[i] = f(servers_[i]); });
    }
    results.back() = f(servers_.back());
    for (auto& t : threads) t.join();
    for (const auto& r : results) STRATA_RETURN_IF_ERROR(r);
    return absl::OkStatus();
  }


  std::unique_ptr<grpc::ClientContext> NewContext() const {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(DeadlineAfter(options_.deadline));
    return context;
  }

  // Reads a pull answer (header, then this partition's tensors) into `parameters` (the fused
  // layout) and `buffers`.
  template <typename Stream>
  absl::Status Receive(ServerLink& s, float* parameters, float* buffers, Stream* stream) {
    v1::PullResponse response;
    s.reply_ended = false;
    if (!stream->Read(&response)) {
      s.reply_ended = true;
      // Finish() says why the server ended the call; this only shows if it claims success.
      return absl::UnavailableError("the reply ended before its header");
    }
    if (!response.has_header()) {
      return absl::InternalError("the reply did not start with a PullHeader");
    }
    const v1::PullHeader header = response.header();
    std::vector<bool> seen(s.tensors.size(), false);
    TensorAssembler assembler([&](const TensorSpec& spec) -> absl::StatusOr<void*> {
      for (size_t k = 0; k < s.tensors.size(); ++k) {
        const ModelTensor& t = model_[s.tensors[k]];
        if (t.spec.name != spec.name) continue;
        if (t.spec.shape != spec.shape || spec.dtype != DType::kFloat32) {
          return absl::FailedPreconditionError(
              absl::StrCat("tensor '", spec.name, "' has shape ", ShapeString(spec.shape),
                           ", this worker's model has ", ShapeString(t.spec.shape),
                           ": the server holds a different model"));
        }
        if (seen[k])
          return absl::InternalError(absl::StrCat("tensor '", spec.name, "' sent twice"));
        seen[k] = true;
        return static_cast<void*>((t.is_buffer ? buffers : parameters) + t.offset);
      }
      return absl::FailedPreconditionError(
          absl::StrCat("tensor '", spec.name,
                       "' is not in this partition of this worker's model: the server holds a "
                       "different model or partition plan"));
    });
    while (stream->Read(&response)) {
      if (!response.has_chunk()) return absl::InternalError("a second PullHeader inside the reply");
      STRATA_RETURN_IF_ERROR(assembler.Add(response.chunk()));
    }
    s.reply_ended = true;
    STRATA_RETURN_IF_ERROR(assembler.Finish());
    for (size_t k = 0; k < seen.size(); ++k) {
      if (!seen[k]) {
        return absl::FailedPreconditionError(
            absl::StrCat("the reply lacks tensor '", model_[s.tensors[k]].spec.name, "'"));
      }
    }
    s.version = header.version();
    s.samples = header.samples();
    s.sample_budget = header.sample_budget();
    return absl::OkStatus();
  }

  absl::Status PullFrom(ServerLink& s, Trainer& trainer) {
    return PullInto(s, trainer.parameter_data(), buffers_.data());
  }

  absl::Status PullInto(ServerLink& s, float* parameters, float* buffers) {
    auto context = NewContext();
    v1::PullRequest request;
    request.set_worker(options_.rank);
    request.set_clock(steps_);
    auto reader = s.stub->Pull(context.get(), request);
    const absl::Status received = Receive(s, parameters, buffers, reader.get());
    return Finish(received, s.reply_ended, context.get(), reader.get(),
                  s.context("pull from"));
  }

  // One step's exchange with one partition. A server that is gone may be on its way back: the
  // orchestrator restarts a dead server from its last save (docs/user-guide.md, "When a process
  // dies"). The step's gradients for it are then lost, and once it answers again the worker takes
  // the model it resumed with (a push would name a version the restored server never reached).
  absl::Status Exchange(ServerLink& s, const ExchangeBuffers& x, const StepContext& step) {
    absl::Status exchanged = PushPullWith(s, x, step);
    if (exchanged.code() != absl::StatusCode::kUnavailable) return exchanged;
    const auto since = std::chrono::steady_clock::now();
    spdlog::warn("{}; waiting up to {} s for it to come back", std::string(exchanged.message()),
                 options_.deadline.count() / 1000);
    for (;;) {
      // A poll interval, not a synchronisation: the restart takes what it takes.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      absl::Status pulled = PullInto(s, x.parameters_in, x.buffers_in);
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
      if (pulled.ok()) {
        spdlog::info("parameter server {} answers again after {:.1f} s, at version {}", s.index,
                     waited, s.version);
        return absl::OkStatus();
      }
      if (pulled.code() != absl::StatusCode::kUnavailable ||
          waited * 1000 > static_cast<double>(options_.deadline.count())) {
        return Annotate(pulled, absl::StrFormat("after waiting %.0f s for the server to return",
                                                waited));
      }
    }
  }

  absl::Status PushPullWith(ServerLink& s, const ExchangeBuffers& x, const StepContext& step) {
    auto context = NewContext();
    auto stream = s.stub->PushPull(context.get());
    v1::PushRequest request;
    v1::PushHeader* header = request.mutable_header();
    header->set_worker(options_.rank);
    header->set_version(s.installed_version);
    header->set_clock(step.step);
    header->set_samples(step.batch_examples);
    header->set_lr(options_.lr);
    bool open = stream->Write(request);
    // Gradients of trainable tensors, values of buffers; cut into chunks straight from the
    // trainer's memory into the reused message (one copy).
    ChunkOptions chunking;
    chunking.chunk_bytes = options_.chunk_bytes;
    v1::TensorChunk* chunk = request.mutable_chunk();
    for (size_t k = 0; open && k < s.tensors.size(); ++k) {
      const ModelTensor& t = model_[s.tensors[k]];
      const float* values = (t.is_buffer ? x.buffers_out : x.gradients) + t.offset;
      open = EncodeTensorInto({&t.spec, values}, chunking, chunk, [&] {
               return stream->Write(request);
             }).ok();
    }
    absl::Status received = absl::UnavailableError("the server closed the stream during the push");
    if (open && stream->WritesDone()) {
      received = Receive(s, x.parameters_in, x.buffers_in, stream.get());
    }
    return Finish(received, s.reply_ended, context.get(), stream.get(),
                  s.context("push/pull with"));
  }

  // The server's status explains a stream that ended early (a server that died mid-reply leaves
  // tensors missing); our own finding explains a reply we refused while it was still coming
  // (then the call is cancelled and the server's view is only "cancelled").
  template <typename Stream>
  static absl::Status Finish(const absl::Status& received, bool reply_ended,
                             grpc::ClientContext* context, Stream* stream,
                             const std::string& what) {
    const bool refused_open_reply =
        !received.ok() && !reply_ended && received.code() != absl::StatusCode::kUnavailable;
    if (refused_open_reply) context->TryCancel();
    const grpc::Status finished = stream->Finish();
    if (!finished.ok() && !refused_open_reply) return FromGrpcStatus(finished, what);
    return Annotate(received, what);
  }

  const PushPullOptions options_;
  const std::vector<ModelTensor> model_;
  std::vector<ServerLink> servers_;
  std::vector<float> buffers_;
  // Pipelined only: the step's values while they travel, and the reply until it is installed.
  std::vector<float> gradients_out_, buffers_out_, parameters_in_, buffers_in_;
  int64_t steps_ = 0;
  // Last, so that it is destroyed first: its destructor waits for the exchange, which uses the
  // members above.
  std::future<absl::Status> in_flight_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Synchroniser>> MakePushPullSynchroniser(
    const PushPullOptions& options, const Trainer& trainer) {
  if (options.servers.empty())
    return absl::InvalidArgumentError("push/pull needs at least one parameter server");
  if (options.rank < 0)
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank, " is negative"));
  if (options.deadline.count() <= 0)
    return absl::InvalidArgumentError("push/pull deadline must be positive");
  std::vector<ModelTensor> model;
  std::vector<TensorSpec> specs;
  for (const auto& e : trainer.parameters().entries()) model.push_back({e.spec, false, e.offset});
  for (const auto& e : trainer.buffers().entries()) model.push_back({e.spec, true, e.offset});
  for (const auto& t : model) specs.push_back(t.spec);
  STRATA_ASSIGN_OR_RETURN(PartitionPlan plan,
                          PlanPartitions(specs, static_cast<int>(options.servers.size())));
  std::vector<ServerLink> servers(options.servers.size());
  for (size_t i = 0; i < servers.size(); ++i) {
    servers[i].index = static_cast<int>(i);
    servers[i].address = options.servers[i];
    servers[i].stub = v1::ParameterServer::NewStub(MakeChannel(options.servers[i]));
    servers[i].tensors = plan.tensors_of[i];
  }
  return std::unique_ptr<Synchroniser>(
      new PushPullSynchroniser(options, std::move(model), std::move(servers),
                               trainer.parameters().total_floats(), trainer.buffers().total_floats()));
}

}  // namespace strata
