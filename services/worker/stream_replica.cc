#include "services/worker/stream_replica.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "services/collective/gradient_mesh.h"
#include "services/collective/ring_allreduce.h"
#include "services/common/base/files.h"
#include "services/common/base/run_directory.h"
#include "services/common/base/status.h"
#include "services/common/config/resolved_job.h"
#include "services/common/metrics/metrics_endpoint.h"
#include "services/common/ml/adwin.h"
#include "services/common/ml/dataset.h"
#include "services/common/ml/sgd.h"
#include "services/common/ml/trainer.h"
#include "services/common/stream/replica_keys.h"
#include "services/common/stream/stream_broker.h"
#include "services/common/stream/stream_event.h"
#include "services/common/wire/checkpoint.h"
#include "services/common/wire/half_float.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/tcp_socket.h"
#include "services/worker/partition_clients.h"
#include "services/worker/stream_predictor.h"
#include "services/worker/worker.h"

namespace strata {
namespace {

using ReplicaClock = std::chrono::steady_clock;

// A read waits this long for new entries before the replica looks at its inbox and its limits
// again: short enough that remote gradients are applied promptly when the stream is quiet.
constexpr std::chrono::milliseconds kReadBlock{50};
// Malformed entries logged one by one before the log only counts them.
constexpr int64_t kMalformedLogged = 20;
// Production-to-training latencies kept for the result's percentiles: the latest 100,000 (0.8 MB).
constexpr size_t kLatenciesKept = 100000;

using stream_keys::Replicas;

struct ReplicaCounts {
  int64_t windows = 0;  // own gradients, applied and sent
  int64_t events_trained = 0;
  int64_t malformed = 0;
  int64_t acknowledged = 0;
  // Events taken from another consumer's pending list (XAUTOCLAIM, stream.claim_idle_ms), and
  // from this replica's own after a restart (handed to it before it died).
  int64_t claimed = 0, taken_up = 0;
  // How often this replica was started again, and its windows before the latest start (its
  // counts go on from what the broker kept). On the mesh: the windows whose gradients died with
  // an earlier incarnation before any other replica took them (trained, acknowledged, not in the
  // model), and the recoveries of other replicas this one took part in.
  int64_t restarts = 0, windows_before_restart = 0, lost_windows = 0, recoveries = 0;
  int64_t diverged_windows = 0;  // a window whose loss or gradient was not finite: not applied
  std::vector<int64_t> applied;  // by origin: the gradients of each replica applied here
  std::map<int64_t, int64_t> staleness;  // remote gradients by staleness
  // Test-then-train: each window is scored by the model before its own gradient is applied; over
  // the whole stream, and over the latest stream.accuracy_window events.
  int64_t correct = 0, scored = 0;
  int64_t recent_correct = 0, recent_scored = 0;
  // Windows and events scored only, after stream.freeze_at_event.
  int64_t frozen_windows = 0, events_frozen = 0;
  // The recent accuracy every stream.accuracy_window scored events: [the producer's seq of the
  // latest event, events scored, accuracy], what a drift study reads.
  nlohmann::json accuracy_curve = nlohmann::json::array();
  // What the drift detector (ADWIN on the windows' error) found: when, in this replica's events,
  // and the error before and since.
  nlohmann::json drifts = nlohmann::json::array();
  // stream.lr_decay_events: the events trained since the decay last started, how often a drift
  // restarted it (stream.on_drift reset_lr), and the rate of the latest window.
  int64_t events_since_lr_reset = 0;
  int64_t lr_resets = 0;
  double lr = 0;
  double last_loss = 0;
  // Where a replica's time goes (wall seconds on its training thread).
  double read_s = 0, compute_s = 0, send_s = 0, remote_apply_s = 0;

  // The counts a restarted replica carries on from, kept on the broker after
  // each acknowledgement, by name (the figures of a run, not the curves and drifts of one
  // incarnation), with the staleness histogram beside them.
  std::vector<std::pair<const char*, int64_t*>> Kept(int rank) {
    return {{"windows", &windows},
            {"events_trained", &events_trained},
            {"malformed", &malformed},
            {"acknowledged", &acknowledged},
            {"claimed", &claimed},
            {"taken_up", &taken_up},
            {"restarts", &restarts},
            {"lost_windows", &lost_windows},
            {"recoveries", &recoveries},
            {"diverged_windows", &diverged_windows},
            {"own_applied", &applied[static_cast<size_t>(rank)]},
            {"prequential_correct", &correct},
            {"prequential_scored", &scored},
            {"events_since_lr_reset", &events_since_lr_reset},
            {"lr_resets", &lr_resets}};
  }

  nlohmann::json Durable(int rank) {
    nlohmann::json kept = {{"staleness", StalenessJson()}};
    for (const auto& [name, value] : Kept(rank)) kept[name] = *value;
    return kept;
  }

  // The counts a replica of the same rank kept before it died; false if `j` is not such a record.
  bool CarryOn(const nlohmann::json& j, int rank) {
    if (!j.is_object()) return false;
    for (const auto& [name, value] : Kept(rank)) {
      auto it = j.find(name);
      if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() < 0) return false;
      *value = it->get<int64_t>();
    }
    if (auto it = j.find("staleness"); it != j.end() && it->is_object()) {
      for (const auto& [text, n] : it->items()) {
        int64_t s = 0;
        if (absl::SimpleAtoi(text, &s) && n.is_number_integer()) staleness[s] = n.get<int64_t>();
      }
    }
    return true;
  }

  // The staleness histogram with its values as keys.
  nlohmann::json StalenessJson() const {
    nlohmann::json stale = nlohmann::json::object();
    for (const auto& [s, n] : staleness) stale[std::to_string(s)] = n;
    return stale;
  }

  nlohmann::json ToJson() const {
    int64_t applied_total = 0;
    for (int64_t a : applied) applied_total += a;
    return {{"windows", windows},
            {"events_trained", events_trained},
            {"malformed", malformed},
            {"acknowledged", acknowledged},
            {"claimed", claimed},
            {"taken_up", taken_up},
            {"restarts", restarts},
            {"windows_before_restart", windows_before_restart},
            {"lost_windows", lost_windows},
            {"recoveries", recoveries},
            {"diverged_windows", diverged_windows},
            {"applied", applied},
            {"applied_total", applied_total},
            {"staleness", StalenessJson()},
            {"prequential_correct", correct},
            {"prequential_scored", scored},
            {"recent_correct", recent_correct},
            {"recent_scored", recent_scored},
            {"frozen_windows", frozen_windows},
            {"events_frozen", events_frozen},
            {"drifts", drifts},
            {"lr", lr},
            {"lr_resets", lr_resets},
            {"last_loss", last_loss},
            {"read_s", read_s},
            {"compute_s", compute_s},
            {"send_s", send_s},
            {"remote_apply_s", remote_apply_s}};
  }
};

// What a replica shows Prometheus (docs/user-guide.md, "Watching a job"), labelled by rank.
struct StreamReplicaMetrics {
  StreamReplicaMetrics(prometheus::Registry& registry, int rank)
      : labels{{"rank", std::to_string(rank)}},
        events(prometheus::BuildCounter()
                   .Name("strata_stream_events_trained_total")
                   .Help("Stream events this replica trained on")
                   .Register(registry)
                   .Add(labels)),
        malformed(prometheus::BuildCounter()
                      .Name("strata_stream_malformed_events_total")
                      .Help("Malformed stream entries this replica skipped and acknowledged")
                      .Register(registry)
                      .Add(labels)),
        applied(prometheus::BuildCounter()
                    .Name("strata_stream_gradients_applied_total")
                    .Help("Gradients this replica applied, its own and the others'")
                    .Register(registry)
                    .Add(labels)),
        drifts(prometheus::BuildCounter()
                   .Name("strata_stream_drifts_total")
                   .Help("Rises of the test-then-train error this replica's detector found")
                   .Register(registry)
                   .Add(labels)),
        recent_accuracy(prometheus::BuildGauge()
                            .Name("strata_stream_recent_accuracy")
                            .Help("Test-then-train accuracy over the latest "
                                  "stream.accuracy_window events")
                            .Register(registry)
                            .Add(labels)),
        staleness(prometheus::BuildHistogram()
                      .Name("strata_stream_remote_gradient_staleness")
                      .Help("Staleness of the other replicas' gradients as this one applied them")
                      .Register(registry)
                      .Add(labels, prometheus::Histogram::BucketBoundaries{0, 1, 2, 4, 8, 16, 32,
                                                                           64, 128, 256})) {}
  prometheus::Labels labels;
  prometheus::Counter& events;
  prometheus::Counter& malformed;
  prometheus::Counter& applied;
  prometheus::Counter& drifts;
  prometheus::Gauge& recent_accuracy;
  prometheus::Histogram& staleness;
};

class StreamReplica {
 public:
  StreamReplica(const WorkerOptions& options, std::unique_ptr<Trainer> trainer,
                std::unique_ptr<StreamBroker> broker, EventSchema schema,
                StreamReplicaMetrics* metrics, StreamPredictor* predictor)
      : options_(options),
        metrics_(metrics),
        predictor_(predictor),
        stream_(options.job.stream()),
        trainer_(std::move(trainer)),
        broker_(std::move(broker)),
        schema_(std::move(schema)),
        paths_(options.run_dir),
        consumer_(absl::StrCat("replica-", options.rank)),
        sgd_(trainer_->SgdFor(0)) {
    counts_.applied.assign(static_cast<size_t>(options.world()), 0);
    ended_.assign(static_cast<size_t>(options.world()), -1);
    ended_[static_cast<size_t>(options.rank)] = 0;
  }

