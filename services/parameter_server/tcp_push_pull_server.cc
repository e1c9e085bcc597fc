#include "services/parameter_server/tcp_push_pull_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "services/common/base/status.h"
#include "services/common/ml/sgd.h"
#include "services/common/wire/half_float.h"
#include "services/common/wire/push_pull_frame.h"
#include "services/common/wire/shared_region.h"

namespace strata {
namespace {

namespace wire = push_pull_wire;

// How long a share waits for its worker to take the region's descriptor.
constexpr std::chrono::milliseconds kHandOverTimeout{10000};

// One worker's connection after its hello: answers its requests in order, one at a time.
class Session {
 public:
  Session(PartitionStore* partition, const TcpPushPullServerOptions& options, int fd, int worker,
          std::atomic<int64_t>* shared_exchanges)
      : partition_(partition),
        options_(options),
        fd_(fd),
        worker_(worker),
        shared_exchanges_(shared_exchanges) {}

  // Until the worker hangs up, the connection breaks, or a header cannot be read (the refusal
  // is sent, then the connection ends: what follows it cannot be found). A request refused after
  // it was read whole gets its refusal, and the connection goes on.
  void Run() {
    for (;;) {
      uint8_t raw[wire::kRequestBytes];
      if (!tcp::ReceiveExact(fd_, raw, sizeof(raw)).ok()) return;
      wire::Request request;
      absl::Status decoded = wire::DecodeRequest(raw, &request);
      if (!decoded.ok()) {
        partition_->CountRejected();
        (void)SendRefusal(decoded);
        return;
      }
      if (request.kind == wire::RequestKind::kShareMemory) {
        if (!Share(request).ok()) return;
        continue;
      }
      bool connection_broke = false;
      absl::StatusOr<PullSnapshot> answer = Answer(request, &connection_broke);
      if (connection_broke) return;
      if (!answer.ok()) {
        if (answer.status().code() == absl::StatusCode::kInvalidArgument) {
          partition_->CountRejected();
        }
        if (!SendRefusal(answer.status()).ok()) return;
        continue;
      }
      if (!SendModel(*answer, request.kind).ok()) return;
    }
  }

