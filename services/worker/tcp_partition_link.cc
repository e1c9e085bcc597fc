#include "services/worker/tcp_partition_link.h"

#include <unistd.h>

#include <algorithm>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "services/common/base/status.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/tcp_socket.h"

namespace strata {
namespace {

namespace wire = push_pull_wire;

// The reply header that follows a request on the data plane and, for a refusal, its message as
// *refused (printable ASCII only: it goes on into logs and into protobuf strings). An error is the
// connection's: it is in an unknown state afterwards.
absl::Status ReceiveReply(int fd, wire::Reply* reply, absl::Status* refused) {
  uint8_t raw[wire::kReplyBytes];
  STRATA_RETURN_IF_ERROR(tcp::ReceiveExact(fd, raw, sizeof(raw)));
  if (absl::Status decoded = wire::DecodeReply(raw, reply); !decoded.ok()) {
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

TcpPartitionLink::TcpPartitionLink(PartitionLinkOptions options, bool shared_memory,
                                   std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      shared_memory_(shared_memory),
      control_(v1::ParameterServer::NewStub(channel)),
      fallback_(options_, channel),
      block_(options_.tensors) {}

TcpPartitionLink::~TcpPartitionLink() {
  if (data_fd_ >= 0) close(data_fd_);
}

absl::StatusOr<bool> TcpPartitionLink::Open(const PartitionCallOptions& call) {
  if (declined_) return false;
  if (data_fd_ >= 0) {
    SetSocketDeadline(call.deadline);
    return true;
  }
  auto decline = [&](absl::string_view why) {
    declined_ = true;
    SetPath(absl::StrCat("gRPC (no data plane: ", why, ")"));
    spdlog::warn("{}: {}; push/pull with it goes over gRPC", options_.Describe("the data plane of"),
                 std::string(why));
    return false;
  };
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(call.deadline));
  v1::DataPlaneRequest request;
  request.set_sender(static_cast<uint32_t>(options_.rank));
  v1::DataPlaneOffer offer;
  const grpc::Status asked = control_->DataPlane(&context, request, &offer);
  if (!asked.ok()) {
    absl::Status status = FromGrpcStatus(asked, options_.Describe("asking for the data plane of"));
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
  const std::string host = tcp::DataPlaneHost(options_.address);
  absl::StatusOr<int> fd = tcp::DialTcp(host, static_cast<int>(offer.port()),
                                        std::min(call.deadline, std::chrono::milliseconds(10000)));
  if (!fd.ok()) return decline(fd.status().message());
  tcp::Ticket ticket;
  std::copy(offer.ticket().begin(), offer.ticket().end(), ticket.begin());
  uint8_t hello[tcp::kHelloBytes];
  tcp::EncodeHello(wire::kHelloMagic, wire::kVersion, ticket, static_cast<uint32_t>(options_.rank),
                   hello);
  if (absl::Status sent = tcp::SendAll(*fd, hello, sizeof(hello), nullptr, 0); !sent.ok()) {
    close(*fd);
    return decline(sent.message());
  }
  // The server welcomes an admitted connection at once. One that closes it instead (a ticket of
  // another server incarnation, a connection it had no room for) or says nothing leaves this
  // worker on gRPC, with the cause in the log, rather than failing its next exchange.
  tcp::SetReceiveTimeout(*fd, std::min(call.deadline, std::chrono::milliseconds(10000)));
  wire::Reply welcome;
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
  data_fd_ = *fd;
  SetPath(SocketPath());
  socket_deadline_ = std::chrono::milliseconds(0);
  SetSocketDeadline(call.deadline);
  region_.reset();
  share_asked_ = false;
  return true;
}

void TcpPartitionLink::SetSocketDeadline(std::chrono::milliseconds deadline) {
  if (deadline == socket_deadline_) return;
  tcp::SetReceiveTimeout(data_fd_, deadline);
  tcp::SetSendTimeout(data_fd_, deadline);
  socket_deadline_ = deadline;
}

wire::Request TcpPartitionLink::RequestOf(wire::RequestKind kind,
                                          const PartitionCallOptions& call) const {
  wire::Request request;
  request.kind = kind;
  request.worker = static_cast<uint32_t>(options_.rank);
  request.layout_fingerprint = block_.fingerprint();
  request.deadline_ms = static_cast<uint64_t>(call.deadline.count());
  return request;
}

absl::Status TcpPartitionLink::AttachSharedRegion(const PartitionCallOptions& call) {
  uint8_t header[wire::kRequestBytes];
  wire::EncodeRequest(RequestOf(wire::RequestKind::kShareMemory, call), header);
  STRATA_RETURN_IF_ERROR(tcp::SendAll(data_fd_, header, sizeof(header), nullptr, 0));
  wire::Reply reply;
  absl::Status refused;
  STRATA_RETURN_IF_ERROR(ReceiveReply(data_fd_, &reply, &refused));
  if (!refused.ok()) {
    // Refused (nothing loaded yet, say): the tensors stay on the socket.
    SetPath(absl::StrCat(SocketPath(), " (the server shared no memory: code ", reply.code, ")"));
    spdlog::info("{} shares no memory (code {}); tensors go over TCP",
                 options_.Describe("the data plane of"), reply.code);
    return absl::OkStatus();
  }
  if (reply.payload_bytes != wire::kShareOfferBytes) {
    return absl::InternalError(absl::StrCat("a share reply of ", reply.payload_bytes,
                                            " bytes, not an offer of ", wire::kShareOfferBytes));
  }
  uint8_t offer[wire::kShareOfferBytes];
  STRATA_RETURN_IF_ERROR(tcp::ReceiveExact(data_fd_, offer, sizeof(offer)));
  absl::StatusOr<std::unique_ptr<SharedRegion>> region =
      SharedRegion::Attach(wire::DecodeShareOffer(offer), block_.bytes());
  if (!region.ok()) {
    // Another host, container or pid namespace: the usual case between machines.
    SetPath(absl::StrCat(SocketPath(), " (not on this host: ", region.status().message(), ")"));
    spdlog::info("{} is not on this host ({}); tensors go over TCP",
                 options_.Describe("the data plane of"), std::string(region.status().message()));
    return absl::OkStatus();
  }
  region_ = std::move(*region);
  SetPath("shared memory");
  spdlog::info("{} is on this host; tensors move through shared memory",
               options_.Describe("the data plane of"));
  return absl::OkStatus();
}

std::string TcpPartitionLink::SocketPath() const {
  return options_.half_precision && block_.has_half_form() ? "tcp, 16-bit" : "tcp";
}

std::string TcpPartitionLink::Path() const {
  std::lock_guard<std::mutex> lock(path_mu_);
  return path_;
}

void TcpPartitionLink::SetPath(std::string path) {
  {
    std::lock_guard<std::mutex> lock(path_mu_);
    path_ = std::move(path);
  }
  PathChanged();
}

absl::StatusOr<PartitionReply> TcpPartitionLink::Call(const PushFields* fields,
                                                      const ExchangeBuffers& x,
                                                      const PartitionCallOptions& call) {
  const char* what = fields != nullptr ? "push/pull with" : "pull from";
  // The connection is in an unknown state after any failure of the transport or the format.
  auto broken = [&](const absl::Status& why) {
    close(data_fd_);
    data_fd_ = -1;
    region_.reset();
    const bool closed = why.code() == absl::StatusCode::kOutOfRange;
    return Annotate(closed ? absl::UnavailableError("the server closed the connection") : why,
                    options_.Describe(what));
  };
  // Only exchanges use the region; a pull (at the start, after a restart) stays on the socket.
  // The region is asked for before the connection's first exchange rather than when it opens:
  // by then a pull has answered, so the server holds the model it sizes the region by (at the
  // switch, the connection opens while the servers are still loading the handover).
  if (fields != nullptr && shared_memory_ && !share_asked_ && block_.floats() > 0) {
    share_asked_ = true;
    if (absl::Status attached = AttachSharedRegion(call); !attached.ok()) return broken(attached);
  }
  const bool shared = fields != nullptr && region_ != nullptr;
  // In 16 bits when asked, on the socket, and when every gradient has a finite half (else this
  // one push goes in 32 bits: the server then refuses a NaN as it always does, and takes a large
  // finite value).
  bool half = fields != nullptr && !shared && options_.half_precision && block_.has_half_form();
  if (half) {
    push_halves_.resize(block_.parameter_floats());
    half = block_.GatherHalves(x.gradients, push_halves_.data());
    if (!half && !warned_full_precision_) {
      warned_full_precision_ = true;
      spdlog::warn("{}: a gradient beyond a 16-bit float's range; that push goes in 32 bits",
                   options_.Describe("push/pull with"));
    }
  }
  wire::Request request = RequestOf(fields == nullptr ? wire::RequestKind::kPull
                                    : shared          ? wire::RequestKind::kExchangeShared
                                    : half            ? wire::RequestKind::kExchangeHalf
                                                      : wire::RequestKind::kExchange,
                                    call);
  if (fields != nullptr) {
    request.version = fields->version;
    request.clock = fields->clock;
    request.samples = fields->samples;
    request.lr = fields->lr;
    request.payload_bytes = half ? block_.half_form_bytes() : block_.bytes();
  }
  uint8_t header[wire::kRequestBytes];
  wire::EncodeRequest(request, header);
  std::vector<iovec>& parts = send_parts_;
  parts.assign(1, {header, sizeof(header)});
  if (shared) {
    block_.Gather(x.gradients, x.buffers_out, region_->push_area());
  } else if (half) {
    parts.push_back({push_halves_.data(), push_halves_.size() * sizeof(uint16_t)});
    block_.ForEachBufferRun(x.buffers_out, [&](const float* from, size_t floats) {
      parts.push_back({const_cast<float*>(from), floats * sizeof(float)});
    });
  } else if (fields != nullptr) {
    block_.ForEachRun(x.gradients, x.buffers_out, [&](const float* from, size_t floats) {
      parts.push_back({const_cast<float*>(from), floats * sizeof(float)});
    });
  }
  if (absl::Status sent = tcp::SendParts(data_fd_, parts.data(), parts.size()); !sent.ok()) {
    return broken(sent);
  }
  wire::Reply reply;
  absl::Status refused;
  if (absl::Status got = ReceiveReply(data_fd_, &reply, &refused); !got.ok()) {
    return broken(got);
  }
  if (!refused.ok()) return Annotate(refused, options_.Describe(what));
  // The reply to a 16-bit exchange has the weights in halves, or all in 32 bits when the server
  // holds a weight beyond a half's range; any other reply is in 32 bits.
  const bool half_reply = half && reply.payload_bytes == block_.half_form_bytes();
  if (!half_reply && reply.payload_bytes != block_.bytes()) {
    return broken(absl::FailedPreconditionError(absl::StrCat(
        "the reply holds ", reply.payload_bytes, " bytes, this worker's partition ", block_.bytes(),
        half ? absl::StrCat(" (", block_.half_form_bytes(), " in 16 bits)") : "",
        ": the server holds a different model")));
  }
  if (shared) {
    block_.Scatter(region_->reply_area(), x.parameters_in, x.buffers_in);
  } else if (half_reply) {
    pull_halves_.resize(block_.parameter_floats());
    absl::Status got =
        tcp::ReceiveExact(data_fd_, pull_halves_.data(), pull_halves_.size() * sizeof(uint16_t));
    block_.ForEachBufferRun(x.buffers_in, [&](float* into, size_t floats) {
      if (got.ok()) got = tcp::ReceiveExact(data_fd_, into, floats * sizeof(float));
    });
    if (!got.ok()) return broken(got);
    block_.ScatterHalves(pull_halves_.data(), x.parameters_in);
  } else {
    absl::Status got;
    block_.ForEachRun(x.parameters_in, x.buffers_in, [&](float* into, size_t floats) {
      if (got.ok()) got = tcp::ReceiveExact(data_fd_, into, floats * sizeof(float));
    });
    if (!got.ok()) return broken(got);
  }
  PartitionReply done{reply.version, reply.samples, reply.sample_budget};
  done.bytes_pushed = request.payload_bytes;
  done.bytes_pulled = reply.payload_bytes;
  return done;
}

absl::StatusOr<PartitionReply> TcpPartitionLink::Exchange(const PushFields& fields,
                                                          const ExchangeBuffers& x,
                                                          const PartitionCallOptions& call) {
  STRATA_ASSIGN_OR_RETURN(const bool usable, Open(call));
  if (!usable) return fallback_.Exchange(fields, x, call);
  return Call(&fields, x, call);
}

absl::StatusOr<PartitionReply> TcpPartitionLink::Pull(int64_t clock, float* parameters,
                                                      float* buffers,
                                                      const PartitionCallOptions& call) {
  STRATA_ASSIGN_OR_RETURN(const bool usable, Open(call));
  if (!usable) return fallback_.Pull(clock, parameters, buffers, call);
  return Call(nullptr, {nullptr, nullptr, parameters, buffers}, call);
}

absl::StatusOr<int64_t> TcpPartitionLink::Push(const PushFields& fields, const float* gradients,
                                               const float* buffers,
                                               const PartitionCallOptions& call) {
  return fallback_.Push(fields, gradients, buffers, call);
}

}  // namespace strata