  absl::Status Run() {
    GradientMeshOptions mesh_options;
    mesh_options.rank = options_.rank;
    mesh_options.world = options_.world();
    mesh_options.parameter_floats = static_cast<size_t>(trainer_->parameters().total_floats());
    mesh_options.deadline = options_.deadline;
    mesh_options.max_queued = static_cast<size_t>(std::max(4 * stream_.max_grad_buffer(), 16));
    // The mesh's own data plane (stream.link tcp), unless the connections must be encrypted.
    const bool mesh = !ThroughServers() && !Synchronous();
    mesh_options.tcp = mesh && stream_.link() == v1::DATA_LINK_TCP && !ChannelsUseTls();
    mesh_options.listen_host = tcp::DataPlaneHost(options_.listen);
    if (stream_.max_in_flight() > 0) {
      // What waits to be sent counts as much as what travels: the send queue gets the same bound
      // (the inbox keeps its own, so that the peers' acks never wait for this one's sends).
      if (mesh_options.tcp) {
        mesh_options.max_in_flight = static_cast<uint32_t>(stream_.max_in_flight());
        mesh_options.max_queued_sends = static_cast<size_t>(stream_.max_in_flight());
      } else if (mesh) {
        spdlog::warn(
            "stream.max_in_flight {} bounds the plain-TCP link only; on gRPC the messages in "
            "flight are not bounded",
            stream_.max_in_flight());
      }
    }
    if (mesh && stream_.link() == v1::DATA_LINK_TCP && ChannelsUseTls()) {
      spdlog::warn(
          "stream.link tcp: TLS is on and the plain TCP connections are not encrypted; the "
          "gradients go on gRPC");
    }
    const bool fp16 = options_.job.strategy().push_compression() == v1::PUSH_COMPRESSION_FP16;
    // strategy.push_compression fp16 on the mesh: the sums travel as halves on TCP; Flush rounds
    // them, and this replica's own model, to what the peers receive.
    half_sums_ = fp16 && mesh_options.tcp;
    mesh_options.half_precision = half_sums_;
    mesh_ = std::make_unique<GradientMesh>(mesh_options);
    STRATA_RETURN_IF_ERROR(mesh_->OfferDataPlane());
    if (mesh_options.tcp) {
      spdlog::info("gradients travel on plain TCP (data plane on port {})", mesh_->data_port());
    }
    if (ThroughServers()) {
      STRATA_RETURN_IF_ERROR(ConnectServers());
    } else if (half_sums_) {
      spdlog::info("the gradients' sums travel to the peers as 16-bit floats");
    } else if (fp16) {
      spdlog::warn(
          "strategy.push_compression fp16 applies to stream.sync servers and to the mesh on "
          "plain TCP; the {} sends 32-bit gradients",
          Synchronous() ? "all-reduce" : "mesh on gRPC");
    }
    // Predict answers from the first weights until training publishes newer ones.
    predictor_->Publish(*trainer_, 0, /*force=*/true);
    mesh_->SetPredictor([this](const v1::PredictRequest& request, v1::PredictReply* reply) {
      return predictor_->Predict(request, reply);
    });
    std::vector<grpc::Service*> services = {mesh_.get()};
    if (Synchronous()) {
      // Over gRPC like the mesh, on the same server and address: the run's token and TLS hold.
      ring_ = std::make_unique<RingAllReduce>(options_.rank);
      services.push_back(ring_->service());
    }
    int port = 0;
    std::unique_ptr<grpc::Server> server = StartServer(options_.listen, services, &port);
    if (!server || port == 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.listen));
    }
    absl::Status status = Train(port);
    // Peers may still be reading what this replica sent: Close waited for them. Then nothing
    // more arrives that matters.
    server->Shutdown(DeadlineAfter(std::chrono::seconds(2)));
    mesh_.reset();
    ring_.reset();
    return status;
  }

 private:
  // stream.sync allreduce: the synchronous baseline instead of TensAIR's mesh.
  bool Synchronous() const { return stream_.sync() == v1::STREAM_SYNC_ALLREDUCE; }
  // stream.sync servers: through parameter servers instead of TensAIR's mesh.
  bool ThroughServers() const { return stream_.sync() == v1::STREAM_SYNC_SERVERS; }

  // stream.sync servers: push/pull clients to the servers the launcher named, and their model
  // (the job's initial one, as every replica's; pulled all the same, so a replica started late
  // begins where the others are).
  absl::Status ConnectServers() {
    if (options_.parameter_servers.empty()) {
      return absl::InvalidArgumentError(
          "stream.sync servers: no parameter servers were given (--parameter-servers)");
    }
    STRATA_ASSIGN_OR_RETURN(
        clients_, PartitionClients::Create(PushPullClientsFor(options_, options_.parameter_servers),
                                           *trainer_));
    server_buffers_.resize(static_cast<size_t>(trainer_->buffers().total_floats()));
    STRATA_RETURN_IF_ERROR(PullFromServers());
    spdlog::info("replica {} trains through {} parameter server(s)", options_.rank,
                 clients_->servers().size());
    return absl::OkStatus();
  }

  // stream.sync servers: the window's gradient (at this replica's rate) to every server and, in
  // the same round trip, the model after it. Its staleness is the number of other replicas'
  // gradients server 0 applied between the model it was computed on and it (under ASP another
  // server may have taken the pushes in another order).
  absl::Status ExchangeWithServers(const float* gradient, int64_t events, float scale) {
    const auto start = ReplicaClock::now();
    trainer_->CopyBuffersTo(server_buffers_.data());
    PushFields fields;
    fields.clock = counts_.windows;
    fields.samples = events;
    fields.lr = sgd_.lr * scale;
    const ExchangeBuffers x{gradient, server_buffers_.data(), trainer_->parameter_data(),
                            server_buffers_.data()};
    STRATA_RETURN_IF_ERROR(
        clients_->ForEachServer([&](ServerLink& s) { return clients_->Exchange(s, fields, x); }));
    trainer_->SetBuffersFrom(server_buffers_.data());
    const ServerLink& first = clients_->servers().front();
    const int64_t stale = std::max<int64_t>(0, first.version - first.installed_version - 1);
    ++counts_.staleness[stale];
    metrics_->staleness.Observe(static_cast<double>(stale));
    metrics_->applied.Increment(static_cast<double>(first.version - first.installed_version));
    clients_->MarkInstalled();
    server_version_ = first.version;
    if (!links_logged_) {
      // After the first exchange, once each link has settled its path (shared memory is asked
      // for then): how the tensors travel, 16-bit or not.
      links_logged_ = true;
      spdlog::info("exchanges with the servers: {}", absl::StrJoin(clients_->LinkPaths(), "; "));
    }
    ++counts_.applied[static_cast<size_t>(options_.rank)];
    counts_.send_s += SecondsSince(start);
    return absl::OkStatus();
  }

  // stream.sync servers, after this replica's last push: waits until every replica has pushed
  // its last (each says so on the broker, beside the addresses), then pulls the servers' final
  // model, so that every replica ends with the same one.
  absl::Status FinishWithServers() {
    const std::string key = absl::StrCat(Replicas(stream_, options_.stream_run), ":ended");
    STRATA_RETURN_IF_ERROR(
        AwaitEveryRank(key, std::to_string(counts_.windows), "finish their pushes", [&] {
          WriteProgress("flushing");
          return absl::OkStatus();
        }).status());
    return PullFromServers();
  }

  // The servers' model into the trainer, weights and buffers, as the model it computes on.
  absl::Status PullFromServers() {
    STRATA_RETURN_IF_ERROR(clients_->ForEachServer([&](ServerLink& s) {
      return clients_->PullInto(s, counts_.windows, trainer_->parameter_data(),
                                server_buffers_.data());
    }));
    trainer_->SetBuffersFrom(server_buffers_.data());
    clients_->MarkInstalled();
    server_version_ = clients_->servers().front().version;
    return absl::OkStatus();
  }

  // Leaves `value` under this replica's rank in the broker hash `key` and waits until every
  // replica but `absent` has left one there (at most the deadline; `waiting` runs between polls);
  // returns each rank's value. `what` says, in the error, what the missing replicas did not do.
  absl::StatusOr<std::vector<std::string>> AwaitEveryRank(
      const std::string& key, const std::string& value, const char* what,
      const std::function<absl::Status()>& waiting, int absent = -1) {
    STRATA_RETURN_IF_ERROR(broker_->PutField(key, std::to_string(options_.rank), value));
    const auto until = ReplicaClock::now() + options_.deadline;
    std::vector<std::string> values(static_cast<size_t>(options_.world()));
    while (true) {
      STRATA_ASSIGN_OR_RETURN(auto fields, broker_->Fields(key));
      int found = 0;
      for (const auto& [rank_text, left] : fields) {
        int rank = -1;
        if (absl::SimpleAtoi(rank_text, &rank) && rank >= 0 && rank < options_.world() &&
            rank != absent) {
          values[static_cast<size_t>(rank)] = left;
          ++found;
        }
      }
      if (found == options_.world() - (absent >= 0 ? 1 : 0)) return values;
      if (ReplicaClock::now() > until) {
        std::string missing;
        for (int r = 0; r < options_.world(); ++r) {
          if (r != absent && values[static_cast<size_t>(r)].empty()) {
            absl::StrAppend(&missing, " ", r);
          }
        }
        return absl::DeadlineExceededError(absl::StrCat("replicas", missing, " did not ", what,
                                                        " within ",
                                                        options_.deadline.count() / 1000, " s"));
      }
      if (waiting) STRATA_RETURN_IF_ERROR(waiting());
      // Polling the broker: the other replicas start, and end, within seconds of each other.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // Waits until the broker hash `key` holds `field` (at most the deadline; `waiting` runs between
  // polls) and returns the whole hash; `what` says, in the error, what did not come.
  absl::StatusOr<std::map<std::string, std::string>> AwaitField(
      const std::string& key, const std::string& field, const std::string& what,
      const std::function<void()>& waiting) {
    const auto until = ReplicaClock::now() + options_.deadline;
    while (true) {
      STRATA_ASSIGN_OR_RETURN(auto fields, broker_->Fields(key));
      if (fields.count(field) > 0) return fields;
      if (ReplicaClock::now() > until) {
        return absl::DeadlineExceededError(
            absl::StrCat(what, " within ", options_.deadline.count() / 1000, " s"));
      }
      if (waiting) waiting();
      // Polling the broker, as AwaitEveryRank: what is awaited comes within a second or two.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // Whether what was read at `t` has waited half of stream.claim_idle_ms: then it is trained (a
  // window) or sent (a buffer) as it is, so that a live replica's events are never idle long
  // enough for another to claim them.
  bool WaitedHalfTheClaimIdleTime(ReplicaClock::time_point t) const {
    return ReplicaClock::now() - t >= std::chrono::milliseconds(stream_.claim_idle_ms()) / 2;
  }

  absl::Status Train(int port) {
    STRATA_RETURN_IF_ERROR(broker_->CreateGroup(stream_.key(), stream_.group(), "0"));
    if (ThroughServers() || MeshRecovers()) STRATA_RETURN_IF_ERROR(CarryOnCounts());
    if (MeshRecovers()) STRATA_RETURN_IF_ERROR(FindRecoveries());
    if (!options_.port_file.empty()) {
      STRATA_RETURN_IF_ERROR(WriteFileAtomic(options_.port_file, std::to_string(port) + "\n"));
    }
    STRATA_RETURN_IF_ERROR(FindPeers(port));
    // A restarted replica's stream.max_seconds count from its first start (up to its last save).
    started_ = ReplicaClock::now() - std::chrono::duration_cast<ReplicaClock::duration>(
                                         std::chrono::duration<double>(seconds_before_restart_));
    spdlog::info(
        "replica {}/{} reads stream {} as {} of group {}: windows of {} events, {} "
        "gradient(s) per send, lr {}",
        options_.rank, options_.world(), stream_.key(), consumer_, stream_.group(),
        stream_.batch_events(), stream_.max_grad_buffer(), sgd_.lr);
    std::vector<std::string> window_ids;
    std::vector<float> features;
    std::vector<int32_t> labels;
    std::vector<int64_t> produced_ns;  // each event's `t`
    ReplicaClock::time_point window_started;  // when the window's first event was read
    bool reading = true;
    while (true) {
      if (!ThroughServers()) STRATA_RETURN_IF_ERROR(ApplyRemote(ReplicaClock::now()));
      STRATA_RETURN_IF_ERROR(JoinRecoveries());
      if (reading) {
        STRATA_ASSIGN_OR_RETURN(reading, KeepReading());
      }
      // Its own pending events are taken up even once the group has been handed the whole
      // stream: they are part of it.
      const bool taking_up = !own_pending_after_.empty();
      const int missing = stream_.batch_events() - static_cast<int>(labels.size());
      if ((reading || taking_up) && missing > 0) {
        const auto read_start = ReplicaClock::now();
        STRATA_ASSIGN_OR_RETURN(std::vector<StreamEntry> entries, ReadEntries(missing));
        std::vector<std::string> refused;
        for (const StreamEntry& entry : entries) {
          auto event = DecodeStreamEvent(entry, schema_);
          if (!event.ok()) {
            metrics_->malformed.Increment();
            if (counts_.malformed++ < kMalformedLogged) {
              spdlog::warn("skipped: {}", std::string(event.status().message()));
            }
            refused.push_back(entry.id);
            continue;
          }
          // A claim may hand back an entry this window holds already (its own, idle in a window
          // the stream was slow to fill): it is in the window once.
          if (std::find(window_ids.begin(), window_ids.end(), entry.id) != window_ids.end()) {
            continue;
          }
          if (labels.empty()) window_started = ReplicaClock::now();
          features.insert(features.end(), event->features.begin(), event->features.end());
          labels.push_back(event->label);
          produced_ns.push_back(event->produced_ns);
          window_last_seq_ = std::max(window_last_seq_, event->seq);
          window_ids.push_back(entry.id);
        }
        // A malformed entry never reaches the model; acknowledged now, it is not handed out again.
        STRATA_RETURN_IF_ERROR(Acknowledge(refused));
        counts_.read_s += SecondsSince(read_start);
      }
      const bool full = static_cast<int>(labels.size()) >= stream_.batch_events();
      const bool last = !reading && own_pending_after_.empty();
      // A window the stream is slow to fill is trained as it is once its first event has waited.
      const bool waited = !labels.empty() && WaitedHalfTheClaimIdleTime(window_started);
      if (full || waited || (last && !labels.empty())) {
        STRATA_RETURN_IF_ERROR(Frozen()
                                   ? ScoreWindow(features, labels, window_ids)
                                   : TrainWindow(features, labels, window_ids, window_started));
        RecordLatency(produced_ns);
        features.clear();
        labels.clear();
        produced_ns.clear();
        window_ids.clear();
      }
      // On the mesh a buffer's events are acknowledged when it is sent: it goes once its oldest
      // event has waited, as a slow window does.
      if (buffered_ > 0 && WaitedHalfTheClaimIdleTime(buffer_read_at_)) {
        STRATA_RETURN_IF_ERROR(Flush());
      }
      if (last && labels.empty()) {
        if (!Synchronous()) break;
        // Nothing left here, but a step needs every replica: this one adds nothing to the
        // others' until none of them has a window left either.
        STRATA_ASSIGN_OR_RETURN(const bool others_active,
                                AllReduceStep(nullptr, 0.0f, /*active=*/false));
        if (!others_active) break;
      }
      WriteProgress("training");
    }
    if (ThroughServers()) {
      STRATA_RETURN_IF_ERROR(FinishWithServers());
    } else if (!Synchronous()) {
      STRATA_RETURN_IF_ERROR(Flush());
      STRATA_RETURN_IF_ERROR(Send(EndMessage()));
      sent_end_ = true;
      STRATA_RETURN_IF_ERROR(AwaitPeers());
    }
    predictor_->Publish(*trainer_, AppliedTotal(), /*force=*/true);
    STRATA_RETURN_IF_ERROR(mesh_->Close(ReplicaClock::now() + options_.deadline));
    return WriteResult();
  }

  // Leaves this replica's address under the run's nonce and waits until every replica's is there.
  absl::Status FindPeers(int port) {
    const std::string address = absl::StrCat(tcp::DataPlaneHost(options_.listen), ":", port);
    STRATA_ASSIGN_OR_RETURN(const std::vector<std::string> peers,
                            AwaitEveryRank(Replicas(stream_, options_.stream_run), address,
                                           "announce themselves on the broker", nullptr));
    spdlog::info("replicas at {}", absl::StrJoin(peers, ", "));
    // Through servers the replicas exchange nothing with each other: finding each other is only
    // the start line, so that no replica reads the stream alone while the others start.
    if (ThroughServers()) return absl::OkStatus();
    if (rejoining_ > 0) STRATA_RETURN_IF_ERROR(JoinAgain(address));
    STRATA_RETURN_IF_ERROR(mesh_->Connect(peers));
    if (rejoining_ > 0) {
      // The recovery is over (the run starts no other before this).
      STRATA_RETURN_IF_ERROR(
          broker_->PutField(RecoveryStep(rejoining_, "connected"), "address", address));
    }
    return ring_ ? ring_->Connect(peers) : absl::OkStatus();
  }

  // Up to `count` entries: first those this consumer was handed and did not acknowledge before
  // a restart, then, every stream.claim_idle_ms / 2, those another consumer has held longer than
  // stream.claim_idle_ms (a dead replica's), else new ones.
  absl::StatusOr<std::vector<StreamEntry>> ReadEntries(int count) {
    if (!own_pending_after_.empty()) {
      STRATA_ASSIGN_OR_RETURN(std::vector<StreamEntry> entries,
                              broker_->ReadOwnPending(stream_.key(), stream_.group(), consumer_,
                                                      own_pending_after_, count));
      if (entries.empty()) {
        own_pending_after_.clear();
        if (counts_.taken_up > taken_up_before_) {
          spdlog::info("took up the {} event(s) handed to {} earlier and not acknowledged",
                       counts_.taken_up - taken_up_before_, consumer_);
        }
        return entries;
      }
      own_pending_after_ = entries.back().id;
      counts_.taken_up += static_cast<int64_t>(entries.size());
      return entries;
    }
    const auto now = ReplicaClock::now();
    if (now >= next_claim_) {
      const std::chrono::milliseconds idle(stream_.claim_idle_ms());
      STRATA_ASSIGN_OR_RETURN(
          AutoClaimed claimed,
          broker_->AutoClaim(stream_.key(), stream_.group(), consumer_, idle, claim_start_, count));
      // A scan of the whole pending list goes on from where it stopped; a finished one starts
      // again after half the idle time.
      claim_start_ = claimed.next_start;
      if (claim_start_ == "0-0") next_claim_ = now + idle / 2;
      if (!claimed.entries.empty()) {
        counts_.claimed += static_cast<int64_t>(claimed.entries.size());
        spdlog::warn("claimed {} event(s) another consumer held for more than {} ms unacknowledged",
                     claimed.entries.size(), idle.count());
        return std::move(claimed.entries);
      }
    }
    return broker_->ReadGroup(stream_.key(), stream_.group(), consumer_, count, kReadBlock);
  }

  // stream.sync servers: a replica started again after it died goes on with the counts it kept on
  // the broker (its windows are in the servers' model, which it pulled when it connected), and
  // takes up the events it was handed and had not acknowledged.
  absl::Status CarryOnCounts() {
    STRATA_ASSIGN_OR_RETURN(auto kept,
                            broker_->Fields(stream_keys::Counts(stream_, options_.stream_run)));
    const auto it = kept.find(std::to_string(options_.rank));
    // The first start leaves its (empty) record at once: a replica killed before its first
    // acknowledgement still finds, started again, that it is a restart.
    if (it == kept.end()) return SaveCounts();
    const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
    if (!counts_.CarryOn(j, options_.rank)) {
      return absl::DataLossError(
          absl::StrCat("the counts replica ", options_.rank,
                       " kept on the broker are not its counts: ", it->second.substr(0, 200)));
    }
    ++counts_.restarts;
    counts_.windows_before_restart = counts_.windows;
    if (auto seconds = j.find("seconds"); seconds != j.end() && seconds->is_number()) {
      seconds_before_restart_ = std::max(0.0, seconds->get<double>());
    }
    taken_up_before_ = counts_.taken_up;
    spdlog::info(
        "replica {} starts again (restart {}) after {} windows and {} events trained; it "
        "takes up the events it held, and trains on the {} model",
        options_.rank, counts_.restarts, counts_.windows, counts_.events_trained,
        ThroughServers() ? "servers'" : "other replicas'");
    return SaveCounts();
  }

  absl::Status SaveCounts() {
    nlohmann::json kept = counts_.Durable(options_.rank);
    // Before the start line (a restart's own save) the clock has not started.
    kept["seconds"] =
        started_ == ReplicaClock::time_point{} ? seconds_before_restart_ : SecondsSince(started_);
    return broker_->PutField(stream_keys::Counts(stream_, options_.stream_run),
                             std::to_string(options_.rank), kept.dump());
  }

  // False once the run's limits are reached: the group has been handed stream.max_events events,
  // or stream.max_seconds have passed.
  absl::StatusOr<bool> KeepReading() {
    const double elapsed = std::chrono::duration<double>(ReplicaClock::now() - started_).count();
    if (stream_.max_seconds() > 0 && elapsed >= stream_.max_seconds()) return false;
    if (stream_.max_events() > 0) {
      STRATA_ASSIGN_OR_RETURN(ConsumerGroupInfo group,
                              broker_->GroupInfo(stream_.key(), stream_.group()));
      if (group.entries_read >= stream_.max_events()) return false;
    }
    return true;
  }

  // `read_at`: when the window's first event was read.
  absl::Status TrainWindow(const std::vector<float>& features, const std::vector<int32_t>& labels,
                           const std::vector<std::string>& ids, ReplicaClock::time_point read_at) {
    const auto compute_start = ReplicaClock::now();
    STRATA_ASSIGN_OR_RETURN(StepStats stats, trainer_->ComputeGradientsFrom(features, labels));
    counts_.compute_s += SecondsSince(compute_start);
    const size_t n = static_cast<size_t>(trainer_->parameters().total_floats());
    const float* gradient = trainer_->gradient_data();
    if (!std::isfinite(stats.loss) || !std::isfinite(MaxAbsOrInfinity(gradient, n))) {
      // Not applied, so not sent: the replicas still agree. The events were trained on, and
      // their gradient refused, so they are acknowledged.
      ++counts_.diverged_windows;
      spdlog::warn("a window of {} events gave a loss of {}: its gradient is not applied",
                   labels.size(), stats.loss);
      return Acknowledge(ids);
    }
    // The decayed rate (stream.lr_decay_events) is this replica's own: it goes into the gradient
    // it buffers, scaled by rate / training.lr, and every replica applies received sums at
    // training.lr. Each gradient is thus applied at its sender's rate everywhere, and plain SGD's
    // updates still commute: the replicas agree whatever their decay clocks say.
    const float scale = LrScale();
    counts_.lr = sgd_.lr * scale;
    if (Synchronous()) {
      STRATA_RETURN_IF_ERROR(AllReduceStep(gradient, scale, /*active=*/true).status());
    } else if (ThroughServers()) {
      STRATA_RETURN_IF_ERROR(
          ExchangeWithServers(gradient, static_cast<int64_t>(labels.size()), scale));
    } else {
      SgdOptions step = sgd_;
      step.lr = counts_.lr;
      // Into the buffer before the step (which leaves the gradient as it is, but the buffer
      // holds what was computed): the sum so far and this gradient's clock.
      if (buffered_ == 0) {
        buffer_first_ = counts_.windows;
        buffer_read_at_ = read_at;
        buffer_sum_.resize(n);
        for (size_t i = 0; i < n; ++i) buffer_sum_[i] = scale * gradient[i];
        buffer_clocks_.clear();
      } else {
        for (size_t i = 0; i < n; ++i) buffer_sum_[i] += scale * gradient[i];
      }
      buffer_clocks_.insert(buffer_clocks_.end(), counts_.applied.begin(), counts_.applied.end());
      ++buffered_;
      trainer_->ApplyGradients(step);
      ++counts_.applied[static_cast<size_t>(options_.rank)];
      ++counts_.staleness[0];  // a local gradient: computed and applied on the same model
      metrics_->applied.Increment();
    }
    counts_.events_since_lr_reset += static_cast<int64_t>(labels.size());
    ++counts_.windows;
    counts_.events_trained += static_cast<int64_t>(labels.size());
    metrics_->events.Increment(static_cast<double>(labels.size()));
    counts_.correct += stats.correct;
    counts_.scored += stats.scored;
    Score(stats.correct, stats.scored);
    counts_.last_loss = stats.loss;
    predictor_->Publish(*trainer_, AppliedTotal());
    // Acknowledged only now that its gradient is in the model; on the mesh once it is also on its
    // way to the others, with its buffer (Flush): a replica that dies with gradients in its buffer
    // leaves their events pending, for its new incarnation to train again.
    if (ThroughServers() || Synchronous()) return Acknowledge(ids);
    unacknowledged_.insert(unacknowledged_.end(), ids.begin(), ids.end());
    if (buffered_ >= stream_.max_grad_buffer()) return Flush();
    return absl::OkStatus();
  }

  // training.lr / (1 + e / stream.lr_decay_events) as a factor of training.lr; 1 without decay.
  float LrScale() const {
    if (stream_.lr_decay_events() <= 0) return 1.0f;
    return static_cast<float>(1.0 / (1.0 + static_cast<double>(counts_.events_since_lr_reset) /
                                               static_cast<double>(stream_.lr_decay_events())));
  }

  // From each event's production (its `t`, the producer's wall clock) to the end of its window's
  // training (or scoring): how far behind the stream the replica trains. Meaningful when the
  // producer's clock is this machine's (or synchronised with it).
  void RecordLatency(const std::vector<int64_t>& produced_ns) {
    const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    for (int64_t t : produced_ns) {
      const double ms = static_cast<double>(now_ns - t) / 1e6;
      recent_latency_ms_.push_back(ms);
      if (latency_ms_.size() < kLatenciesKept) {
        latency_ms_.push_back(ms);
      } else {
        latency_ms_[next_latency_++ % kLatenciesKept] = ms;
      }
    }
  }

  // stream.freeze_at_event: from that event on (the window that holds it included) the model
  // stays as it is.
  bool Frozen() const {
    return stream_.freeze_at_event() > 0 && window_last_seq_ >= stream_.freeze_at_event();
  }

  // A frozen model's window: scored as a trained one would be before its gradient, not trained.
  absl::Status ScoreWindow(const std::vector<float>& features, const std::vector<int32_t>& labels,
                           const std::vector<std::string>& ids) {
    const auto compute_start = ReplicaClock::now();
    const int64_t n = static_cast<int64_t>(labels.size());
    std::vector<int64_t> shape;
    STRATA_ASSIGN_OR_RETURN(std::vector<float> scores, trainer_->Predict(features, n, &shape));
    counts_.compute_s += SecondsSince(compute_start);
    const int64_t classes = static_cast<int64_t>(scores.size()) / n;
    int64_t correct = 0;
    for (int64_t e = 0; e < n; ++e) {
      const float* row = scores.data() + e * classes;
      correct += std::max_element(row, row + classes) - row == labels[static_cast<size_t>(e)];
    }
    if (counts_.frozen_windows == 0) {
      spdlog::info(
          "frozen: from event {} on (stream.freeze_at_event {}), windows are scored and "
          "not trained",
          window_last_seq_, stream_.freeze_at_event());
      // What was computed before the freeze goes to the others now, not at the stream's end.
      STRATA_RETURN_IF_ERROR(Flush());
    }
    if (Synchronous()) {
      STRATA_RETURN_IF_ERROR(AllReduceStep(nullptr, 0.0f, /*active=*/true).status());
    }
    ++counts_.frozen_windows;
    counts_.events_frozen += n;
    counts_.correct += correct;
    counts_.scored += n;
    Score(correct, n);
    return Acknowledge(ids);
  }

  // The window's test-then-train score: into the sliding accuracy and the drift detector.
  void Score(int64_t correct, int64_t scored) {
    if (scored <= 0) return;
    recent_.push_back({correct, scored});
    counts_.recent_correct += correct;
    counts_.recent_scored += scored;
    while (recent_.size() > 1 &&
           counts_.recent_scored - recent_.front().second >= stream_.accuracy_window()) {
      counts_.recent_correct -= recent_.front().first;
      counts_.recent_scored -= recent_.front().second;
      recent_.pop_front();
    }
    const double recent_accuracy =
        static_cast<double>(counts_.recent_correct) / static_cast<double>(counts_.recent_scored);
    metrics_->recent_accuracy.Set(recent_accuracy);
    if (counts_.scored >= next_curve_point_) {
      counts_.accuracy_curve.push_back({window_last_seq_, counts_.scored, recent_accuracy});
      next_curve_point_ = counts_.scored + stream_.accuracy_window();
    }
    // One value per event (1: predicted wrong), the window's errors spread evenly over it: ADWIN's
    // bound shrinks with the number of values, so per-event values find a change within a few
    // hundred events where one value per window would need tens of windows.
    const int64_t errors = scored - correct;
    const double before = drift_detector_.mean();
    bool changed = false;
    for (int64_t i = 0; i < scored; ++i) {
      const int64_t value = (i + 1) * errors / scored - i * errors / scored;
      changed = drift_detector_.Update(static_cast<double>(value)) || changed;
    }
    // ADWIN finds any change of the error, and while the model learns the error keeps falling:
    // only a rise is a drift of the stream (the model no longer fits it).
    const double after = drift_detector_.mean();
    if (changed && after > before) {
      spdlog::info("drift: the error rose from {:.3f} to {:.3f} (ADWIN, after {} events)", before,
                   after, counts_.events_trained);
      metrics_->drifts.Increment();
      nlohmann::json drift = {{"events", counts_.events_trained},
                              {"seq", window_last_seq_},
                              {"error_before", before},
                              {"error_after", after}};
      if (stream_.on_drift() == v1::STREAM_ON_DRIFT_RESET_LR && !Frozen()) {
        // The next window trains at training.lr again, and the decay starts over from there.
        drift["lr_before"] = sgd_.lr * LrScale();
        drift["lr_reset"] = true;
        counts_.events_since_lr_reset = 0;
        ++counts_.lr_resets;
        spdlog::info(
            "drift: the learning rate goes back from {:.5f} to {:.5f} "
            "(stream.on_drift reset_lr)",
            drift["lr_before"].get<double>(), sgd_.lr);
      }
      counts_.drifts.push_back(std::move(drift));
    }
  }

  absl::Status Acknowledge(const std::vector<std::string>& ids) {
    if (ids.empty()) return absl::OkStatus();
    STRATA_ASSIGN_OR_RETURN(int64_t acked, broker_->Ack(stream_.key(), stream_.group(), ids));
    counts_.acknowledged += acked;
    // After the acknowledgement: a replica that dies between the two leaves a window trained
    // (its gradient with the servers, or sent) and not counted, never one counted and not trained.
    // On the mesh not while windows are buffered (malformed entries acknowledged meanwhile): their
    // events are not acknowledged, and a new incarnation trains them again. The next Flush saves.
    if (ThroughServers() || (MeshRecovers() && buffered_ == 0)) return SaveCounts();
    return absl::OkStatus();
  }

  // Sends the buffer to every other replica: one message, the gradients' sum and their clocks.
  absl::Status Flush() {
    if (buffered_ == 0) return absl::OkStatus();
    const auto start = ReplicaClock::now();
    if (half_sums_) RoundSumToHalves();
    auto message = std::make_shared<v1::StreamGradient>();
    message->set_sender(static_cast<uint32_t>(options_.rank));
    message->set_world(static_cast<uint32_t>(options_.world()));
    message->set_index(static_cast<uint64_t>(buffer_first_));
    message->set_count(static_cast<uint32_t>(buffered_));
    message->mutable_clock()->Add(buffer_clocks_.begin(), buffer_clocks_.end());
    message->set_values(reinterpret_cast<const char*>(buffer_sum_.data()),
                        buffer_sum_.size() * sizeof(float));
    buffered_ = 0;
    STRATA_RETURN_IF_ERROR(Send(std::move(message)));
    counts_.send_s += SecondsSince(start);
    STRATA_RETURN_IF_ERROR(Acknowledge(unacknowledged_));
    unacknowledged_.clear();
    return absl::OkStatus();
  }

  // strategy.push_compression fp16 on the mesh: the buffer's sum becomes the floats of its nearest
  // halves, which the peers receive exactly, and this replica's model, which took the exact
  // gradients one by one, takes the difference: p -= lr x (rounded - exact). So every replica
  // applies the same rounded sum and they still agree (up to the order of the additions). A sum
  // with a value beyond a half's range is left exact and travels in 32 bits.
  void RoundSumToHalves() {
    exact_sum_ = buffer_sum_;
    if (RoundToHalves(buffer_sum_.data(), buffer_sum_.size()) > 0) {
      buffer_sum_ = exact_sum_;
      if (!warned_half_range_) {
        warned_half_range_ = true;
        spdlog::warn("a gradient sum beyond 65,504 travels in 32 bits (this once said)");
      }
      return;
    }
    float* params = trainer_->parameter_data();
    const float lr = sgd_.lr;
    for (size_t i = 0; i < buffer_sum_.size(); ++i) {
      params[i] -= lr * (buffer_sum_[i] - exact_sum_[i]);
    }
  }

  // The version of the model this replica holds: the gradients in it, every replica's.
  int64_t AppliedTotal() const {
    if (ThroughServers()) return server_version_;
    int64_t total = 0;
    for (int64_t a : counts_.applied) total += a;
    return total;
  }

  static double SecondsSince(ReplicaClock::time_point t) {
    return std::chrono::duration<double>(ReplicaClock::now() - t).count();
  }

  // While a peer's queue is full (its acks are behind: stream.max_in_flight), the others'
  // gradients are taken and applied in turns with the wait, so that no two replicas wait for each
  // other; Broadcast then finds the room (only this thread fills the queues).
  absl::Status Send(std::shared_ptr<const v1::StreamGradient> message) {
    const auto until = ReplicaClock::now() + options_.deadline;
    while (
        !mesh_->RoomToSend(std::min(until, ReplicaClock::now() + std::chrono::milliseconds(20)))) {
      if (ReplicaClock::now() > until) break;  // Broadcast names the peer
      // Not a recovery here: this message, counted as sent, must reach the survivors first (a dead
      // peer's stopped writer gives room).
      STRATA_RETURN_IF_ERROR(ApplyRemote(ReplicaClock::now()));
    }
    const absl::Status sent = mesh_->Broadcast(std::move(message));
    if (!absl::IsUnavailable(sent) || !MeshRecovers() || recovering_) return sent;
    // A stream to a peer broke (the live ones have the message). If the peer died, the
    // orchestrator declares its recovery, which replaces the stream; else the error stands.
    spdlog::warn("{}: waiting for the run to start it again", std::string(sent.message()));
    const int64_t before = last_recovery_;
    while (last_recovery_ == before) {
      if (ReplicaClock::now() > until) return sent;
      STRATA_RETURN_IF_ERROR(
          ApplyRemote(std::min(until, ReplicaClock::now() + std::chrono::milliseconds(50))));
      STRATA_RETURN_IF_ERROR(JoinRecoveries(/*now=*/true));
    }
    return absl::OkStatus();
  }

  std::shared_ptr<const v1::StreamGradient> EndMessage() const {
    auto end = std::make_shared<v1::StreamGradient>();
    end->set_sender(static_cast<uint32_t>(options_.rank));
    end->set_world(static_cast<uint32_t>(options_.world()));
    end->set_index(static_cast<uint64_t>(counts_.windows));
    end->set_end(true);
    return end;
  }

  // p -= training.lr * sum: how a replica applies gradients it did not compute itself (a peer's
  // buffer, or an all-reduced step), each already scaled by its sender's rate.
  void ApplySum(const float* sum) {
    const size_t n = static_cast<size_t>(trainer_->parameters().total_floats());
    float* params = trainer_->parameter_data();
    const float lr = sgd_.lr;
    for (size_t i = 0; i < n; ++i) params[i] -= lr * sum[i];
  }

  // One synchronous step (stream.sync allreduce): the ring sums, over every replica, its window's
  // gradient (scaled by its rate's factor, as the mesh sends it; none from a replica without a
  // window), which replicas gave one, and which may give more; every replica then applies the
  // sum at training.lr. So each step applies the same bits everywhere, every gradient once, on
  // the model it was computed from (staleness 0). True while some replica may give more.
  absl::StatusOr<bool> AllReduceStep(const float* gradient, float scale, bool active) {
    const size_t n = static_cast<size_t>(trainer_->parameters().total_floats());
    const size_t world = counts_.applied.size();
    step_sum_.resize(n + world + 1);
    if (gradient != nullptr) {
      for (size_t i = 0; i < n; ++i) step_sum_[i] = scale * gradient[i];
    } else {
      std::fill(step_sum_.begin(), step_sum_.begin() + static_cast<std::ptrdiff_t>(n), 0.0f);
    }
    std::fill(step_sum_.begin() + static_cast<std::ptrdiff_t>(n), step_sum_.end(), 0.0f);
    if (gradient != nullptr) step_sum_[n + static_cast<size_t>(options_.rank)] = 1.0f;
    step_sum_[n + world] = active ? 1.0f : 0.0f;
    const auto start = ReplicaClock::now();
    AllReduceOptions all_reduce;
    all_reduce.deadline = options_.deadline;
    STRATA_RETURN_IF_ERROR(ring_->AllReduceSum(step_sum_.data(), step_sum_.size(), all_reduce));
    int64_t contributors = 0;
    for (size_t r = 0; r < world; ++r) {
      // Exact: sums of a few ones and zeros.
      const int64_t gave = static_cast<int64_t>(step_sum_[n + r]);
      counts_.applied[r] += gave;
      contributors += gave;
    }
    if (contributors > 0) {
      if (!std::isfinite(MaxAbsOrInfinity(step_sum_.data(), n))) {
        return absl::DataLossError("the all-reduced gradients hold a value that is not finite");
      }
      ApplySum(step_sum_.data());
      counts_.staleness[0] += contributors;
      // The histogram is of remote gradients, as the mesh's.
      const int64_t remote = contributors - (gradient != nullptr ? 1 : 0);
      for (int64_t c = 0; c < remote; ++c) metrics_->staleness.Observe(0);
      metrics_->applied.Increment(static_cast<double>(contributors));
      predictor_->Publish(*trainer_, AppliedTotal());
    }
    counts_.remote_apply_s += SecondsSince(start);
    return step_sum_[n + world] > 0.5f;
  }

  // Applies what the peers sent, waiting until `until` for the first gradient.
  absl::Status ApplyRemote(ReplicaClock::time_point until) {
    STRATA_ASSIGN_OR_RETURN(auto received, mesh_->Take(until));
    const size_t n = static_cast<size_t>(trainer_->parameters().total_floats());
    const auto start = ReplicaClock::now();
    for (const auto& g : received) {
      const size_t sender = g->sender();
      if (g->end()) {
        ended_[sender] = static_cast<int64_t>(g->index());
        continue;
      }
      // Aligned: protobuf's bytes are a std::string, whose buffer is allocated for any type.
      const float* values = reinterpret_cast<const float*>(g->values().data());
      if (!std::isfinite(MaxAbsOrInfinity(values, n))) {
        return absl::DataLossError(absl::StrCat("replica ", sender, " sent gradient ", g->index(),
                                                " with a value that is not finite"));
      }
      // Each gradient of the message as if applied in turn: the j-th finds this replica j
      // further along the sender's gradients.
      const size_t world = counts_.applied.size();
      for (size_t j = 0; j < g->count(); ++j) {
        int64_t stale = 0;
        for (size_t r = 0; r < world; ++r) {
          const int64_t applied = counts_.applied[r] + (r == sender ? static_cast<int64_t>(j) : 0);
          stale += std::abs(g->clock(static_cast<int>(j * world + r)) - applied);
        }
        ++counts_.staleness[stale];
        metrics_->staleness.Observe(static_cast<double>(stale));
      }
      metrics_->applied.Increment(g->count());
      ApplySum(values);
      counts_.applied[sender] += g->count();
    }
    counts_.remote_apply_s += std::chrono::duration<double>(ReplicaClock::now() - start).count();
    if (!received.empty()) predictor_->Publish(*trainer_, AppliedTotal());
    return absl::OkStatus();
  }

  // The mesh, with recovery.restarts: a replica that dies is started again by the orchestrator,
  // which declares it on the broker first (stream_keys::Recoveries). What the survivors and the
  // new incarnation do is docs/protocol.md's "When a replica of the mesh dies".
  bool MeshRecovers() const {
    // A replica alone has no survivor to take a model from: its death is not recovered.
    return !ThroughServers() && !Synchronous() && options_.job.recovery().restarts() > 0 &&
           options_.world() > 1;
  }

  std::string RecoveryStep(int64_t recovery, const char* step) const {
    return stream_keys::RecoveryStep(stream_, options_.stream_run, recovery, step);
  }

  // The recoveries declared so far, by number: the dead replica's rank.
  absl::StatusOr<std::map<int64_t, int>> DeclaredRecoveries() {
    STRATA_ASSIGN_OR_RETURN(auto fields,
                            broker_->Fields(stream_keys::Recoveries(stream_, options_.stream_run)));
    std::map<int64_t, int> declared;
    for (const auto& [number, rank_text] : fields) {
      int64_t n = 0;
      int rank = -1;
      if (absl::SimpleAtoi(number, &n) && n > 0 && absl::SimpleAtoi(rank_text, &rank) &&
          rank >= 0 && rank < options_.world()) {
        declared[n] = rank;
      }
    }
    return declared;
  }

  // At the start: the recoveries before this incarnation are not this one's to take part in; a
  // restarted replica finds the one that started it.
  absl::Status FindRecoveries() {
    STRATA_ASSIGN_OR_RETURN(auto declared, DeclaredRecoveries());
    for (const auto& [n, rank] : declared) {
      last_recovery_ = std::max(last_recovery_, n);
      if (rank == options_.rank) rejoining_ = n;
    }
    if (counts_.restarts > 0 && rejoining_ == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "replica ", options_.rank,
          " starts again, but no recovery of it was declared on the broker (the run declares one "
          "before it starts a replica of the mesh again)"));
    }
    return absl::OkStatus();
  }

  // Takes part in every recovery declared since the last look (at most every 200 ms, unless
  // `now`).
  absl::Status JoinRecoveries(bool now = false) {
    if (!MeshRecovers() || recovering_) return absl::OkStatus();
    const auto t = ReplicaClock::now();
    if (!now && t < next_recovery_look_) return absl::OkStatus();
    next_recovery_look_ = t + std::chrono::milliseconds(200);
    STRATA_ASSIGN_OR_RETURN(auto declared, DeclaredRecoveries());
    for (const auto& [n, dead] : declared) {
      if (n <= last_recovery_) continue;
      last_recovery_ = n;
      if (dead == options_.rank) continue;  // not this incarnation's death
      recovering_ = true;
      const absl::Status recovered = Recover(n, dead);
      recovering_ = false;
      STRATA_RETURN_IF_ERROR(recovered);
    }
    return absl::OkStatus();
  }

  // A survivor's part in recovery `n` of replica `dead`: (1) cut it off and send the buffer;
  // (2) every survivor applies everything every other survivor sent, after which they differ only
  // in how many of the dead one's gradients reached each; (3) the survivor that holds the most
  // gives its model to all (so nothing that reached any survivor is lost); (4) once the new
  // incarnation has it, the survivors take it back, sending to it from where the model stops.
  absl::Status Recover(int64_t n, int dead) {
    const auto start = ReplicaClock::now();
    const size_t d = static_cast<size_t>(dead);
    spdlog::warn("replica {} died (recovery {}): the others agree on one model for its new start",
                 dead, n);
    WriteProgress("recovering");
    mesh_->Drop(dead);
    STRATA_RETURN_IF_ERROR(Flush());
    auto keep_applying = [&] {
      WriteProgress("recovering");
      return ApplyRemote(ReplicaClock::now() + std::chrono::milliseconds(20));
    };
    STRATA_ASSIGN_OR_RETURN(
        const std::vector<std::string> sent,
        AwaitEveryRank(RecoveryStep(n, "sent"),
                       std::to_string(counts_.applied[static_cast<size_t>(options_.rank)]),
                       "say what they sent", keep_applying, dead));
    const auto until = ReplicaClock::now() + options_.deadline;
    while (true) {
      std::string behind;
      for (int r = 0; r < options_.world(); ++r) {
        if (r == dead || r == options_.rank) continue;
        const size_t i = static_cast<size_t>(r);
        int64_t total = 0;
        if (!absl::SimpleAtoi(sent[i], &total) || total < 0 || counts_.applied[i] > total) {
          return absl::DataLossError(absl::StrCat("recovery ", n, ": replica ", r, " says it sent ",
                                                  sent[i], " gradients, ", counts_.applied[i],
                                                  " came here"));
        }
        if (counts_.applied[i] < total) absl::StrAppend(&behind, " ", r);
      }
      if (behind.empty()) break;
      if (ReplicaClock::now() > until) {
        return absl::DeadlineExceededError(absl::StrCat(
            "recovery ", n, ": the gradients of replicas", behind, " did not all come"));
      }
      STRATA_RETURN_IF_ERROR(keep_applying());
    }
    STRATA_RETURN_IF_ERROR(ApplyRemote(ReplicaClock::now()));  // the dead one's, still in the inbox
    STRATA_ASSIGN_OR_RETURN(
        const std::vector<std::string> held,
        AwaitEveryRank(RecoveryStep(n, "held"), std::to_string(counts_.applied[d]),
                       "say what they hold", nullptr, dead));
    int donor = -1;
    int64_t most = -1;
    for (int r = 0; r < options_.world(); ++r) {
      int64_t h = -1;
      if (r == dead || !absl::SimpleAtoi(held[static_cast<size_t>(r)], &h)) continue;
      if (h > most) {
        most = h;
        donor = r;
      }
    }
    if (donor == options_.rank) {
      STRATA_RETURN_IF_ERROR(GiveModel(n));
    } else {
      STRATA_RETURN_IF_ERROR(TakeModel(n, dead).status());
    }
    STRATA_ASSIGN_OR_RETURN(auto joined, AwaitField(RecoveryStep(n, "joined"), "address",
                                                    absl::StrCat("recovery ", n, ": replica ", dead,
                                                                 " did not start again"),
                                                    [&] { WriteProgress("recovering"); }));
    const std::string address = joined["address"];
    STRATA_RETURN_IF_ERROR(mesh_->Rejoin(dead, address, static_cast<uint64_t>(counts_.applied[d])));
    ended_[d] = -1;
    // An end sent before the death went to the old incarnation only.
    if (sent_end_) STRATA_RETURN_IF_ERROR(mesh_->SendTo(dead, EndMessage()));
    STRATA_RETURN_IF_ERROR(
        broker_->PutField(RecoveryStep(n, "rejoined"), std::to_string(options_.rank), "1"));
    ++counts_.recoveries;
    predictor_->Publish(*trainer_, AppliedTotal(), /*force=*/true);
    spdlog::info(
        "recovery {}: replica {} is back at {}; every replica holds replica {}'s model, with {} of "
        "the dead one's gradients ({:.1f} s)",
        n, dead, address, donor, counts_.applied[d], SecondsSince(start));
    return absl::OkStatus();
  }

  // The donor's part: its weights and its counts of applied gradients, for the others to take.
  absl::Status GiveModel(int64_t n) {
    const size_t floats = static_cast<size_t>(trainer_->parameters().total_floats());
    const std::string key = RecoveryStep(n, "model");
    STRATA_RETURN_IF_ERROR(broker_->PutField(
        key, "params",
        std::string(reinterpret_cast<const char*>(trainer_->parameter_data()), floats * 4)));
    STRATA_RETURN_IF_ERROR(broker_->PutField(key, "donor", std::to_string(options_.rank)));
    return broker_->PutField(key, "applied", absl::StrJoin(counts_.applied, ","));
  }

  // Waits for recovery `n`'s model and makes it this replica's, weights and counts; returns the
  // donor. A survivor (`dead` the dead replica's rank) must already hold every other replica's
  // gradients as the donor does: it checks. The new incarnation (dead < 0) has none to check.
  absl::StatusOr<int> TakeModel(int64_t n, int dead) {
    // Not applying meanwhile: what the donor sends once it goes on is applied on its model. The
    // donor writes `applied` last.
    STRATA_ASSIGN_OR_RETURN(auto model,
                            AwaitField(RecoveryStep(n, "model"), "applied",
                                       absl::StrCat("recovery ", n, ": no model"), nullptr));
    const size_t floats = static_cast<size_t>(trainer_->parameters().total_floats());
    const std::string& params = model["params"];
    std::vector<int64_t> applied;
    for (absl::string_view text : absl::StrSplit(model["applied"], ',')) {
      int64_t a = -1;
      if (!absl::SimpleAtoi(text, &a) || a < 0) break;
      applied.push_back(a);
    }
    int donor = -1;
    if (params.size() != floats * 4 || applied.size() != counts_.applied.size() ||
        !absl::SimpleAtoi(model["donor"], &donor) ||
        !std::isfinite(MaxAbsOrInfinity(reinterpret_cast<const float*>(params.data()), floats))) {
      return absl::DataLossError(
          absl::StrCat("recovery ", n, ": the model on the broker is not one of this job's"));
    }
    for (int r = 0; r < options_.world(); ++r) {
      const size_t i = static_cast<size_t>(r);
      if (dead >= 0 && r != dead && applied[i] != counts_.applied[i]) {
        return absl::DataLossError(absl::StrCat(
            "recovery ", n, ": replica ", donor, " holds ", applied[i], " gradients of replica ", r,
            ", this one ", counts_.applied[i], " (they should agree but for the dead one's)"));
      }
    }
    std::memcpy(trainer_->parameter_data(), params.data(), floats * 4);
    counts_.applied = std::move(applied);
    return donor;
  }

  // The new incarnation's part (before it connects): the donor's model, its own count of windows
  // set to the gradients of its earlier incarnations that the model holds, and its address for
  // the survivors, who then take it back.
  absl::Status JoinAgain(const std::string& address) {
    const int64_t n = rejoining_;
    const size_t me = static_cast<size_t>(options_.rank);
    STRATA_ASSIGN_OR_RETURN(const int donor, TakeModel(n, /*dead=*/-1));
    const int64_t kept = counts_.applied[me];
    const int64_t lost = std::max<int64_t>(0, counts_.windows - kept);
    counts_.lost_windows += lost;
    counts_.windows = kept;
    counts_.windows_before_restart = kept;
    mesh_->ExpectFrom(counts_.applied);
    STRATA_RETURN_IF_ERROR(broker_->PutField(RecoveryStep(n, "joined"), "address", address));
    STRATA_RETURN_IF_ERROR(
        AwaitEveryRank(RecoveryStep(n, "rejoined"), "1", "take it back", nullptr, options_.rank)
            .status());
    STRATA_RETURN_IF_ERROR(SaveCounts());
    predictor_->Publish(*trainer_, AppliedTotal(), /*force=*/true);
    spdlog::info(
        "replica {} rejoins (recovery {}) with replica {}'s model: {} of its earlier windows' "
        "gradients had reached the others, {} died with it",
        options_.rank, n, donor, kept, lost);
    return absl::OkStatus();
  }

  // Until every peer's end has come and every gradient it announced is applied.
  absl::Status AwaitPeers() {
    auto until = ReplicaClock::now() + options_.deadline;
    while (true) {
      std::string waiting;
      for (int r = 0; r < options_.world(); ++r) {
        const size_t i = static_cast<size_t>(r);
        if (ended_[i] < 0 || counts_.applied[i] < ended_[i]) absl::StrAppend(&waiting, " ", r);
      }
      if (waiting.empty()) return absl::OkStatus();
      if (ReplicaClock::now() > until) {
        return absl::DeadlineExceededError(
            absl::StrCat("replicas", waiting, " did not send their last gradients within ",
                         options_.deadline.count() / 1000, " s"));
      }
      WriteProgress("flushing");
      STRATA_RETURN_IF_ERROR(
          ApplyRemote(std::min(until, ReplicaClock::now() + std::chrono::milliseconds(500))));
      const int64_t recoveries_before = last_recovery_;
      STRATA_RETURN_IF_ERROR(JoinRecoveries());
      // A new incarnation still has its predecessor's pending events to train.
      if (last_recovery_ != recoveries_before) until = ReplicaClock::now() + options_.deadline;
    }
  }

  nlohmann::json Figures(const std::string& state) const {
    nlohmann::json j = counts_.ToJson();
    // Through servers a replica counts its own gradients; the model it holds has every
    // replica's that the servers applied (its version).
    if (ThroughServers()) j["applied_total"] = AppliedTotal();
    const StreamPredictor::Latencies predict = predictor_->Figures();
    j["predictions"] = {{"answered", predict.answered},
                        {"refused", predict.refused},
                        {"p50_ms", predict.p50_ms},
                        {"p99_ms", predict.p99_ms},
                        {"max_ms", predict.max_ms}};
    if (mesh_ && !ThroughServers() && !Synchronous()) {
      // How the peers' messages came (stream.link): on the TCP data plane, or over gRPC.
      j["received_over_tcp"] = mesh_->received_over_tcp();
      j["received_over_grpc"] = mesh_->received_over_grpc();
      j["received_in_halves"] = mesh_->received_in_halves();
    }
    j["rank"] = options_.rank;
    j["state"] = state;
    j["seconds"] = std::chrono::duration<double>(ReplicaClock::now() - started_).count();
    return j;
  }

  void WriteProgress(const std::string& state) {
    if (options_.run_dir.empty()) return;
    const auto now = ReplicaClock::now();
    if (now < next_progress_) return;
    next_progress_ = now + std::chrono::seconds(1);
    nlohmann::json figures = Figures(state);
    // The events trained since the last progress file: what a ramp of the rate watches.
    figures["recent_latency"] = LatencyFigures(recent_latency_ms_);
    recent_latency_ms_.clear();
    // Progress is for watching: a failed write is not the run's failure.
    (void)WriteFileAtomic(paths_.StreamReplicaProgress(options_.rank), figures.dump() + "\n");
  }

  static nlohmann::json LatencyFigures(std::vector<double> ms) {
    if (ms.empty()) return {{"events", 0}};
    std::sort(ms.begin(), ms.end());
    auto at = [&](double q) {
      return ms[std::min(ms.size() - 1, static_cast<size_t>(q * (ms.size() - 1) + 0.5))];
    };
    return {
        {"events", ms.size()}, {"p50_ms", at(0.5)}, {"p99_ms", at(0.99)}, {"max_ms", ms.back()}};
  }

  absl::Status WriteResult() {
    spdlog::info("replica {}: {} windows, {} events trained, {} gradients applied, {} malformed",
                 options_.rank, counts_.windows, counts_.events_trained, AppliedTotal(),
                 counts_.malformed);
    if (options_.run_dir.empty()) return absl::OkStatus();
    STRATA_RETURN_IF_ERROR(
        WriteCheckpoint(paths_.StreamReplicaModel(options_.rank),
                        trainer_->ToCheckpoint(0, counts_.windows, AppliedTotal())));
    nlohmann::json result = Figures("done");
    result["latency"] = LatencyFigures(latency_ms_);
    // Only in the result: the progress file, rewritten every second, stays small.
    result["accuracy_curve"] = counts_.accuracy_curve;
    return WriteFileAtomic(paths_.StreamReplicaResult(options_.rank), result.dump(2) + "\n");
  }

  const WorkerOptions& options_;
  StreamReplicaMetrics* const metrics_;
  StreamPredictor* const predictor_;
  const v1::ResolvedStream& stream_;
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<StreamBroker> broker_;
  const EventSchema schema_;
  const RunPaths paths_;
  const std::string consumer_;
  const SgdOptions sgd_;
  std::unique_ptr<GradientMesh> mesh_;
  std::unique_ptr<RingAllReduce> ring_;  // stream.sync allreduce only
  // stream.sync servers only: the clients, the buffers' values both ways, the servers' version.
  std::unique_ptr<PartitionClients> clients_;
  std::vector<float> server_buffers_;
  int64_t server_version_ = 0;
  bool links_logged_ = false;
  std::vector<float> step_sum_;  // an all-reduce step's gradient sum and flags
  ReplicaCounts counts_;
  std::deque<std::pair<int64_t, int64_t>> recent_;  // (correct, scored) of the latest windows
  // The highest producer sequence number (`seq`) trained so far: where in the stream a drift was
  // seen (-1 when the events carry none).
  int64_t window_last_seq_ = -1;
  int64_t next_curve_point_ = 0;
  // Production-to-training latencies: of the latest kLatenciesKept events (a ring from
  // next_latency_), and of the events since the last progress file.
  std::vector<double> latency_ms_, recent_latency_ms_;
  size_t next_latency_ = 0;  // counts_.scored at which the accuracy curve gets its next point
  Adwin drift_detector_;
  std::vector<int64_t> ended_;  // by rank: the gradients it announced in its end, -1 before
  // The mesh's recoveries (recovery.restarts): the latest this replica has taken part in (or
  // found declared at its start), the one it was started again by (0: none), whether one is
  // under way here, and when the broker is next asked for new ones.
  int64_t last_recovery_ = 0, rejoining_ = 0;
  bool recovering_ = false;
  bool sent_end_ = false;  // this replica's end is on its way to the peers
  ReplicaClock::time_point next_recovery_look_;
  // Where the reading of this consumer's own pending list goes on from ("0": its start), empty
  // once read to its end; the cursor of the claim's scan of the group's pending list, and when
  // the next claim is due.
  std::string own_pending_after_ = "0";
  int64_t taken_up_before_ = 0;
  double seconds_before_restart_ = 0;  // the seconds a restarted replica's last save counted
  std::string claim_start_ = "0-0";
  ReplicaClock::time_point next_claim_;
  // The gradients computed and not yet sent: how many, the first one's number, their sum and
  // their clocks (world entries each).
  int buffered_ = 0;
  int64_t buffer_first_ = 0;
  ReplicaClock::time_point buffer_read_at_;  // when its first window's first event was read
  std::vector<std::string> unacknowledged_;  // the buffered windows' events
  std::vector<float> buffer_sum_;
  // strategy.push_compression fp16 on the mesh's TCP link: the sums go as halves (Flush rounds
  // them; the exact one kept meanwhile).
  bool half_sums_ = false, warned_half_range_ = false;
  std::vector<float> exact_sum_;
  std::vector<int64_t> buffer_clocks_;
  ReplicaClock::time_point started_, next_progress_;
};

}  // namespace

