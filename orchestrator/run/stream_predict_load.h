// The predict stream of a stream job (`stream.predict_rate`): a thread of the orchestrator that
// sends a share of the stream's events to the replicas' Predict as they enter the stream, and
// records each answer's latency and whether its class is the event's label. This is the load a
// model serving predictions while it learns sees, measured where a client sees it.
//
// How events are picked: whenever the events added to the stream since the load started, times
// the share, call for more predictions, the load takes that many of the stream's newest entries
// it has not asked about (XREVRANGE, at most 64 at a time), so each question is about a fresh
// event, which the replicas have usually not trained on yet (a replica with no backlog may
// have). A load that falls behind skips events rather than queueing them: `due` against `sent`
// in its figures says by how much. Questions go
// to the replicas in turn, one at a time, one event each; the latency is from the call to the
// reply (gRPC on loopback included).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include "services/common/config/broker_address.h"
#include "services/common/stream/stream_event.h"

namespace grpc {
class Channel;
}

namespace strata {

struct PredictLoadOptions {
  BrokerAddress broker;
  std::string key;  // the stream's
  double share = 0;  // of the events added, in (0, 1]
  int replicas = 1;
  // Where replica r answers ("127.0.0.1:PORT"); an error while it does not serve yet, which the
  // load waits out without counting a question.
  std::function<absl::StatusOr<std::string>(int replica)> replica_address;
  std::chrono::milliseconds call_deadline{10000};  // one Predict call
};

class PredictLoad {
 public:
  static absl::StatusOr<std::unique_ptr<PredictLoad>> Start(PredictLoadOptions options);
  ~PredictLoad();  // stops the thread and waits for it
  PredictLoad(const PredictLoad&) = delete;
  PredictLoad& operator=(const PredictLoad&) = delete;

  // {"share", "due", "sent", "answered", "failed", "correct", "accuracy", "p50_ms", "p99_ms",
  // "max_ms", "last_error"}: counts and max over every question so far, the percentiles over the
  // latest 100,000 answers.
  nlohmann::json Figures() const;
  int64_t Answered() const;
  // The p99 latency of the answers since the last call (0 when there were none), for the run's
  // once-a-second metrics line.
  double TakeRecentP99Ms();

 private:
  explicit PredictLoad(PredictLoadOptions options) : options_(std::move(options)) {}
  void Loop();
  // One question about `entry` to the next replica in turn; false when none was asked (a
  // malformed entry, a replica not serving yet).
  bool Ask(const StreamEntry& entry, std::vector<std::shared_ptr<grpc::Channel>>& channels);
  bool WaitOrStop(std::chrono::milliseconds pause);  // true once stopping
  bool Stopping() const;

  const PredictLoadOptions options_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  int64_t due_ = 0, sent_ = 0, answered_ = 0, failed_ = 0, correct_ = 0;
  std::vector<double> latencies_ms_, recent_ms_;  // the first a ring from next_latency_
  size_t next_latency_ = 0;
  double max_ms_ = 0;
  std::string last_error_;
};

}  // namespace strata
