#include "services/collective/tcp_mesh_link.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "services/collective/mesh_frame.h"
#include "services/common/base/status.h"
#include "services/common/wire/half_float.h"
#include "services/common/wire/tcp_hello_gate.h"

namespace strata {
namespace {

// Connections without a complete hello held at once, and the time each has to send it: a real
// peer sends its hello as soon as it has connected.
constexpr size_t kMaxPendingConnections = 64;
constexpr std::chrono::milliseconds kHelloTimeout{10000};

// The sending side: one connection, written by the mesh's writer thread for the peer. The peer
// acknowledges every message once it is in its inbox (the ack carries how many it has taken);
// the acks are read as they come, and with a bound on the messages in flight the writer waits
// for them before sending more.
class TcpGradientSender final : public GradientSender {
 public:
  TcpGradientSender(int fd, std::string peer, const TcpMeshSenderOptions& options)
      : fd_(fd),
        peer_(std::move(peer)),
        deadline_(options.deadline),
        max_in_flight_(options.max_in_flight),
        half_precision_(options.half_precision) {
    tcp::SetReceiveTimeout(fd_, deadline_);
  }
  ~TcpGradientSender() override { close(fd_); }

  absl::Status Send(const v1::StreamGradient& message) override {
    mesh_frame::Header header = mesh_frame::HeaderOf(message);
    // The frame carries count x world clock entries: a message with another number would put
    // the receiver's reading out of step, so it is not sent.
    if (static_cast<uint64_t>(message.clock_size()) * 8 != mesh_frame::ClockBytes(header)) {
      return absl::InvalidArgumentError(
          absl::StrCat("a message with a clock of ", message.clock_size(), " entries for ",
                       header.count, " gradient(s) of ", header.world, " replicas is not sent"));
    }
    // stream.max_in_flight: no more than that many messages sent and not yet taken by the peer.
    while (max_in_flight_ > 0 && sent_ - taken_ >= max_in_flight_) {
      STRATA_RETURN_IF_ERROR(ReadAck(/*wait=*/true));
    }
    const char* values = message.values().data();
    if (half_precision_ && header.kind == mesh_frame::Kind::kGradient) {
      const size_t n = message.values().size() / sizeof(float);
      halves_.resize(n);
      // Aligned: protobuf's bytes are a std::string, whose buffer is allocated for any type.
      if (FloatsToFiniteHalves(reinterpret_cast<const float*>(values), n, halves_.data())) {
        header.kind = mesh_frame::Kind::kHalfGradient;
        header.value_bytes = n * sizeof(uint16_t);
        values = reinterpret_cast<const char*>(halves_.data());
      }
    }
    uint8_t head[mesh_frame::kHeaderBytes];
    mesh_frame::Encode(header, head);
    clock_.resize(message.clock_size() * 8);
    for (int i = 0; i < message.clock_size(); ++i) {
      tcp::Put64(clock_.data() + 8 * i, static_cast<uint64_t>(message.clock(i)));
    }
    iovec parts[3] = {{head, sizeof(head)},
                      {clock_.data(), clock_.size()},
                      {const_cast<char*>(values), static_cast<size_t>(header.value_bytes)}};
    if (absl::Status s = tcp::SendParts(fd_, parts, 3); !s.ok()) {
      return Annotate(s, absl::StrCat("the connection to ", peer_, " broke"));
    }
    ++sent_;
    ended_ = ended_ || message.end();
    // The acks that came meanwhile, so that they never fill this side's receive buffer (after
    // the end's, the peer closes: nothing more to read).
    while (taken_ < sent_) {
      const uint64_t before = taken_;
      STRATA_RETURN_IF_ERROR(ReadAck(/*wait=*/false));
      if (taken_ == before) break;
    }
    return absl::OkStatus();
  }

  absl::Status Finish() override {
    if (!ended_) return absl::OkStatus();  // broken off before the end: nothing to confirm
    // The ack of the end says the peer's inbox holds it, and so every message before it.
    while (taken_ < sent_) {
      if (absl::Status s = ReadAck(/*wait=*/true); !s.ok()) {
        return Annotate(s, absl::StrCat(peer_, " did not acknowledge our end"));
      }
    }
    return absl::OkStatus();
  }

  void Cancel() override { shutdown(fd_, SHUT_RDWR); }

