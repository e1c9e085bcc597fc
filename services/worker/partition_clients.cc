#include "services/worker/partition_clients.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <spdlog/spdlog.h>

#include "services/common/base/status.h"
#include "services/common/wire/flat_layout.h"
#include "services/common/wire/push_pull_frame.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/tcp_socket.h"
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

// The reply header that follows a request on the data plane and, for a refusal, its message as
// *refused (printable ASCII only: it goes on into logs and into protobuf strings). An error is the
// connection's: it is in an unknown state afterwards.
absl::Status ReceiveReply(int fd, push_pull_wire::Reply* reply, absl::Status* refused) {
  uint8_t raw[push_pull_wire::kReplyBytes];
  STRATA_RETURN_IF_ERROR(tcp::ReceiveExact(fd, raw, sizeof(raw)));
  if (absl::Status decoded = push_pull_wire::DecodeReply(raw, reply); !decoded.ok()) {
    return absl::InternalError(decoded.message());
  }
  *refused = absl::OkStatus();
  if (reply->code == 0) return absl::OkStatus();
  std::string message(reply->message_bytes, '\0');
  STRATA_RETURN_IF_ERROR(tcp::ReceiveExact(fd, message.data(), message.size()));
  for (char& c : message) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  }
  *refused = absl::Status(static_cast<absl::StatusCode>(reply->code), message);
  return absl::OkStatus();
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
    push_pull_wire::LayoutFingerprint fingerprint;
    for (size_t k : plan.tensors_of[i]) {
      const ModelTensor& t = model[k];
      fingerprint.Add(t.spec, t.is_buffer);
      const auto n = static_cast<size_t>(t.spec.numel());
      std::vector<ServerLink::Run>& runs = servers[i].runs;
      if (!runs.empty() && runs.back().is_buffer == t.is_buffer &&
          runs.back().offset + runs.back().floats == t.offset) {
        runs.back().floats += n;
      } else {
        runs.push_back({t.is_buffer, t.offset, n});
      }
      servers[i].floats += n;
    }
    servers[i].fingerprint = fingerprint.value();
  }
  return std::unique_ptr<PartitionClients>(
      new PartitionClients(options, std::move(model), std::move(servers),
                           trainer.parameters().total_floats(), trainer.buffers().total_floats()));
}