 private:
  absl::StatusOr<PullSnapshot> Answer(const wire::Request& request, bool* connection_broke) {
    const auto wait = WaitFor(request);
    absl::StatusOr<std::shared_ptr<const PartitionLayout>> layout = partition_->CurrentLayout();
    absl::Status usable = layout.status();
    if (usable.ok() && request.layout_fingerprint != (*layout)->fingerprint) {
      usable = absl::FailedPreconditionError(
          "the worker's partition of the model differs from this server's (other tensor names, "
          "shapes or partition plan): the server holds a different model");
    }
    if (usable.ok()) usable = CheckWorker(request);
    const bool shared = request.kind == wire::RequestKind::kExchangeShared;
    const bool half = request.kind == wire::RequestKind::kExchangeHalf;
    if (usable.ok() && request.kind != wire::RequestKind::kPull) {
      const size_t parameters = (*layout)->parameter_floats;
      const uint64_t expected =
          wire::PayloadBytes(parameters, (*layout)->total_floats - parameters, half);
      if (request.payload_bytes != expected) {
        usable = absl::InvalidArgumentError(
            absl::StrCat(half ? "16-bit push" : "push", " from worker ", worker_, " of ",
                         request.payload_bytes, " bytes; this partition holds ", expected));
      }
    }
    if (usable.ok() && shared &&
        (region_ == nullptr || region_->area_bytes() != request.payload_bytes)) {
      usable = absl::FailedPreconditionError(
          "a shared-memory exchange without a shared region of the partition's size on this "
          "connection (send a share request first)");
    }
    if (!usable.ok()) {
      // Read what was sent, so that the worker is reading when the refusal comes.
      const uint64_t on_socket = wire::PayloadOnSocket(request.kind) ? request.payload_bytes : 0;
      if (!Discard(on_socket).ok()) *connection_broke = true;
      return usable;
    }
    if (request.kind == wire::RequestKind::kPull) return partition_->Pull(worker_, 0, wait);

    if (staging_ == nullptr || &staging_->layout() != layout->get()) {
      staging_ = std::make_unique<PushStaging>(*layout);
    }
    const size_t floats = (*layout)->total_floats;
    // A 16-bit push: its first `halves` values (the gradients) are halves on the socket.
    const size_t halves = half ? (*layout)->parameter_floats : 0;
    // In pieces that stay in the cache, each scanned for its largest magnitude (and any NaN or
    // Inf) as soon as it is in this process's memory: PushStaging::Validate then needs no pass
    // of its own, and what is applied is exactly what was scanned.
    float* into = staging_->WholeDestination();
    constexpr size_t kPieceFloats = 64 << 10;
    float largest = 0;
    const auto* pushed = shared ? reinterpret_cast<const float*>(region_->push_area()) : nullptr;
    for (size_t at = 0, n = 0; at < floats; at += n) {
      n = std::min(kPieceFloats, (at < halves ? halves : floats) - at);
      absl::Status received;
      if (shared) {
        // Copied out before the scan: the worker (or anything else that could write the region)
        // can change the shared area at any time, but not this process's copy.
        std::memcpy(into + at, pushed + at, n * sizeof(float));
      } else if (at < halves) {
        half_piece_.resize(kPieceFloats);
        received = tcp::ReceiveExact(fd_, half_piece_.data(), n * sizeof(uint16_t));
        if (received.ok()) HalvesToFloats(half_piece_.data(), n, into + at);
      } else {
        received = tcp::ReceiveExact(fd_, into + at, n * sizeof(float));
      }
      if (!received.ok()) {
        *connection_broke = true;
        return absl::UnavailableError("the pushing worker went away");
      }
      largest = std::max(largest, MaxAbsOrInfinity(into + at, n));
    }
    staging_->NoteScanned(largest);
    const PushMeta meta{worker_, request.version, request.clock, request.samples, request.lr};
    STRATA_RETURN_IF_ERROR(CheckPushMeta(meta, partition_->config().workers));
    // The message is built only for a refusal: this runs on every push.
    if (absl::Status valid = staging_->Validate(); !valid.ok()) {
      return Annotate(valid, absl::StrCat("push from worker ", worker_));
    }
    STRATA_ASSIGN_OR_RETURN(const int64_t version, partition_->Push(meta, *staging_, wait));
    return partition_->Pull(worker_, version, wait);
  }

  // A connection speaks for the worker whose hello opened it.
  absl::Status CheckWorker(const wire::Request& request) const {
    if (static_cast<int64_t>(request.worker) == worker_) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("a request from worker ", request.worker,
                                                   " on worker ", worker_, "'s connection"));
  }

  WaitOptions WaitFor(const wire::Request& request) const {
    auto budget = options_.max_wait;
    if (request.deadline_ms > 0) {
      budget = std::min<std::chrono::milliseconds>(
          budget, std::chrono::milliseconds(std::min<uint64_t>(request.deadline_ms, 1ULL << 40)));
    }
    WaitOptions wait;
    wait.deadline = std::chrono::system_clock::now() + budget;
    // The worker sends nothing while it waits for its reply; its hang-up reads as the end of the
    // stream.
    wait.cancelled = [fd = fd_] { return tcp::PeerClosed(fd); };
    return wait;
  }

  absl::Status Discard(uint64_t bytes) {
    std::vector<uint8_t> sink(std::min<uint64_t>(bytes, 64 << 10));
    while (bytes > 0) {
      const size_t n = std::min<uint64_t>(bytes, sink.size());
      STRATA_RETURN_IF_ERROR(tcp::ReceiveExact(fd_, sink.data(), n));
      bytes -= n;
    }
    return absl::OkStatus();
  }