 private:
  // Reads at most one ack: waiting for it up to the deadline, or only if its bytes are there. An
  // ack may arrive in pieces; the part read so far is kept for the next call.
  absl::Status ReadAck(bool wait) {
    while (ack_have_ < sizeof(ack_)) {
      const ssize_t n =
          recv(fd_, ack_ + ack_have_, sizeof(ack_) - ack_have_, wait ? 0 : MSG_DONTWAIT);
      if (n > 0) {
        ack_have_ += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!wait) return absl::OkStatus();
        return absl::DeadlineExceededError(absl::StrCat(peer_, " took none of our gradients for ",
                                                        deadline_.count() / 1000, " s"));
      }
      return absl::UnavailableError(
          absl::StrCat("the connection to ", peer_, n == 0 ? " was closed" : " broke", " after ",
                       taken_, " of our ", sent_, " messages were taken"));
    }
    ack_have_ = 0;
    mesh_frame::Header ack;
    if (absl::Status s = mesh_frame::Decode(ack_, &ack);
        !s.ok() || ack.kind != mesh_frame::Kind::kAck || ack.index > sent_ || ack.index < taken_) {
      return absl::DataLossError(absl::StrCat(peer_, " sent something that is not an ack"));
    }
    taken_ = ack.index;
    return absl::OkStatus();
  }

  const int fd_;
  const std::string peer_;
  const std::chrono::milliseconds deadline_;
  const uint32_t max_in_flight_;   // 0: no bound
  const bool half_precision_;
  std::vector<uint8_t> clock_;     // the clock's entries as they go on the wire
  std::vector<uint16_t> halves_;   // a half gradient's values as they go on the wire
  uint64_t sent_ = 0, taken_ = 0;  // messages sent, and taken by the peer (its latest ack)
  uint8_t ack_[mesh_frame::kHeaderBytes];
  size_t ack_have_ = 0;
  bool ended_ = false;
};

}  // namespace

struct TcpMeshPlane::Impl {
  struct Connection {
    int fd = -1;
    uint32_t sender = 0;
    std::thread thread;
    bool done = false;  // its thread has finished (joined and closed at the next Admit or Stop)
  };

  Impl(const TcpMeshPlaneOptions& o, int p, std::vector<tcp::Ticket> t, Deliver d)
      : options(o), port(p), tickets(std::move(t)), deliver(std::move(d)) {}