PartitionClients::~PartitionClients() {
  for (ServerLink& s : servers_) {
    if (s.data_fd >= 0) close(s.data_fd);
  }
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

absl::Status PartitionClients::OpenDataPlane(ServerLink& s, bool* usable) {
  *usable = false;
  if (!options_.tcp_data_plane || s.data_plane_declined) return absl::OkStatus();
  if (s.data_fd >= 0) {
    *usable = true;
    return absl::OkStatus();
  }
  auto decline = [&](absl::string_view why) {
    s.data_plane_declined = true;
    spdlog::warn("{}: {}; push/pull with it goes over gRPC", s.context("the data plane of"),
                 std::string(why));
    return absl::OkStatus();
  };
  auto context = NewContext();
  v1::DataPlaneRequest request;
  request.set_sender(static_cast<uint32_t>(options_.rank));
  v1::DataPlaneOffer offer;
  const grpc::Status asked = s.stub->DataPlane(context.get(), request, &offer);
  if (!asked.ok()) {
    absl::Status status = FromGrpcStatus(asked, s.context("asking for the data plane of"));
    // A server that is down (or restarting) is the caller's to wait for; one that answers
    // without a data plane is served over gRPC.
    if (status.code() == absl::StatusCode::kUnavailable ||
        status.code() == absl::StatusCode::kDeadlineExceeded) {
      return status;
    }
    return decline(status.message());
  }
  if (offer.port() == 0 || offer.port() > 65535 || offer.ticket().size() != tcp::kTicketBytes) {
    return decline(absl::StrCat("its offer is malformed (port ", offer.port(), ", a ticket of ",
                                offer.ticket().size(), " bytes)"));
  }
  const std::string host = tcp::DataPlaneHost(s.address);
  absl::StatusOr<int> fd =
      tcp::DialTcp(host, static_cast<int>(offer.port()),
                   std::min(options_.deadline, std::chrono::milliseconds(10000)));
  if (!fd.ok()) return decline(fd.status().message());
  tcp::Ticket ticket;
  std::copy(offer.ticket().begin(), offer.ticket().end(), ticket.begin());
  uint8_t hello[tcp::kHelloBytes];
  tcp::EncodeHello(push_pull_wire::kHelloMagic, push_pull_wire::kVersion, ticket,
                   static_cast<uint32_t>(options_.rank), hello);
  if (absl::Status sent = tcp::SendAll(*fd, hello, sizeof(hello), nullptr, 0); !sent.ok()) {
    close(*fd);
    return decline(sent.message());
  }
  // The server welcomes an admitted connection at once. One that closes it instead (a ticket of
  // another server incarnation, a connection it had no room for) or says nothing leaves this
  // worker on gRPC, with the cause in the log, rather than failing its next exchange.
  tcp::SetReceiveTimeout(*fd, std::min(options_.deadline, std::chrono::milliseconds(10000)));
  push_pull_wire::Reply welcome;
  absl::Status refused;
  if (absl::Status got = ReceiveReply(*fd, &welcome, &refused); !got.ok() || !refused.ok()) {
    close(*fd);
    const absl::Status why = !got.ok() ? got : refused;
    return decline(absl::StrCat("it did not admit the connection (",
                                why.code() == absl::StatusCode::kOutOfRange
                                    ? "closed after the hello"
                                    : std::string(why.message()),
                                ")"));
  }
  tcp::SetReceiveTimeout(*fd, options_.deadline);
  tcp::SetSendTimeout(*fd, options_.deadline);
  s.data_fd = *fd;
  s.region.reset();
  s.share_asked = false;
  *usable = true;
  return absl::OkStatus();
}

push_pull_wire::Request PartitionClients::RequestTo(const ServerLink& s,
                                                    push_pull_wire::RequestKind kind) const {
  push_pull_wire::Request request;
  request.kind = kind;
  request.worker = static_cast<uint32_t>(options_.rank);
  request.layout_fingerprint = s.fingerprint;
  request.deadline_ms = static_cast<uint64_t>(options_.deadline.count());
  return request;
}

absl::Status PartitionClients::AttachSharedRegion(ServerLink& s) {
  namespace wire = push_pull_wire;
  uint8_t header[wire::kRequestBytes];
  wire::EncodeRequest(RequestTo(s, wire::RequestKind::kShareMemory), header);
  STRATA_RETURN_IF_ERROR(tcp::SendAll(s.data_fd, header, sizeof(header), nullptr, 0));
  wire::Reply reply;
  absl::Status refused;
  STRATA_RETURN_IF_ERROR(ReceiveReply(s.data_fd, &reply, &refused));
  if (!refused.ok()) {
    // Refused (nothing loaded yet, say): the tensors stay on the socket.
    spdlog::info("{} shares no memory (code {}); tensors go over TCP",
                 s.context("the data plane of"), reply.code);
    return absl::OkStatus();
  }
  if (reply.payload_bytes != wire::kShareOfferBytes) {
    return absl::InternalError(absl::StrCat("a share reply of ", reply.payload_bytes,
                                            " bytes, not an offer of ", wire::kShareOfferBytes));
  }
  uint8_t offer[wire::kShareOfferBytes];
  STRATA_RETURN_IF_ERROR(tcp::ReceiveExact(s.data_fd, offer, sizeof(offer)));
  absl::StatusOr<std::unique_ptr<SharedRegion>> region =
      SharedRegion::Attach(wire::DecodeShareOffer(offer), s.floats * sizeof(float));
  if (!region.ok()) {
    // Another host, container or pid namespace: the usual case between machines.
    spdlog::info("{} is not on this host ({}); tensors go over TCP", s.context("the data plane of"),
                 std::string(region.status().message()));
    return absl::OkStatus();
  }
  s.region = std::move(*region);
  spdlog::info("{} is on this host; tensors move through shared memory",
               s.context("the data plane of"));
  return absl::OkStatus();
}

absl::Status PartitionClients::CallDataPlane(ServerLink& s, const PushFields* fields,
                                             const ExchangeBuffers& x) {
  namespace wire = push_pull_wire;
  const char* what = fields != nullptr ? "push/pull with" : "pull from";
  // The connection is in an unknown state after any failure of the transport or the format.
  auto broken = [&](const absl::Status& why) {
    close(s.data_fd);
    s.data_fd = -1;
    s.region.reset();
    const bool closed = why.code() == absl::StatusCode::kOutOfRange;
    return Annotate(closed ? absl::UnavailableError("the server closed the connection") : why,
                    s.context(what));
  };
  // Only exchanges use the region; a pull (at the start, after a restart) stays on the socket.
  // The region is asked for before the connection's first exchange rather than when it opens:
  // by then a pull has answered, so the server holds the model it sizes the region by (at the
  // switch, the connection opens while the servers are still loading the handover).
  if (fields != nullptr && options_.shared_memory && !s.share_asked && s.floats > 0) {
    s.share_asked = true;
    if (absl::Status attached = AttachSharedRegion(s); !attached.ok()) return broken(attached);
  }
  const bool shared = fields != nullptr && s.region != nullptr;
  wire::Request request = RequestTo(s, fields == nullptr ? wire::RequestKind::kPull
                                       : shared          ? wire::RequestKind::kExchangeShared
                                                         : wire::RequestKind::kExchange);
  if (fields != nullptr) {
    request.version = fields->version >= 0 ? fields->version : s.installed_version;
    request.clock = fields->clock;
    request.samples = fields->samples;
    request.lr = fields->lr;
    request.payload_bytes = s.floats * sizeof(float);
  }
  uint8_t header[wire::kRequestBytes];
  wire::EncodeRequest(request, header);
  std::vector<iovec>& parts = s.send_parts;
  parts.assign(1, {header, sizeof(header)});
  if (shared) {
    uint8_t* into = s.region->push_area();
    for (const ServerLink::Run& r : s.runs) {
      const float* from = (r.is_buffer ? x.buffers_out : x.gradients) + r.offset;
      std::memcpy(into, from, r.floats * sizeof(float));
      into += r.floats * sizeof(float);
    }
  } else if (fields != nullptr) {
    for (const ServerLink::Run& r : s.runs) {
      const float* from = (r.is_buffer ? x.buffers_out : x.gradients) + r.offset;
      parts.push_back({const_cast<float*>(from), r.floats * sizeof(float)});
    }
  }
  if (absl::Status sent = tcp::SendParts(s.data_fd, parts.data(), parts.size()); !sent.ok()) {
    return broken(sent);
  }
  wire::Reply reply;
  absl::Status refused;
  if (absl::Status got = ReceiveReply(s.data_fd, &reply, &refused); !got.ok()) {
    return broken(got);
  }
  if (!refused.ok()) return Annotate(refused, s.context(what));
  if (reply.payload_bytes != s.floats * sizeof(float)) {
    return broken(absl::FailedPreconditionError(
        absl::StrCat("the reply holds ", reply.payload_bytes, " bytes, this worker's partition ",
                     s.floats * sizeof(float), ": the server holds a different model")));
  }
  const uint8_t* shared_reply = shared ? s.region->reply_area() : nullptr;
  for (const ServerLink::Run& r : s.runs) {
    float* into = (r.is_buffer ? x.buffers_in : x.parameters_in) + r.offset;
    if (shared) {
      std::memcpy(into, shared_reply, r.floats * sizeof(float));
      shared_reply += r.floats * sizeof(float);
    } else if (absl::Status got = tcp::ReceiveExact(s.data_fd, into, r.floats * sizeof(float));
               !got.ok()) {
      return broken(got);
    }
  }
  s.version = reply.version;
  s.samples = reply.samples;
  s.sample_budget = reply.sample_budget;
  return absl::OkStatus();
}

absl::Status PartitionClients::PullInto(ServerLink& s, int64_t clock, float* parameters,
                                        float* buffers) {
  bool tcp_usable = false;
  STRATA_RETURN_IF_ERROR(OpenDataPlane(s, &tcp_usable));
  if (tcp_usable) return CallDataPlane(s, nullptr, {nullptr, nullptr, parameters, buffers});
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
  bool tcp_usable = false;
  absl::Status exchanged = OpenDataPlane(s, &tcp_usable);
  if (exchanged.ok()) {
    exchanged = tcp_usable ? CallDataPlane(s, &fields, x) : PushPullWith(s, fields, x);
  }
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
