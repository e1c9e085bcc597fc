#include "orchestrator/run/stream_predict_load.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <grpcpp/grpcpp.h>

#include "services/common/stream/stream_broker.h"
#include "services/common/stream/stream_event.h"
#include "services/common/wire/rpc.h"
#include "strata/v1/collective.grpc.pb.h"

namespace strata {
namespace {

using LoadClock = std::chrono::steady_clock;

// How long the load waits before it looks at the stream again when no question is due: short
// against the replicas' 20 ms publication period, long enough not to busy a core.
constexpr std::chrono::milliseconds kIdle{5};
constexpr size_t kLatenciesKept = 100000;
// Questions taken from the stream in one read.
constexpr int64_t kMostAtOnce = 64;

// The entry's own shape field: the load decodes with it (and any label), the replica that
// answers checks the shape against its model's.
EventSchema SchemaOf(const StreamEntry& entry) {
  EventSchema schema;
  schema.classes = INT32_MAX;
  for (const auto& [name, value] : entry.fields) {
    if (name != "shape") continue;
    for (absl::string_view d : absl::StrSplit(value, ',')) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(d, &n)) return schema;
      schema.shape.push_back(n);
    }
  }
  return schema;
}

// `sorted` in ascending order.
double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * (sorted.size() - 1) + 0.5))];
}

}  // namespace

absl::StatusOr<std::unique_ptr<PredictLoad>> PredictLoad::Start(PredictLoadOptions options) {
  if (!(options.share > 0 && options.share <= 1) || options.replicas < 1 ||
      !options.replica_address) {
    return absl::InvalidArgumentError("a predict load needs a share in (0, 1] and replicas");
  }
  std::unique_ptr<PredictLoad> load(new PredictLoad(std::move(options)));
  load->thread_ = std::thread([l = load.get()] { l->Loop(); });
  return load;
}

PredictLoad::~PredictLoad() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool PredictLoad::Stopping() const {
  std::lock_guard lock(mu_);
  return stop_;
}

bool PredictLoad::WaitOrStop(std::chrono::milliseconds pause) {
  std::unique_lock lock(mu_);
  return stop_cv_.wait_for(lock, pause, [this] { return stop_; });
}

void PredictLoad::Loop() {
  StreamBrokerOptions broker_options;
  broker_options.who = "predictions";
  broker_options.reconnect_for = std::chrono::milliseconds(0);
  std::unique_ptr<StreamBroker> broker;
  int64_t base = -1;
  std::string last_id;  // the newest entry asked about
  std::vector<std::shared_ptr<grpc::Channel>> channels(static_cast<size_t>(options_.replicas));
  auto fail = [this](const std::string& why) {
    std::lock_guard lock(mu_);
    last_error_ = why;
  };
  // No pause after a question: at a share of 1 % of 20,000 events/s, 200 questions a second are
  // due.
  std::chrono::milliseconds pause{0};
  while (!WaitOrStop(pause)) {
    pause = kIdle;
    if (broker == nullptr) {
      auto connected = ConnectStreamBroker(options_.broker, broker_options);
      if (!connected.ok()) {
        fail(std::string(connected.status().message()));
        continue;
      }
      broker = *std::move(connected);
    }
    // Not XLEN: a capped stream (strata produce --max-len) stops growing.
    auto length = broker->EntriesAdded(options_.key);
    if (!length.ok()) {
      fail(std::string(length.status().message()));
      broker.reset();
      continue;
    }
    if (base < 0) base = *length;
    const int64_t due = static_cast<int64_t>(std::floor((*length - base) * options_.share));
    int64_t sent;
    {
      std::lock_guard lock(mu_);
      due_ = due;
      sent = sent_;
    }
    if (sent >= due) continue;
    // The newest events not asked about yet, as many as are due (a producer adds its events in
    // batches, so the newest alone would fall behind the share), oldest first.
    auto newest = broker->Newest(options_.key, static_cast<int>(std::min<int64_t>(
                                                   due - sent, kMostAtOnce)));
    if (!newest.ok()) {
      fail(std::string(newest.status().message()));
      broker.reset();
      continue;
    }
    std::vector<StreamEntry> fresh;
    for (StreamEntry& entry : *newest) {
      if (entry.id == last_id) break;  // newest first: the rest were there before
      fresh.push_back(std::move(entry));
    }
    if (fresh.empty()) continue;
    last_id = fresh.front().id;
    for (auto it = fresh.rbegin(); it != fresh.rend() && !Stopping(); ++it) {
      if (Ask(*it, channels)) pause = std::chrono::milliseconds(0);
    }
  }
}

