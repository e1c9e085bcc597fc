#include "services/collective/gradient_mesh.h"

#include <algorithm>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "services/common/base/status.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/tcp_socket.h"

namespace strata {

using MeshClock = std::chrono::steady_clock;

namespace {

// A gRPC client stream (StreamReplica.Gradients) as a peer's connection.
class GrpcGradientSender final : public GradientSender {
 public:
  GrpcGradientSender(v1::StreamReplica::Stub& stub, std::string peer) : peer_(std::move(peer)) {
    stream_ = stub.Gradients(&context_, &ack_);
  }

  absl::Status Send(const v1::StreamGradient& message) override {
    if (stream_->Write(message)) return absl::OkStatus();
    context_.TryCancel();
    const grpc::Status finished = stream_->Finish();
    return absl::UnavailableError(
        absl::StrCat("the stream to ", peer_, " broke: ", finished.error_message()));
  }

  absl::Status Finish() override {
    stream_->WritesDone();
    const grpc::Status finished = stream_->Finish();
    if (finished.ok()) return absl::OkStatus();
    return absl::UnavailableError(
        absl::StrCat(peer_, " refused our gradients: ", finished.error_message()));
  }

  void Cancel() override { context_.TryCancel(); }

 private:
  const std::string peer_;
  grpc::ClientContext context_;
  v1::StreamGradientAck ack_;
  std::unique_ptr<grpc::ClientWriter<v1::StreamGradient>> stream_;
};

}  // namespace

// One peer's outgoing connection: its queue and the thread that writes it.
struct GradientMesh::Peer {
  int rank = 0;
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::StreamReplica::Stub> stub;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<const v1::StreamGradient>> queue;
  GradientSender* sender = nullptr;  // the writer's, while it has one (Close may cancel it)
  bool done = false;     // no more gradients will be queued
  bool stopped = false;  // the writer thread ended
  absl::Status error;    // why the connection broke
  std::thread writer;
};

GradientMesh::GradientMesh(const GradientMeshOptions& options)
    : options_(options),
      next_index_(static_cast<size_t>(std::max(options.world, 1)), 0),
      ended_(static_cast<size_t>(std::max(options.world, 1)), false),
      dropped_(static_cast<size_t>(std::max(options.world, 1)), false),
      epoch_(static_cast<size_t>(std::max(options.world, 1)), 0),
      grpc_readers_(static_cast<size_t>(std::max(options.world, 1))) {}

GradientMesh::~GradientMesh() {
  {
    std::lock_guard lock(inbox_mu_);
    closing_ = true;
  }
  inbox_cv_.notify_all();
  (void)Close(MeshClock::now() + std::chrono::seconds(2));
  if (plane_) plane_->Stop();  // its readers waiting for room have seen closing_
}

absl::Status GradientMesh::OfferDataPlane() {
  if (!options_.tcp || plane_) return absl::OkStatus();
  TcpMeshPlaneOptions plane;
  plane.listen_host = options_.listen_host;
  plane.rank = options_.rank;
  plane.world = options_.world;
  plane.parameter_floats = options_.parameter_floats;
  STRATA_ASSIGN_OR_RETURN(
      plane_,
      TcpMeshPlane::Start(plane, [this](std::unique_ptr<v1::StreamGradient> m, uint32_t from) {
        return Deliver(
            std::move(m), absl::StrCat("replica ", from, "'s TCP connection"), [] { return false; },
            &received_over_tcp_, kAnyEpoch);
      }));
  return absl::OkStatus();
}

grpc::Status GradientMesh::DataPlane(grpc::ServerContext*, const v1::DataPlaneRequest* request,
                                     v1::DataPlaneOffer* offer) {
  if (!plane_) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this replica's gradients go on gRPC");
  }
  const tcp::Ticket* ticket = plane_->ticket(request->sender());
  if (ticket == nullptr) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("no replica ", request->sender(), " sends to replica ",
                                     options_.rank, " of ", options_.world));
  }
  offer->set_port(static_cast<uint32_t>(plane_->port()));
  offer->set_ticket(ticket->data(), ticket->size());
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<GradientSender>> GradientMesh::OpenSender(Peer& peer) {
  const std::string name = absl::StrCat("replica ", peer.rank, " at ", peer.address);
  if (options_.tcp) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(options_.deadline));
    v1::DataPlaneRequest request;
    request.set_sender(static_cast<uint32_t>(options_.rank));
    v1::DataPlaneOffer offer;
    const grpc::Status asked = peer.stub->DataPlane(&context, request, &offer);
    if (asked.ok()) {
      tcp::Ticket ticket;
      if (offer.ticket().size() != ticket.size() || offer.port() == 0 || offer.port() > 65535) {
        return absl::DataLossError(absl::StrCat(name, " offered a data plane that is not one"));
      }
      std::copy(offer.ticket().begin(), offer.ticket().end(), ticket.begin());
      TcpMeshSenderOptions sender;
      sender.rank = static_cast<uint32_t>(options_.rank);
      sender.deadline = options_.deadline;
      sender.max_in_flight = options_.max_in_flight;
      sender.half_precision = options_.half_precision;
      return DialTcpMeshPeer(tcp::DataPlaneHost(peer.address), static_cast<int>(offer.port()),
                             ticket, sender);
    }
    if (asked.error_code() != grpc::StatusCode::UNIMPLEMENTED) {
      return absl::UnavailableError(
          absl::StrCat(name, " did not offer its data plane: ", asked.error_message()));
    }
    spdlog::warn("{} offers no plain-TCP data plane (TLS on there?): gradients to it go on gRPC",
                 name);
  }
  return std::make_unique<GrpcGradientSender>(*peer.stub, name);
}

