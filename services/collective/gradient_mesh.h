// The gradient exchange of a stream job's replicas (strategy.kind stream, TensAIR's protocol;
// docs/protocol.md, "Stream replicas"): every replica sends every gradient it applied to every
// other replica, with no server and no barrier; a buffer of gradients travels as one message
// holding their sum and each one's clock. Each replica keeps one connection open to each peer and
// writes its gradients on it in the order it applied them; a writer thread per peer does the
// writing, so the training thread only queues. The connection is a plain TCP one (tcp_mesh_link.h,
// the default: no serialisation, the values read straight into the message they are applied
// from) or a gRPC client stream (StreamReplica.Gradients, which carries TLS); both are a
// GradientSender (mesh_link.h). The receiving side checks each message (sender, world, the
// sender's next index, the gradient count, the clock's size, the values' size) and hands it to
// the training thread in arrival order, which per sender is the sender's order.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include "services/collective/mesh_frame.h"
#include "services/collective/mesh_link.h"
#include "services/collective/tcp_mesh_link.h"
#include "strata/v1/collective.grpc.pb.h"

namespace strata {

using mesh_frame::kMaxGradientsPerMessage;

struct GradientMeshOptions {
  int rank = 0;
  int world = 1;
  size_t parameter_floats = 0;  // every gradient's size
  // Reaching every peer's server at Connect; a queue to a peer staying full this long (the peer
  // stopped reading) fails Broadcast naming the peer.
  std::chrono::milliseconds deadline{120000};
  // Gradients waiting per peer, sent or received, before the writer (Broadcast) or the sender (the
  // receiving stream, through gRPC's flow control) waits: the memory bound of the exchange.
  size_t max_queued = 64;
  // Send on the peers' plain-TCP data planes (a peer that offers none is sent to over gRPC), and
  // offer one here on `listen_host` (OfferDataPlane). False: gRPC both ways (TLS on).
  bool tcp = false;
  std::string listen_host = "127.0.0.1";
  // On TCP: at most this many messages to a peer sent and not yet in its inbox (its acks say);
  // 0: no bound (DialTcpMeshPeer).
  uint32_t max_in_flight = 0;
  // Messages waiting per peer to be sent, when it is not max_queued (0: max_queued).
  size_t max_queued_sends = 0;
  // On TCP: gradients' values as 16-bit floats where they all convert to finite halves (the
  // caller keeps exactly what it sends: the values should already be halves as floats).
  bool half_precision = false;
};

class GradientMesh final : public v1::StreamReplica::Service {
 public:
  explicit GradientMesh(const GradientMeshOptions& options);
  ~GradientMesh() override;  // Close()
  GradientMesh(const GradientMesh&) = delete;
  GradientMesh& operator=(const GradientMesh&) = delete;

  // options.tcp: listens for the peers' connections (StreamReplica.DataPlane offers it). Before the
  // gRPC server serves, so that no peer finds this replica without it.
  absl::Status OfferDataPlane();
  int data_port() const { return plane_ ? plane_->port() : 0; }
  // Messages (gradients and ends) received on the TCP data plane, and over gRPC.
  int64_t received_over_tcp() const;
  int64_t received_over_grpc() const;
  // Of those on TCP, the gradients whose values came as 16-bit floats.
  int64_t received_in_halves() const;
  // Opens a connection to every other replica; `peers` holds every replica's address by rank.
  absl::Status Connect(const std::vector<std::string>& peers);
  // Queues `gradient` for every other replica (shared, not copied). Fails, naming the peer, when a
  // stream to a peer stayed full past the deadline, or (UNAVAILABLE, once the others have it) when
  // a stream to a peer broke: the caller decides whether that peer died (Drop).
  absl::Status Broadcast(std::shared_ptr<const v1::StreamGradient> gradient);
  // Whether every peer's queue has room for one more message (or its stream ended), waiting
  // until `until`. Only the caller of Broadcast fills the queues, so the room stays: a training
  // thread that must keep taking the others' gradients while its own wait (else two replicas
  // waiting for each other's acks would wait for ever) asks this first, in turns with Take.
  bool RoomToSend(std::chrono::steady_clock::time_point until);
  // The gradients received since the last call, waiting until `until` for the first one. A
  // sender that broke the protocol fails the mesh: the error is returned from then on.
  absl::StatusOr<std::vector<std::unique_ptr<v1::StreamGradient>>> Take(
      std::chrono::steady_clock::time_point until);
  // Ends every stream to the peers once its queue is written, waiting until `until`; a peer that
  // has not taken everything by then is named in the error.
  absl::Status Close(std::chrono::steady_clock::time_point until);