absl::Status RunStreamReplica(const WorkerOptions& options) {
  const v1::ResolvedStream& stream = options.job.stream();
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<MetricsEndpoint> metrics_endpoint,
                          MetricsEndpoint::Start(options.metrics));
  StreamReplicaMetrics metrics(metrics_endpoint->registry(), options.rank);
  if (metrics_endpoint->port() > 0) {
    spdlog::info("metrics on port {} (/metrics)", metrics_endpoint->port());
  }
  const std::string address_text =
      options.stream_address.empty() ? stream.address() : options.stream_address;
  if (address_text.empty()) {
    return absl::InvalidArgumentError(
        "no broker: stream.address is empty and no --stream-address was given");
  }
  STRATA_ASSIGN_OR_RETURN(BrokerAddress address, ParseBrokerAddress(address_text));
  StreamBrokerOptions broker_options;
  broker_options.who = absl::StrCat("replica-", options.rank);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<StreamBroker> broker,
                          ConnectStreamBroker(address, broker_options));

  STRATA_ASSIGN_OR_RETURN(Dataset dataset, LoadDataset(DatasetOptionsFor(options.job)));
  const EventSchema schema = {dataset.ExampleShape(), dataset.num_classes};
  auto shared = std::make_shared<const Dataset>(std::move(dataset));
  TrainerOptions trainer_options = TrainerOptions::ForWorker(options.job);
  ConfigureTorchThreads(trainer_options.threads);
  // Every replica starts from the same weights: the model seed is the job's.
  STRATA_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(trainer_options, shared));
  // The model Predict answers with: a second instance, loaded from the published weights.
  STRATA_ASSIGN_OR_RETURN(auto prediction_model, Trainer::Create(trainer_options, shared));
  StreamPredictor predictor(options.rank, std::move(prediction_model));
  if (!options.run_dir.empty()) {
    // A replica started by hand may be the first to write in its run directory.
    STRATA_RETURN_IF_ERROR(MakeDirs(RunPaths(options.run_dir).At(run_files::kStream)));
    STRATA_RETURN_IF_ERROR(MakeDirs(RunPaths(options.run_dir).checkpoints));
  }
  return StreamReplica(options, std::move(trainer), std::move(broker), schema, &metrics, &predictor)
      .Run();
}

}  // namespace strata