absl::Status GradientMesh::Connect(const std::vector<std::string>& peers) {
  if (static_cast<int>(peers.size()) != options_.world) {
    return absl::InvalidArgumentError(
        absl::StrCat(peers.size(), " replica addresses for ", options_.world, " replicas"));
  }
  peers_.resize(peers.size());
  const auto until = std::chrono::system_clock::now() + options_.deadline;
  for (int r = 0; r < options_.world; ++r) {
    if (r == options_.rank) continue;
    STRATA_RETURN_IF_ERROR(StartPeer(r, peers[static_cast<size_t>(r)], until));
  }
  return absl::OkStatus();
}

absl::Status GradientMesh::StartPeer(int rank, const std::string& address,
                                     std::chrono::system_clock::time_point until) {
  auto peer = std::make_unique<Peer>();
  peer->rank = rank;
  peer->address = address;
  peer->channel = MakeChannel(peer->address);
  if (!peer->channel->WaitForConnected(until)) {
    return absl::DeadlineExceededError(absl::StrCat("replica ", rank, " at ", peer->address,
                                                    " did not answer within ",
                                                    options_.deadline.count() / 1000, " s"));
  }
  peer->stub = v1::StreamReplica::NewStub(peer->channel);
  Peer* p = peer.get();
  peer->writer = std::thread([this, p] { Write(p); });
  peers_[static_cast<size_t>(rank)] = std::move(peer);
  return absl::OkStatus();
}

void GradientMesh::Drop(int rank) {
  const size_t r = static_cast<size_t>(rank);
  if (rank < 0 || rank >= options_.world || rank == options_.rank) return;
  {
    std::lock_guard lock(inbox_mu_);
    dropped_[r] = true;
    ++epoch_[r];  // a stream of this incarnation still reading delivers nothing from now on
    for (grpc::ServerContext* reading : grpc_readers_[r]) reading->TryCancel();
  }
  inbox_cv_.notify_all();  // a reader waiting for room sees it
  if (plane_) plane_->Forget(static_cast<uint32_t>(rank));
  {
    std::unique_lock lock(inbox_mu_);
    if (!inbox_cv_.wait_for(lock, options_.deadline, [&] { return grpc_readers_[r].empty(); })) {
      spdlog::warn("gradient mesh: a stream of replica {} did not end when cut off", rank);
    }
  }
  if (r >= peers_.size() || !peers_[r]) return;
  Peer& peer = *peers_[r];
  {
    std::lock_guard lock(peer.mu);
    peer.done = true;
    if (peer.sender != nullptr) peer.sender->Cancel();
    peer.cv.notify_all();
  }
  if (peer.writer.joinable()) peer.writer.join();
  peers_[r].reset();
}