bool PredictLoad::Ask(const StreamEntry& entry,
                      std::vector<std::shared_ptr<grpc::Channel>>& channels) {
  auto event = DecodeStreamEvent(entry, SchemaOf(entry));
  if (!event.ok()) return false;  // a malformed entry: the replicas skip it too
  int64_t sent;
  {
    std::lock_guard lock(mu_);
    sent = sent_;
  }
  const int replica = static_cast<int>(sent % options_.replicas);
  std::shared_ptr<grpc::Channel>& channel = channels[static_cast<size_t>(replica)];
  if (channel == nullptr) {
    auto address = options_.replica_address(replica);
    if (!address.ok()) return false;  // not serving yet: no question asked
    channel = MakeChannel(*address);
  }
  v1::PredictRequest request;
  v1::TensorChunk* input = request.mutable_input();
  input->mutable_header()->set_name("event");
  input->mutable_header()->set_dtype(v1::DTYPE_FLOAT32);
  input->mutable_header()->add_shape(1);
  for (int64_t d : event->shape) input->mutable_header()->add_shape(d);
  input->set_data(reinterpret_cast<const char*>(event->features.data()),
                  event->features.size() * sizeof(float));
  v1::PredictReply reply;
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(options_.call_deadline));
  const auto asked = LoadClock::now();
  const grpc::Status status =
      v1::StreamReplica::NewStub(channel)->Predict(&context, request, &reply);
  const double ms = std::chrono::duration<double, std::milli>(LoadClock::now() - asked).count();
  std::lock_guard lock(mu_);
  ++sent_;
  if (!status.ok()) {
    ++failed_;
    last_error_ = absl::StrCat("replica ", replica, ": ", status.error_message());
    return true;
  }
  ++answered_;
  const std::string& data = reply.scores().data();
  const size_t classes = data.size() / sizeof(float);
  if (classes > 0) {
    const float* scores = reinterpret_cast<const float*>(data.data());
    correct_ += std::max_element(scores, scores + classes) - scores == event->label;
  }
  if (latencies_ms_.size() < kLatenciesKept) {
    latencies_ms_.push_back(ms);
  } else {
    latencies_ms_[next_latency_++ % kLatenciesKept] = ms;
  }
  max_ms_ = std::max(max_ms_, ms);
  recent_ms_.push_back(ms);
  return true;
}

int64_t PredictLoad::Answered() const {
  std::lock_guard lock(mu_);
  return answered_;
}

nlohmann::json PredictLoad::Figures() const {
  std::vector<double> latencies;
  {
    std::lock_guard lock(mu_);
    latencies = latencies_ms_;
  }
  std::sort(latencies.begin(), latencies.end());
  std::lock_guard lock(mu_);
  return {{"share", options_.share},
          {"due", due_},
          {"sent", sent_},
          {"answered", answered_},
          {"failed", failed_},
          {"correct", correct_},
          {"accuracy", answered_ > 0 ? static_cast<double>(correct_) / answered_ : 0.0},
          {"p50_ms", Percentile(latencies, 0.50)},
          {"p99_ms", Percentile(latencies, 0.99)},
          {"max_ms", max_ms_},
          {"last_error", last_error_}};
}

double PredictLoad::TakeRecentP99Ms() {
  std::vector<double> recent;
  {
    std::lock_guard lock(mu_);
    recent.swap(recent_ms_);
  }
  std::sort(recent.begin(), recent.end());
  return Percentile(recent, 0.99);
}

}  // namespace strata
