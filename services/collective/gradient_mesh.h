// The gradient exchange of a stream job's replicas (strategy.kind stream, TensAIR's protocol;
// docs/protocol.md, "Stream replicas"): every replica sends every gradient it applied to every
// other replica, with no server and no barrier; a buffer of gradients travels as one message
// holding their sum and each one's clock. Each replica keeps one gRPC client stream open to
// each peer (StreamReplica.Gradients) and writes its gradients on it in the order it applied them;
// a writer thread per peer does the writing, so the training thread only queues. The receiving
// side checks each message (sender, world, the sender's next index, the gradient count, the
// clock's size, the values' size) and hands it to the training thread in arrival order, which per sender is the
// sender's order.
//
// Over gRPC, so it carries the run token and TLS like every other call; the ring's plain-TCP data
// plane does not serve it yet.
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

#include "strata/v1/collective.grpc.pb.h"

namespace strata {

// At most this many gradients summed in one message (stream.max_grad_buffer's upper bound).
inline constexpr uint32_t kMaxGradientsPerMessage = 1024;

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
};

class GradientMesh final : public v1::StreamReplica::Service {
 public:
  explicit GradientMesh(const GradientMeshOptions& options);
  ~GradientMesh() override;  // Close()
  GradientMesh(const GradientMesh&) = delete;
  GradientMesh& operator=(const GradientMesh&) = delete;

  // Opens a stream to every other replica; `peers` holds every replica's address by rank.
  absl::Status Connect(const std::vector<std::string>& peers);
  // Queues `gradient` for every other replica (shared, not copied). Fails, naming the peer, when a
  // stream to a peer broke or stayed full past the deadline.
  absl::Status Broadcast(std::shared_ptr<const v1::StreamGradient> gradient);
  // The gradients received since the last call, waiting until `until` for the first one. A
  // sender that broke the protocol fails the mesh: the error is returned from then on.
  absl::StatusOr<std::vector<std::unique_ptr<v1::StreamGradient>>> Take(
      std::chrono::steady_clock::time_point until);
  // Ends every stream to the peers once its queue is written, waiting until `until`; a peer that
  // has not taken everything by then is named in the error.
  absl::Status Close(std::chrono::steady_clock::time_point until);

  grpc::Status Gradients(grpc::ServerContext* context,
                         grpc::ServerReader<v1::StreamGradient>* reader,
                         v1::StreamGradientAck* ack) override;

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
  absl::Status Check(const v1::StreamGradient& g, uint64_t expected_index) const;
  void Write(Peer* peer);

  const GradientMeshOptions options_;

  std::mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  std::deque<std::unique_ptr<v1::StreamGradient>> inbox_;
  std::vector<uint64_t> next_index_;  // by sender: the index its next message must carry
  std::vector<bool> ended_;           // by sender: its end arrived
  absl::Status inbox_error_;
  bool closing_ = false;

  std::vector<std::unique_ptr<Peer>> peers_;  // by rank; null for this replica
  Predictor predictor_;
};

}  // namespace strata