absl::Status GradientMesh::Rejoin(int rank, const std::string& address, uint64_t next_index) {
  if (rank < 0 || rank >= options_.world || rank == options_.rank) {
    return absl::InvalidArgumentError(absl::StrCat("no replica ", rank, " to rejoin"));
  }
  Drop(rank);  // whatever is left of the one before
  {
    std::lock_guard lock(inbox_mu_);
    const size_t r = static_cast<size_t>(rank);
    dropped_[r] = false;
    ended_[r] = false;
    next_index_[r] = next_index;
  }
  return StartPeer(rank, address, std::chrono::system_clock::now() + options_.deadline);
}

void GradientMesh::ExpectFrom(const std::vector<int64_t>& next_index) {
  std::lock_guard lock(inbox_mu_);
  for (size_t r = 0; r < next_index.size() && r < next_index_.size(); ++r) {
    next_index_[r] = static_cast<uint64_t>(std::max<int64_t>(0, next_index[r]));
  }
}

void GradientMesh::Write(Peer* peer) {
  absl::StatusOr<std::unique_ptr<GradientSender>> opened = OpenSender(*peer);
  absl::Status error = opened.status();
  if (opened.ok()) {
    GradientSender& sender = **opened;
    {
      std::lock_guard lock(peer->mu);
      peer->sender = &sender;
    }
    while (error.ok()) {
      std::shared_ptr<const v1::StreamGradient> next;
      {
        std::unique_lock lock(peer->mu);
        peer->cv.wait(lock, [&] { return !peer->queue.empty() || peer->done; });
        if (peer->queue.empty()) break;  // done, and everything written
        next = peer->queue.front();
      }
      error = sender.Send(*next);
      if (!error.ok()) break;
      std::lock_guard lock(peer->mu);
      peer->queue.pop_front();
      peer->cv.notify_all();
    }
    if (error.ok()) error = sender.Finish();
    std::lock_guard lock(peer->mu);
    peer->sender = nullptr;
  }
  opened = absl::CancelledError();  // the connection closes before the writer says it stopped
  std::lock_guard lock(peer->mu);
  peer->error = error;
  peer->stopped = true;
  peer->cv.notify_all();
}

size_t GradientMesh::SendQueueBound() const {
  return options_.max_queued_sends > 0 ? options_.max_queued_sends : options_.max_queued;
}

bool GradientMesh::RoomToSend(MeshClock::time_point until) {
  for (const auto& peer : peers_) {
    if (!peer) continue;
    std::unique_lock lock(peer->mu);
    if (!peer->cv.wait_until(
            lock, until, [&] { return peer->stopped || peer->queue.size() < SendQueueBound(); })) {
      return false;
    }
  }
  return true;
}

absl::Status GradientMesh::Queue(Peer& peer,
                                 const std::shared_ptr<const v1::StreamGradient>& message) {
  std::unique_lock lock(peer.mu);
  const bool room = peer.cv.wait_for(lock, options_.deadline, [&] {
    return peer.stopped || peer.queue.size() < SendQueueBound();
  });
  if (peer.stopped) {
    return absl::UnavailableError(
        peer.error.ok() ? absl::StrCat("the stream to replica ", peer.rank, " is closed")
                        : absl::StrCat("replica ", peer.rank, ": ", peer.error.message()));
  }
  if (!room) {
    return absl::DeadlineExceededError(absl::StrCat("replica ", peer.rank, " at ", peer.address,
                                                    " took no gradient for ",
                                                    options_.deadline.count() / 1000, " s"));
  }
  peer.queue.push_back(message);
  peer.cv.notify_all();
  return absl::OkStatus();
}