  // On the gate's thread: a hello with the ticket of the peer rank it names, from a rank not yet
  // connected, gets a reader; anything else is closed unread.
  bool Admit(int fd, const uint8_t* hello) {
    tcp::Ticket presented;
    uint32_t sender = 0;
    if (!mesh_frame::DecodeHello(hello, &presented, &sender).ok() || sender >= tickets.size() ||
        !tcp::SameTicket(presented, tickets[sender])) {
      return false;
    }
    std::list<Connection> finished;
    bool admitted = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto it = connections.begin(); it != connections.end();) {
        auto here = it++;
        if (here->done) finished.splice(finished.end(), connections, here);
      }
      // One live connection per peer rank, so at most world - 1 readers. A peer's gradients are
      // numbered: a connection that follows a closed one must go on where it stopped, which the
      // mesh checks.
      bool live = false;
      for (const Connection& c : connections) live = live || c.sender == sender;
      if (live) spdlog::warn("gradient mesh: a second connection as replica {} refused", sender);
      if (!stopping && !live && sender < static_cast<uint32_t>(options.world) &&
          sender != static_cast<uint32_t>(options.rank)) {
        connections.emplace_back();
        Connection* c = &connections.back();
        c->fd = fd;
        c->sender = sender;
        c->thread = std::thread([this, c] {
          Receive(c->fd, c->sender);
          {
            // Before the peer can see the close: a connection it opens next finds this one done.
            std::lock_guard<std::mutex> done(mu);
            c->done = true;
          }
          // The descriptor is closed when the thread is joined, so that its number cannot be
          // reused while Stop may still shut it down.
          shutdown(c->fd, SHUT_RDWR);
        });
        admitted = true;
      }
    }
    for (Connection& c : finished) {
      c.thread.join();
      close(c.fd);
    }
    return admitted;
  }

  // Frames from `sender` until its end, an error or the plane's stop.
  void Receive(int fd, uint32_t sender) {
    // The acks are small writes that must not wait for Nagle's algorithm: a sender held by
    // stream.max_in_flight sends nothing until the next one comes.
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const uint64_t value_bytes = options.parameter_floats * sizeof(float);
    std::vector<uint8_t> clock;
    std::vector<uint16_t> halves;
    uint64_t taken = 0;  // messages of this connection in the inbox
    while (true) {
      uint8_t head[mesh_frame::kHeaderBytes];
      absl::Status s = tcp::ReceiveExact(fd, head, sizeof(head));
      mesh_frame::Header h;
      if (s.ok()) s = mesh_frame::Decode(head, &h);
      if (s.ok() && h.kind == mesh_frame::Kind::kAck) s = absl::InvalidArgumentError("an ack");
      // Checked before anything is allocated for the payload: the rest of the message's checks
      // (index, clock entries) are the mesh's, as for a message that came over gRPC.
      if (s.ok() && h.sender != sender) {
        s = absl::InvalidArgumentError(
            absl::StrCat("a frame of replica ", h.sender, " on replica ", sender, "'s connection"));
      }
      if (s.ok() && h.world != static_cast<uint32_t>(options.world)) {
        s = absl::InvalidArgumentError(absl::StrCat("a gradient of a job of ", h.world,
                                                    " replicas, this one has ", options.world));
      }
      if (s.ok() && mesh_frame::CarriesGradient(h.kind) &&
          h.value_bytes != options.parameter_floats * mesh_frame::ValueWidth(h.kind)) {
        s = absl::InvalidArgumentError(absl::StrCat(
            "a gradient of ", h.value_bytes, " bytes for a model of ", options.parameter_floats,
            h.kind == mesh_frame::Kind::kHalfGradient ? " floats as halves" : " floats"));
      }
      auto message = std::make_unique<v1::StreamGradient>();
      if (s.ok()) {
        message->set_sender(h.sender);
        message->set_world(h.world);
        message->set_index(h.index);
        message->set_end(h.kind == mesh_frame::Kind::kEnd);
        if (mesh_frame::CarriesGradient(h.kind)) {
          message->set_count(h.count);
          clock.resize(mesh_frame::ClockBytes(h));
          s = tcp::ReceiveExact(fd, clock.data(), clock.size());
          const size_t entries = clock.size() / 8;
          message->mutable_clock()->Resize(static_cast<int>(entries), 0);
          for (size_t i = 0; s.ok() && i < entries; ++i) {
            message->set_clock(static_cast<int>(i),
                               static_cast<int64_t>(tcp::Get64(&clock[8 * i])));
          }
          // Straight into the message the replica applies the values from; halves through a
          // buffer of their own, converted as they are taken.
          std::string* values = message->mutable_values();
          values->resize(value_bytes);
          if (s.ok() && h.kind == mesh_frame::Kind::kHalfGradient) {
            halves.resize(options.parameter_floats);
            s = tcp::ReceiveExact(fd, halves.data(), h.value_bytes);
            if (s.ok()) {
              HalvesToFloats(halves.data(), halves.size(),
                             reinterpret_cast<float*>(values->data()));
              received_in_halves.fetch_add(1, std::memory_order_relaxed);
            }
          } else if (s.ok()) {
            s = tcp::ReceiveExact(fd, values->data(), values->size());
          }
        }
      }
      if (!s.ok()) {
        if (Stopping()) {
          // This plane closed it.
        } else if (s.code() == absl::StatusCode::kOutOfRange) {
          spdlog::warn("gradient mesh: replica {} closed its connection before its end", sender);
        } else {
          spdlog::error("gradient mesh: replica {}'s connection: {}", sender,
                        std::string(s.message()));
        }
        return;
      }
      const bool end = message->end();
      if (absl::Status d = deliver(std::move(message), sender); !d.ok()) return;
      // Every message is acknowledged once in the inbox, with the count taken so far: what
      // bounds the sender's messages in flight (stream.max_in_flight), and after the end what
      // its close waits for.
      mesh_frame::Header ack;
      ack.kind = mesh_frame::Kind::kAck;
      ack.sender = static_cast<uint32_t>(options.rank);
      ack.world = static_cast<uint32_t>(options.world);
      ack.index = ++taken;
      uint8_t out[mesh_frame::kHeaderBytes];
      mesh_frame::Encode(ack, out);
      if (!tcp::SendAll(fd, out, sizeof(out), nullptr, 0).ok() || end) return;
    }
  }

  void Forget(uint32_t sender) {
    std::list<Connection> gone;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto it = connections.begin(); it != connections.end();) {
        auto here = it++;
        if (here->sender != sender) continue;
        shutdown(here->fd, SHUT_RDWR);
        gone.splice(gone.end(), connections, here);  // the reader's pointer to it stays valid
      }
    }
    for (Connection& c : gone) {
      c.thread.join();
      close(c.fd);
    }
  }

  bool Stopping() {
    std::lock_guard<std::mutex> lock(mu);
    return stopping;
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopped) return;
      stopping = true;
    }
    // No connection is admitted once the gate has stopped (and Admit sees `stopping` before).
    gate->Stop();
    std::list<Connection> all;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (Connection& c : connections) shutdown(c.fd, SHUT_RDWR);
      all.splice(all.end(), connections);
      stopped = true;
    }
    for (Connection& c : all) {
      c.thread.join();
      close(c.fd);
    }
  }

  const TcpMeshPlaneOptions options;
  const int port;
  const std::vector<tcp::Ticket> tickets;  // by sender rank (this replica's own admits nothing)
  const Deliver deliver;
  std::unique_ptr<tcp::HelloGate> gate;

  std::atomic<int64_t> received_in_halves{0};

  std::mutex mu;
  std::list<Connection> connections;  // at most one per peer rank
  bool stopping = false, stopped = false;
};

