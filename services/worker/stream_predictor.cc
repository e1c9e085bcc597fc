#include "services/worker/stream_predictor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <absl/strings/str_cat.h>

#include "services/common/ml/predict_input.h"

namespace strata {
namespace {

constexpr size_t kLatenciesKept = 100000;

grpc::Status Refuse(const std::string& why) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
}

}  // namespace

StreamPredictor::StreamPredictor(int rank, std::unique_ptr<Trainer> model)
    : rank_(rank), model_(std::move(model)) {}

void StreamPredictor::Publish(Trainer& trainer, int64_t version, bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && latest_ != nullptr && now - last_publish_ < kPublishEvery) return;
  last_publish_ = now;
  auto snapshot = std::make_shared<Snapshot>();
  const size_t n = static_cast<size_t>(trainer.parameters().total_floats());
  snapshot->parameters.assign(trainer.parameter_data(), trainer.parameter_data() + n);
  snapshot->buffers.resize(static_cast<size_t>(trainer.buffers().total_floats()));
  if (!snapshot->buffers.empty()) trainer.CopyBuffersTo(snapshot->buffers.data());
  snapshot->version = version;
  std::lock_guard lock(snapshot_mu_);
  latest_ = std::move(snapshot);
}

std::shared_ptr<const StreamPredictor::Snapshot> StreamPredictor::Latest() const {
  std::lock_guard lock(snapshot_mu_);
  return latest_;
}

grpc::Status StreamPredictor::Predict(const v1::PredictRequest& request, v1::PredictReply* reply) {
  const auto arrived = std::chrono::steady_clock::now();
  auto refuse = [&](const std::string& why) {
    std::lock_guard lock(stats_mu_);
    ++refused_;
    return Refuse(why);
  };
  auto input = CheckPredictInput(request.input(), model_->dataset());
  if (!input.ok()) return refuse(std::string(input.status().message()));
  const int64_t n = input->examples;
  const std::vector<float>& features = input->features;
  const std::shared_ptr<const Snapshot> snapshot = Latest();
  if (snapshot == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the replica has no model yet");
  }
  std::vector<int64_t> out_shape;
  absl::StatusOr<std::vector<float>> scores;
  {
    std::lock_guard lock(model_mu_);
    if (snapshot->version != loaded_version_) {
      std::memcpy(model_->parameter_data(), snapshot->parameters.data(),
                  snapshot->parameters.size() * sizeof(float));
      if (!snapshot->buffers.empty()) model_->SetBuffersFrom(snapshot->buffers.data());
      loaded_version_ = snapshot->version;
    }
    scores = model_->Predict(features, n, &out_shape);
  }
  if (!scores.ok()) {
    return grpc::Status(grpc::StatusCode::INTERNAL, std::string(scores.status().message()));
  }
  SetPredictScores(*scores, out_shape, reply->mutable_scores());
  reply->set_replica(static_cast<uint32_t>(rank_));
  reply->set_model_version(static_cast<uint64_t>(snapshot->version));
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - arrived).count();
  std::lock_guard lock(stats_mu_);
  ++answered_;
  if (latencies_ms_.size() < kLatenciesKept) {
    latencies_ms_.push_back(ms);
  } else {
    latencies_ms_[next_latency_++ % kLatenciesKept] = ms;
  }
  return grpc::Status::OK;
}

StreamPredictor::Latencies StreamPredictor::Figures() const {
  std::vector<double> sorted;
  Latencies out;
  {
    std::lock_guard lock(stats_mu_);
    sorted = latencies_ms_;
    out.answered = answered_;
    out.refused = refused_;
  }
  if (sorted.empty()) return out;
  std::sort(sorted.begin(), sorted.end());
  auto at = [&](double q) {
    return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * (sorted.size() - 1) + 0.5))];
  };
  out.p50_ms = at(0.50);
  out.p99_ms = at(0.99);
  out.max_ms = sorted.back();
  return out;
}

}  // namespace strata