absl::Status GradientMesh::Broadcast(std::shared_ptr<const v1::StreamGradient> gradient) {
  // Every live peer gets it before a broken stream is reported: the survivors of a replica's
  // death all hold the same messages.
  absl::Status broken;
  for (const auto& peer : peers_) {
    if (!peer) continue;
    absl::Status queued = Queue(*peer, gradient);
    if (absl::IsUnavailable(queued)) {
      if (broken.ok()) broken = queued;
    } else if (!queued.ok()) {
      return queued;
    }
  }
  return broken;
}

absl::Status GradientMesh::SendTo(int rank, std::shared_ptr<const v1::StreamGradient> message) {
  const size_t r = static_cast<size_t>(rank);
  if (rank < 0 || r >= peers_.size() || !peers_[r]) {
    return absl::FailedPreconditionError(absl::StrCat("no stream to replica ", rank));
  }
  return Queue(*peers_[r], message);
}

absl::StatusOr<std::vector<std::unique_ptr<v1::StreamGradient>>> GradientMesh::Take(
    MeshClock::time_point until) {
  std::unique_lock lock(inbox_mu_);
  inbox_cv_.wait_until(lock, until, [&] { return !inbox_.empty() || !inbox_error_.ok(); });
  if (!inbox_error_.ok()) return inbox_error_;
  std::vector<std::unique_ptr<v1::StreamGradient>> taken;
  taken.reserve(inbox_.size());
  while (!inbox_.empty()) {
    taken.push_back(std::move(inbox_.front()));
    inbox_.pop_front();
  }
  inbox_cv_.notify_all();  // room for the senders
  return taken;
}

absl::Status GradientMesh::Close(MeshClock::time_point until) {
  absl::Status first;
  for (const auto& peer : peers_) {
    if (!peer) continue;
    {
      std::unique_lock lock(peer->mu);
      peer->done = true;
      peer->cv.notify_all();
      if (!peer->cv.wait_until(lock, until, [&] { return peer->stopped; })) {
        if (peer->sender != nullptr) peer->sender->Cancel();
        if (first.ok()) {
          first = absl::DeadlineExceededError(absl::StrCat(
              "replica ", peer->rank, " at ", peer->address, " had not taken every gradient"));
        }
      } else if (!peer->error.ok() && first.ok()) {
        first = peer->error;
      }
    }
    if (peer->writer.joinable()) peer->writer.join();
  }
  peers_.clear();
  return first;
}

absl::Status GradientMesh::Check(const v1::StreamGradient& g, uint64_t expected_index) const {
  if (g.world() != static_cast<uint32_t>(options_.world)) {
    return absl::InvalidArgumentError(absl::StrCat("a gradient of a job of ", g.world(),
                                                   " replicas, this one has ", options_.world));
  }
  if (g.index() != expected_index) {
    return absl::InvalidArgumentError(absl::StrCat("gradient ", g.index(), " of replica ",
                                                   g.sender(), " where ", expected_index,
                                                   " was due (a gap or a repeat)"));
  }
  if (g.end()) {
    if (!g.values().empty() || g.clock_size() != 0) {
      return absl::InvalidArgumentError("an end message carries no values and no clock");
    }
    return absl::OkStatus();
  }
  if (g.count() < 1 || g.count() > kMaxGradientsPerMessage) {
    return absl::InvalidArgumentError(absl::StrCat("a message of ", g.count(),
                                                   " gradients (1 to ", kMaxGradientsPerMessage,
                                                   ")"));
  }
  if (static_cast<int64_t>(g.clock_size()) != static_cast<int64_t>(g.count()) * options_.world) {
    return absl::InvalidArgumentError(absl::StrCat("a clock of ", g.clock_size(), " entries for ",
                                                   g.count(), " gradient(s) of ", options_.world,
                                                   " replicas"));
  }
  for (int64_t c : g.clock()) {
    if (c < 0) return absl::InvalidArgumentError("a negative clock entry");
  }
  if (g.values().size() != options_.parameter_floats * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat("a gradient of ", g.values().size(),
                                                   " bytes for a model of ",
                                                   options_.parameter_floats, " floats"));
  }
  return absl::OkStatus();
}