absl::StatusOr<std::unique_ptr<TcpMeshPlane>> TcpMeshPlane::Start(
    const TcpMeshPlaneOptions& options, Deliver deliver) {
  // One ticket per peer rank: a connection speaks for the rank its hello names, so one rank's
  // ticket cannot open another's connection.
  std::vector<tcp::Ticket> tickets;
  for (int r = 0; r < options.world; ++r) {
    STRATA_ASSIGN_OR_RETURN(tcp::Ticket ticket, tcp::RandomTicket());
    tickets.push_back(ticket);
  }
  int port = 0;
  absl::StatusOr<int> fd = tcp::ListenTcp(options.listen_host, &port);
  if (!fd.ok()) return Annotate(fd.status(), "gradient mesh data plane");
  auto impl = std::make_unique<Impl>(options, port, std::move(tickets), std::move(deliver));
  Impl* raw = impl.get();
  tcp::HelloGateOptions gate;
  gate.max_pending = kMaxPendingConnections;
  gate.handshake_timeout = kHelloTimeout;
  gate.what = "gradient mesh data plane";
  absl::StatusOr<std::unique_ptr<tcp::HelloGate>> started = tcp::HelloGate::Start(
      *fd, gate,
      [raw](int connection, const uint8_t* hello) { return raw->Admit(connection, hello); });
  if (!started.ok()) return Annotate(started.status(), "gradient mesh data plane");
  impl->gate = std::move(*started);
  return std::unique_ptr<TcpMeshPlane>(new TcpMeshPlane(std::move(impl)));
}

TcpMeshPlane::TcpMeshPlane(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpMeshPlane::~TcpMeshPlane() { Stop(); }
void TcpMeshPlane::Stop() { impl_->Stop(); }
void TcpMeshPlane::Forget(uint32_t sender) { impl_->Forget(sender); }
int TcpMeshPlane::port() const { return impl_->port; }
const tcp::Ticket* TcpMeshPlane::ticket(uint32_t sender) const {
  if (sender >= impl_->tickets.size() || sender == static_cast<uint32_t>(impl_->options.rank)) {
    return nullptr;
  }
  return &impl_->tickets[sender];
}
int64_t TcpMeshPlane::received_in_halves() const { return impl_->received_in_halves.load(); }

absl::StatusOr<std::unique_ptr<GradientSender>> DialTcpMeshPeer(
    const std::string& host, int port, const tcp::Ticket& ticket,
    const TcpMeshSenderOptions& options) {
  const std::string peer = absl::StrCat(host, ":", port);
  absl::StatusOr<int> fd = tcp::DialTcp(host, port, options.deadline);
  if (!fd.ok()) return Annotate(fd.status(), absl::StrCat("gradient mesh data plane at ", peer));
  tcp::SetSendTimeout(*fd, options.deadline);
  uint8_t hello[tcp::kHelloBytes];
  mesh_frame::EncodeHello(ticket, options.rank, hello);
  if (absl::Status s = tcp::SendAll(*fd, hello, sizeof(hello), nullptr, 0); !s.ok()) {
    close(*fd);
    return Annotate(s, absl::StrCat("gradient mesh data plane at ", peer));
  }
  return std::unique_ptr<GradientSender>(new TcpGradientSender(*fd, peer, options));
}

}  // namespace strata
