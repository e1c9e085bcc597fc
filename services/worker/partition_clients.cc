#include "services/worker/partition_clients.h"

#include <thread>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <spdlog/spdlog.h>

#include "services/common/base/status.h"
#include "services/common/wire/flat_layout.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/tensor_codec.h"

namespace strata {
namespace {

// The server's status explains a stream that ended early (a server that died mid-reply leaves
// tensors missing); our own finding explains a reply we refused while it was still coming (then
// the call is cancelled and the server's view is only "cancelled").
template <typename Stream>
absl::Status FinishCall(const absl::Status& received, bool reply_ended,
                        grpc::ClientContext* context, Stream* stream, const std::string& what) {
  const bool refused_open_reply =
      !received.ok() && !reply_ended && received.code() != absl::StatusCode::kUnavailable;
  if (refused_open_reply) context->TryCancel();
  const grpc::Status finished = stream->Finish();
  if (!finished.ok() && !refused_open_reply) return FromGrpcStatus(finished, what);
  return Annotate(received, what);
}

}  // namespace

std::string ServerLink::context(const char* what) const {
  return absl::StrCat(what, " parameter server ", index, " (", address, ")");
}

absl::StatusOr<std::unique_ptr<PartitionClients>> PartitionClients::Create(
    const PartitionClientsOptions& options, const Trainer& trainer) {
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
  return std::unique_ptr<PartitionClients>(
      new PartitionClients(options, std::move(model), std::move(servers),
                           trainer.parameters().total_floats(), trainer.buffers().total_floats()));
}

absl::Status PartitionClients::ForEachServer(const std::function<absl::Status(ServerLink&)>& f) {
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

void PartitionClients::MarkInstalled() {
  for (ServerLink& s : servers_) s.installed_version = s.version;
}

void PartitionClients::ReadBudget(bool* has_budget, bool* budget_spent) const {
  for (const ServerLink& s : servers_) {
    *has_budget = *has_budget || s.sample_budget > 0;
    *budget_spent = *budget_spent || (s.sample_budget > 0 && s.samples >= s.sample_budget);
  }
}

std::unique_ptr<grpc::ClientContext> PartitionClients::NewContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(DeadlineAfter(options_.deadline));
  return context;
}

template <typename Stream>
absl::Status PartitionClients::Receive(ServerLink& s, float* parameters, float* buffers,
                                       Stream* stream) {
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
      if (seen[k]) return absl::InternalError(absl::StrCat("tensor '", spec.name, "' sent twice"));
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

absl::Status PartitionClients::PullInto(ServerLink& s, int64_t clock, float* parameters,
                                        float* buffers) {
  auto context = NewContext();
  v1::PullRequest request;
  request.set_worker(options_.rank);
  request.set_clock(clock);
  auto reader = s.stub->Pull(context.get(), request);
  const absl::Status received = Receive(s, parameters, buffers, reader.get());
  return FinishCall(received, s.reply_ended, context.get(), reader.get(), s.context("pull from"));
}

// Writes the header, then gradients of trainable tensors and values of buffers, cut into chunks
// straight from the trainer's memory into the reused message (one copy); false once the stream
// is closed.
template <typename Stream>
absl::Status PartitionClients::WritePush(ServerLink& s, const PushFields& fields,
                                         const float* gradients, const float* buffers,
                                         Stream* stream) {
  v1::PushRequest request;
  v1::PushHeader* header = request.mutable_header();
  header->set_worker(options_.rank);
  header->set_version(fields.version >= 0 ? fields.version : s.installed_version);
  header->set_clock(fields.clock);
  header->set_samples(fields.samples);
  header->set_lr(fields.lr);
  bool open = stream->Write(request);
  ChunkOptions chunking;
  chunking.chunk_bytes = options_.chunk_bytes;
  v1::TensorChunk* chunk = request.mutable_chunk();
  for (size_t k = 0; open && k < s.tensors.size(); ++k) {
    const ModelTensor& t = model_[s.tensors[k]];
    const float* values = (t.is_buffer ? buffers : gradients) + t.offset;
    open = EncodeTensorInto({&t.spec, values}, chunking, chunk, [&] {
             return stream->Write(request);
           }).ok();
  }
  if (open && stream->WritesDone()) return absl::OkStatus();
  return absl::UnavailableError("the server closed the stream during the push");
}

absl::Status PartitionClients::PushTo(ServerLink& s, const PushFields& fields,
                                      const float* gradients, const float* buffers) {
  auto context = NewContext();
  v1::PushReply reply;
  auto stream = s.stub->Push(context.get(), &reply);
  const absl::Status written = WritePush(s, fields, gradients, buffers, stream.get());
  const grpc::Status finished = stream->Finish();
  if (!finished.ok()) return FromGrpcStatus(finished, s.context("push to"));
  STRATA_RETURN_IF_ERROR(Annotate(written, s.context("push to")));
  s.pushed_version = reply.version();
  return absl::OkStatus();
}

absl::Status PartitionClients::PushPullWith(ServerLink& s, const PushFields& fields,
                                            const ExchangeBuffers& x) {
  auto context = NewContext();
  auto stream = s.stub->PushPull(context.get());
  absl::Status received = WritePush(s, fields, x.gradients, x.buffers_out, stream.get());
  if (received.ok()) received = Receive(s, x.parameters_in, x.buffers_in, stream.get());
  return FinishCall(received, s.reply_ended, context.get(), stream.get(),
                    s.context("push/pull with"));
}

absl::Status PartitionClients::Exchange(ServerLink& s, const PushFields& fields,
                                        const ExchangeBuffers& x) {
  absl::Status exchanged = PushPullWith(s, fields, x);
  if (exchanged.code() != absl::StatusCode::kUnavailable) return exchanged;
  const auto since = std::chrono::steady_clock::now();
  spdlog::warn("{}; waiting up to {} s for it to come back", std::string(exchanged.message()),
               options_.deadline.count() / 1000);
  for (;;) {
    // A poll interval, not a synchronisation: the restart takes what it takes.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    absl::Status pulled = PullInto(s, fields.clock, x.parameters_in, x.buffers_in);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
    if (pulled.ok()) {
      spdlog::info("parameter server {} answers again after {:.1f} s, at version {}", s.index,
                   waited, s.version);
      return absl::OkStatus();
    }
    if (pulled.code() != absl::StatusCode::kUnavailable ||
        waited * 1000 > static_cast<double>(options_.deadline.count())) {
      return Annotate(pulled,
                      absl::StrFormat("after waiting %.0f s for the server to return", waited));
    }
  }
}

}  // namespace strata
