// Predictions from a stream replica's live model while it trains (StreamReplica.Predict;
// docs/protocol.md, "Predict"). The training thread never waits for a prediction: after a window or
// a batch of the others' gradients it publishes a copy of its weights (at most every
// kPublishEvery; a copy of the parameters and float buffers, about 1 MB for the MLP) as an
// immutable snapshot with its version. A Predict call takes the latest snapshot, loads it into a
// model of its own (a second instance of the job's model, only for predictions, one call at a
// time) when it is newer than the one loaded, and runs the forward pass there. So the cost to
// training is one copy of the weights per publication, and an answer is never older than the last
// publication.
//
// A request is checked before anything of it is used (CheckPredictInput, ml/predict_input.h):
// anything malformed is INVALID_ARGUMENT with what was wrong, and changes nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "services/common/ml/predict_input.h"
#include "services/common/ml/trainer.h"
#include "strata/v1/collective.pb.h"

namespace strata {

inline constexpr std::chrono::milliseconds kPublishEvery{20};

class StreamPredictor {
 public:
  // `model` is the second instance, made with the training model's options and data set.
  StreamPredictor(int rank, std::unique_ptr<Trainer> model);

  // On the training thread: publishes `trainer`'s weights as version `version` if kPublishEvery
  // has passed since the last publication (or `force`).
  void Publish(Trainer& trainer, int64_t version, bool force = false);

  // On a gRPC thread.
  grpc::Status Predict(const v1::PredictRequest& request, v1::PredictReply* reply);

  // Answers so far, and the latency of each (from the request's arrival to its reply), for the
  // replica's report.
  struct Latencies {
    int64_t answered = 0, refused = 0;
    double p50_ms = 0, p99_ms = 0, max_ms = 0;
  };
  Latencies Figures() const;

 private:
  struct Snapshot {
    std::vector<float> parameters, buffers;
    int64_t version = 0;
  };
  std::shared_ptr<const Snapshot> Latest() const;

  const int rank_;
  std::chrono::steady_clock::time_point last_publish_;

  mutable std::mutex snapshot_mu_;  // guards latest_ only: held for a pointer copy
  std::shared_ptr<const Snapshot> latest_;

  std::mutex model_mu_;  // one prediction at a time on the prediction model
  std::unique_ptr<Trainer> model_;
  int64_t loaded_version_ = -1;

  mutable std::mutex stats_mu_;
  std::vector<double> latencies_ms_;  // the latest 100,000 answers', a ring from next_latency_
  size_t next_latency_ = 0;
  int64_t answered_ = 0, refused_ = 0;
};

}  // namespace strata