  // A share request: a fresh region sized for the partition, offered in the reply and handed
  // over to this connection's worker alone (SharedRegion::HandOver), after which no descriptor of
  // this process names it. Refused when there is nothing to size it by; the worker then keeps its
  // tensors on the socket, as it does when it cannot attach (another host or namespace).
  absl::Status Share(const wire::Request& request) {
    region_.reset();
    absl::StatusOr<std::shared_ptr<const PartitionLayout>> layout = partition_->CurrentLayout();
    absl::Status usable = layout.status();
    if (usable.ok()) usable = CheckWorker(request);
    std::unique_ptr<SharedRegion> region;
    if (usable.ok()) {
      absl::StatusOr<std::unique_ptr<SharedRegion>> created =
          SharedRegion::Create((*layout)->total_floats * sizeof(float));
      if (created.ok()) region = std::move(*created);
      usable = created.status();
    }
    if (!usable.ok()) return SendRefusal(usable);
    wire::Reply reply;
    reply.payload_bytes = wire::kShareOfferBytes;
    uint8_t header[wire::kReplyBytes];
    wire::EncodeReply(reply, header);
    uint8_t offer[wire::kShareOfferBytes];
    wire::EncodeShareOffer(region->offer(), offer);
    STRATA_RETURN_IF_ERROR(tcp::SendAll(fd_, header, sizeof(header), offer, sizeof(offer)));
    // The worker takes the descriptor before it sends anything more on this connection; a next
    // request first means it could not (and it keeps its tensors on the socket).
    if (region->HandOver(fd_, kHandOverTimeout)) region_ = std::move(region);
    return absl::OkStatus();
  }

  // The reply to `kind`: the model in the shared region, or on the socket; after a 16-bit exchange
  // the weights in halves unless one is beyond a half's range (then all in 32 bits, which the
  // worker tells by the size).
  absl::Status SendModel(const PullSnapshot& snapshot, wire::RequestKind kind) {
    const float* values = snapshot.values->data();
    const size_t floats = snapshot.values->size();
    const size_t parameters = std::min(snapshot.layout->parameter_floats, floats);
    // Converted once, and sent so if every weight has a finite half.
    bool half = kind == wire::RequestKind::kExchangeHalf && parameters > 0;
    if (half) {
      reply_halves_.resize(parameters);
      half = FloatsToFiniteHalves(values, parameters, reply_halves_.data());
    }
    wire::Reply reply;
    reply.version = snapshot.version;
    reply.global_epoch = snapshot.global_epoch;
    reply.samples = snapshot.samples;
    reply.sample_budget = snapshot.sample_budget;
    reply.payload_bytes = wire::PayloadBytes(parameters, floats - parameters, half);
    uint8_t header[wire::kReplyBytes];
    wire::EncodeReply(reply, header);
    if (kind == wire::RequestKind::kExchangeShared) {
      std::memcpy(region_->reply_area(), values, reply.payload_bytes);
      shared_exchanges_->fetch_add(1, std::memory_order_relaxed);
      return tcp::SendAll(fd_, header, sizeof(header), nullptr, 0);
    }
    if (!half) {
      // Straight from the published model, which no one writes again while we hold it.
      return tcp::SendAll(fd_, header, sizeof(header), values, reply.payload_bytes);
    }
    iovec parts[3] = {
        {header, sizeof(header)},
        {reply_halves_.data(), parameters * sizeof(uint16_t)},
        {const_cast<float*>(values + parameters), (floats - parameters) * sizeof(float)}};
    return tcp::SendParts(fd_, parts, 3);
  }

  absl::Status SendRefusal(const absl::Status& status) {
    std::string message(status.message().substr(0, wire::kMaxMessageBytes));
    wire::Reply reply;
    reply.code = static_cast<uint32_t>(status.code());
    reply.message_bytes = static_cast<uint32_t>(message.size());
    uint8_t header[wire::kReplyBytes];
    wire::EncodeReply(reply, header);
    return tcp::SendAll(fd_, header, sizeof(header), message.data(), message.size());
  }