absl::Status GradientMesh::Deliver(std::unique_ptr<v1::StreamGradient> message,
                                   const std::string& who, const std::function<bool()>& cancelled,
                                   int64_t* received, uint64_t epoch) {
  const uint32_t sender = message->sender();
  if (sender >= static_cast<uint32_t>(options_.world) ||
      sender == static_cast<uint32_t>(options_.rank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no replica ", sender, " sends to replica ", options_.rank));
  }
  std::unique_lock lock(inbox_mu_);
  auto gone = [&] { return dropped_[sender] || (epoch != kAnyEpoch && epoch != epoch_[sender]); };
  if (gone()) return absl::CancelledError(absl::StrCat("replica ", sender, " is dropped"));
  if (ended_[sender]) {
    return absl::InvalidArgumentError(absl::StrCat("replica ", sender, " sent after its end"));
  }
  if (absl::Status s = Check(*message, next_index_[sender]); !s.ok()) {
    // A peer that breaks the protocol has lost gradients or repeated them: the replicas can no
    // longer agree, so the mesh fails rather than train on.
    inbox_error_ =
        absl::DataLossError(absl::StrCat("replica ", sender, " (", who, "): ", s.message()));
    spdlog::error("{}", std::string(inbox_error_.message()));
    inbox_cv_.notify_all();
    return s;
  }
  // Back-pressure: a sender ahead of this replica's training waits (gRPC's flow control, or the
  // TCP connection's, then holds its writer) instead of growing this process.
  // (Woken every 100 ms to see a cancelled call: a server shutting down cancels it without
  // notifying.)
  while (!(inbox_.size() < options_.max_queued * static_cast<size_t>(options_.world) || closing_ ||
           gone() || cancelled())) {
    inbox_cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
  if (closing_ || cancelled()) return absl::CancelledError("replica shutting down");
  if (gone()) return absl::CancelledError(absl::StrCat("replica ", sender, " is dropped"));
  if (message->end()) {
    ended_[sender] = true;
  } else {
    next_index_[sender] += message->count();
  }
  inbox_.push_back(std::move(message));
  ++*received;
  inbox_cv_.notify_all();
  return absl::OkStatus();
}

int64_t GradientMesh::received_over_tcp() const {
  std::lock_guard lock(inbox_mu_);
  return received_over_tcp_;
}

int64_t GradientMesh::received_in_halves() const {
  return plane_ ? plane_->received_in_halves() : 0;
}

int64_t GradientMesh::received_over_grpc() const {
  std::lock_guard lock(inbox_mu_);
  return received_over_grpc_;
}

grpc::Status GradientMesh::Gradients(grpc::ServerContext* context,
                                     grpc::ServerReader<v1::StreamGradient>* reader,
                                     v1::StreamGradientAck*) {
  // The stream is filed under its first message's sender and that sender's incarnation, for Drop
  // to cancel and for Deliver to refuse once it is an earlier one.
  int reading_for = -1;
  uint64_t epoch = kAnyEpoch;
  auto leave = [&] {
    if (reading_for < 0) return;
    std::lock_guard lock(inbox_mu_);
    auto& readers = grpc_readers_[static_cast<size_t>(reading_for)];
    readers.erase(std::remove(readers.begin(), readers.end(), context), readers.end());
    inbox_cv_.notify_all();
  };
  auto message = std::make_unique<v1::StreamGradient>();
  grpc::Status status = grpc::Status::OK;
  while (reader->Read(message.get())) {
    if (reading_for < 0 && message->sender() < static_cast<uint32_t>(options_.world)) {
      std::lock_guard lock(inbox_mu_);
      reading_for = static_cast<int>(message->sender());
      epoch = epoch_[message->sender()];
      grpc_readers_[message->sender()].push_back(context);
    }
    absl::Status delivered = Deliver(
        std::move(message), context->peer(), [context] { return context->IsCancelled(); },
        &received_over_grpc_, epoch);
    if (!delivered.ok()) {
      status = ToGrpcStatus(delivered);
      break;
    }
    message = std::make_unique<v1::StreamGradient>();
  }
  leave();
  return status;
}

}  // namespace strata