  // A replica that died and is started again (docs/protocol.md, "When a replica dies"):
  // Drop cuts its connections to this one (what they still carry is not taken), stops the writer
  // to it and leaves it out of Broadcast; the messages it delivered before stay in the inbox.
  void Drop(int rank);
  // Its new incarnation listens at `address` and sends from `next_index` on: taken again, and a
  // writer connects to it.
  absl::Status Rejoin(int rank, const std::string& address, uint64_t next_index);
  // In the new incarnation, before Connect: the index each sender's next message carries.
  void ExpectFrom(const std::vector<int64_t>& next_index);
  // Queues `message` for replica `rank` only (an end the rejoined one missed); fails as Broadcast.
  absl::Status SendTo(int rank, std::shared_ptr<const v1::StreamGradient> message);

  grpc::Status Gradients(grpc::ServerContext* context,
                         grpc::ServerReader<v1::StreamGradient>* reader,
                         v1::StreamGradientAck* ack) override;
  // The plain-TCP data plane's port and ticket; UNIMPLEMENTED without one.
  grpc::Status DataPlane(grpc::ServerContext* context, const v1::DataPlaneRequest* request,
                         v1::DataPlaneOffer* offer) override;

  // StreamReplica.Predict is the replica's (stream_replica.cc), which holds the model: it hands
  // its answerer here before the server starts. Without one, Predict is UNAVAILABLE.
  using Predictor = std::function<grpc::Status(const v1::PredictRequest&, v1::PredictReply*)>;
  void SetPredictor(Predictor predictor) { predictor_ = std::move(predictor); }
  grpc::Status Predict(grpc::ServerContext* context, const v1::PredictRequest* request,
                       v1::PredictReply* reply) override {
    if (!predictor_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no model to answer");
    return predictor_(*request, reply);
  }

 private:
  struct Peer;
  size_t SendQueueBound() const;
  absl::Status Check(const v1::StreamGradient& g, uint64_t expected_index) const;
  // Files a received message in the inbox once it has room, after the checks; `who` names the
  // connection in errors, `cancelled` is asked while waiting for room.
  // `epoch`: the sender's incarnation the connection was opened by (a gRPC stream's; kAnyEpoch for
  // a TCP connection, whose reader Drop joins).
  static constexpr uint64_t kAnyEpoch = ~uint64_t{0};
  absl::Status Deliver(std::unique_ptr<v1::StreamGradient> message, const std::string& who,
                       const std::function<bool()>& cancelled, int64_t* received, uint64_t epoch);
  // Queues `message` for `peer` once it has room (at most the deadline).
  absl::Status Queue(Peer& peer, const std::shared_ptr<const v1::StreamGradient>& message);
  // The connection to `peer`: on its TCP data plane when both ends have one, else gRPC.
  absl::StatusOr<std::unique_ptr<GradientSender>> OpenSender(Peer& peer);
  // Reaches replica `rank` at `address` (by `until`) and starts the writer to it.
  absl::Status StartPeer(int rank, const std::string& address,
                         std::chrono::system_clock::time_point until);
  void Write(Peer* peer);

  const GradientMeshOptions options_;

  mutable std::mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  std::deque<std::unique_ptr<v1::StreamGradient>> inbox_;
  std::vector<uint64_t> next_index_;  // by sender: the index its next message must carry
  std::vector<bool> ended_;           // by sender: its end arrived
  std::vector<bool> dropped_;         // by sender: died, its messages not taken (Drop)
  std::vector<uint64_t> epoch_;       // by sender: its incarnation (Drops so far)
  // By sender: the gRPC streams reading its messages, for Drop to cancel.
  std::vector<std::vector<grpc::ServerContext*>> grpc_readers_;
  absl::Status inbox_error_;
  bool closing_ = false;
  int64_t received_over_tcp_ = 0, received_over_grpc_ = 0;

  std::vector<std::unique_ptr<Peer>> peers_;  // by rank; null for this replica
  Predictor predictor_;
  std::unique_ptr<TcpMeshPlane> plane_;  // options.tcp, once offered
};

}  // namespace strata