  PartitionStore* const partition_;
  const TcpPushPullServerOptions& options_;
  const int fd_;
  const int worker_;
  std::atomic<int64_t>* const shared_exchanges_;
  // Reused from push to push while the layout stays: a fresh one would zero 4 bytes per weight.
  std::unique_ptr<PushStaging> staging_;
  // The connection's shared region, once the worker asked for one (kShareMemory).
  std::unique_ptr<SharedRegion> region_;
  // 16-bit exchanges: a piece of the push as it arrives, and the reply's weights.
  std::vector<uint16_t> half_piece_;
  std::vector<uint16_t> reply_halves_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TcpPushPullServer>> TcpPushPullServer::Start(
    PartitionStore* partition, TcpPushPullServerOptions options) {
  std::vector<tcp::Ticket> tickets;
  for (int w = 0; w < partition->config().workers; ++w) {
    STRATA_ASSIGN_OR_RETURN(const tcp::Ticket ticket, tcp::RandomTicket());
    tickets.push_back(ticket);
  }
  int port = 0;
  STRATA_ASSIGN_OR_RETURN(const int fd, tcp::ListenTcp(options.listen_host, &port));
  tcp::HelloGateOptions gate;
  gate.max_pending = options.max_pending;
  gate.handshake_timeout = options.hello_timeout;
  gate.what = "push/pull data plane";
  std::unique_ptr<TcpPushPullServer> server(
      new TcpPushPullServer(partition, std::move(options), port, std::move(tickets)));
  STRATA_ASSIGN_OR_RETURN(
      server->gate_,
      tcp::HelloGate::Start(fd, gate, [s = server.get()](int connection, const uint8_t* hello) {
        return s->Admit(connection, hello);
      }));
  return server;
}

TcpPushPullServer::~TcpPushPullServer() { Stop(); }

void TcpPushPullServer::Stop() {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return;
  stopping_ = true;
  lock.unlock();
  // The gate first: once it has stopped, no new session starts.
  if (gate_) gate_->Stop();
  lock.lock();
  // shutdown() wakes the threads blocked in recv; the fds close once they are joined.
  for (Connection& c : connections_) shutdown(c.fd, SHUT_RDWR);
  for (Connection& c : connections_) {
    if (c.thread.joinable()) {
      lock.unlock();
      c.thread.join();
      lock.lock();
    }
    close(c.fd);
  }
  connections_.clear();
}

void TcpPushPullServer::ReapFinished(std::unique_lock<std::mutex>& lock) {
  std::list<Connection> finished;
  for (auto it = connections_.begin(); it != connections_.end();) {
    auto next = std::next(it);
    if (it->done) finished.splice(finished.end(), connections_, it);
    it = next;
  }
  lock.unlock();
  for (Connection& c : finished) {
    c.thread.join();
    close(c.fd);
  }
  lock.lock();
}

bool TcpPushPullServer::Admit(int fd, const uint8_t* hello) {
  tcp::Ticket presented;
  uint32_t sender = 0;
  if (!tcp::DecodeHello(push_pull_wire::kHelloMagic, push_pull_wire::kVersion, "push/pull", hello,
                        &presented, &sender)
           .ok() ||
      sender >= tickets_.size() || !tcp::SameTicket(presented, tickets_[sender])) {
    return false;  // closed unread by the gate
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return false;
  ReapFinished(lock);
  // A worker reconnects after a failure while its old connection may not have noticed yet: its
  // newest connections are kept, the oldest beyond the limit is ended.
  int held = 0;
  for (auto it = connections_.rbegin(); it != connections_.rend(); ++it) {
    if (it->worker != sender || it->done) continue;
    if (++held >= options_.connections_per_worker) shutdown(it->fd, SHUT_RDWR);
  }
  connections_.push_back(Connection{fd, sender, false, {}});
  Connection* c = &connections_.back();
  c->thread = std::thread([this, c] { Serve(c); });
  return true;
}

void TcpPushPullServer::Serve(Connection* c) {
  const int fd = c->fd;
  tcp::SetSendTimeout(fd, options_.send_timeout);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // The welcome: the worker learns that it was admitted before it commits an exchange to this
  // connection (a refused one falls back to gRPC instead).
  uint8_t welcome[push_pull_wire::kReplyBytes];
  push_pull_wire::EncodeReply(push_pull_wire::Reply{}, welcome);
  if (tcp::SendAll(fd, welcome, sizeof(welcome), nullptr, 0).ok()) {
    Session(partition_, options_, fd, static_cast<int>(c->worker), &shared_exchanges_).Run();
  }
  // The peer learns now that the connection is over; the descriptor is closed when the thread
  // is joined (the next admission, or Stop).
  shutdown(fd, SHUT_RDWR);
  std::lock_guard<std::mutex> lock(mu_);
  c->done = true;
}

}  // namespace strata
