#include "services/worker/worker.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include "services/collective/ring_allreduce.h"
#include "services/collective/tcp_ring_link.h"
#include "services/common/base/files.h"
#include "services/common/base/status.h"
#include "services/common/config/resolved_job.h"
#include "services/common/ml/dataset.h"
#include "services/common/ml/trainer.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/shard_index.h"
#include "services/common/wire/tcp_socket.h"
#include "services/worker/allreduce_sync.h"
#include "services/worker/point_round_sync.h"
#include "services/worker/push_pull_sync.h"
#include "services/worker/stream_replica.h"
#include "services/worker/training_loop.h"
#include "services/worker/worker_metrics.h"
#include "services/worker/worker_service.h"

namespace strata {
namespace {

// The synchronisers of strata-worker: all-reduce on its ring, push/pull (or PDP and APDP) on
// partition clients over the link the job asks for.
class WorkerSynchronisers final : public SynchroniserFactory {
 public:
  WorkerSynchronisers(const WorkerOptions& options, RingAllReduce* ring, WorkerMetrics* metrics)
      : options_(options), ring_(ring), metrics_(metrics) {}

  absl::Status ConnectRing(const std::vector<std::string>& peers, uint32_t generation) override {
    return generation > 0 ? ring_->Reform(peers, generation) : ring_->Connect(peers);
  }

  absl::StatusOr<std::unique_ptr<Synchroniser>> AllReduce(int source_rank) override {
    AllReduceSyncOptions o;
    o.ring.deadline = options_.deadline;
    o.ring.half_precision = options_.job.strategy().ring_compression() == v1::RING_COMPRESSION_FP16;
    o.source_rank = source_rank;
    o.bucket_bytes = static_cast<size_t>(options_.job.strategy().bucket_bytes());
    return MakeAllReduceSynchroniser(ring_, o);
  }

  absl::Status RingBarrier() override {
    float barrier = 0.0f;
    AllReduceOptions o;
    o.deadline = options_.deadline;
    return ring_->AllReduceSum(&barrier, 1, o);
  }

  absl::StatusOr<std::unique_ptr<Synchroniser>> PushPull(const std::vector<std::string>& servers,
                                                         const Trainer& trainer,
                                                         double lr) override {
    const PartitionClientsOptions clients = PushPullClientsFor(options_, servers);
    const v1::Consistency mode = options_.job.strategy().consistency();
    if (ServerDecidesPulls(mode)) {
      PointRoundOptions rounds;
      rounds.clients = clients;
      rounds.workers = options_.world();
      rounds.asynchronous = mode == v1::CONSISTENCY_APDP;
      return MakePointRoundSynchroniser(rounds, trainer);
    }
    PushPullOptions o;
    o.clients = clients;
    o.lr = lr;
    o.pipeline = options_.job.strategy().ps_pipeline() > 0;
    o.metrics = metrics_;
    return MakePushPullSynchroniser(o, trainer);
  }

 private:
  const WorkerOptions& options_;
  RingAllReduce* const ring_;
  WorkerMetrics* const metrics_;
};

absl::StatusOr<std::vector<int64_t>> LoadShard(const WorkerOptions& options, size_t train_size) {
  if (!options.shard_file.empty()) {
    // The plan must be this job's: as many shards as workers, this rank's file with the count its
    // manifest lists, for the training set this worker loaded. The data set's fingerprint is not
    // compared here (the worker does not compute one; the sharder's plan records it).
    ShardExpectation expected;
    expected.rank = options.rank;
    expected.workers = options.world();
    expected.train_examples = static_cast<int64_t>(train_size);
    STRATA_ASSIGN_OR_RETURN(auto shard, CheckShardIndexFor(options.shard_file, expected));
    for (int64_t e : shard) {
      if (e < 0 || static_cast<size_t>(e) >= train_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            options.shard_file, ": example ", e, " outside the training split of ", train_size));
      }
    }
    if (shard.empty())
      return absl::InvalidArgumentError(absl::StrCat(options.shard_file, ": empty shard"));
    return shard;
  }
  // Without a shard plan: every world-th example (what `mod` sharding gives).
  std::vector<int64_t> shard;
  for (size_t e = static_cast<size_t>(options.rank); e < train_size; e += options.world()) {
    shard.push_back(static_cast<int64_t>(e));
  }
  return shard;
}

// The ring over the link the job asks for (strategy.ring_link, plain TCP by default). The TCP
// link's connections are not encrypted, so with TLS on the ring stays on gRPC, which is.
absl::StatusOr<std::unique_ptr<RingAllReduce>> MakeWorkerRing(const WorkerOptions& options) {
  // A push/pull job has no ring phase: it needs no data plane listening (the gRPC link costs
  // nothing until used).
  const v1::ResolvedStrategy& strategy = options.job.strategy();
  const bool fp16 = strategy.ring_compression() == v1::RING_COMPRESSION_FP16;
  if (strategy.ring_link() != v1::DATA_LINK_TCP || strategy.kind() == v1::STRATEGY_KIND_PS) {
    if (fp16 && strategy.kind() != v1::STRATEGY_KIND_PS) {
      spdlog::warn(
          "strategy.ring_compression fp16 over the gRPC ring: the values are rounded, "
          "but travel in 32 bits (only the plain-TCP link sends 16)");
    }
    return std::make_unique<RingAllReduce>(options.rank);
  }
  if (ChannelsUseTls()) {
    spdlog::warn(
        "strategy.ring_link tcp: TLS is on and the plain TCP link is not encrypted; the "
        "ring stays on gRPC{}",
        fp16 ? " (ring_compression fp16: rounded, but sent in 32 bits)" : "");
    return std::make_unique<RingAllReduce>(options.rank);
  }
  TcpRingLinkOptions link_options;
  link_options.listen_host = tcp::DataPlaneHost(options.listen);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<TcpRingLink> link, TcpRingLink::Create(link_options));
  spdlog::info("ring segments travel on plain TCP (data plane on port {})", link->data_port());
  return std::make_unique<RingAllReduce>(options.rank, std::move(link));
}

}  // namespace

PartitionClientsOptions PushPullClientsFor(const WorkerOptions& options,
                                           const std::vector<std::string>& servers) {
  PartitionClientsOptions clients;
  clients.servers = servers;
  clients.rank = options.rank;
  clients.deadline = options.deadline;
  // Plain TCP (with shared memory for servers on this host under shm) unless the job asks for
  // gRPC; with TLS on the servers offer no data plane.
  const v1::ResolvedStrategy& strategy = options.job.strategy();
  const v1::DataLink link = strategy.ps_link();
  clients.tcp_data_plane =
      (link == v1::DATA_LINK_TCP || link == v1::DATA_LINK_SHARED_MEMORY) && !ChannelsUseTls();
  clients.shared_memory = clients.tcp_data_plane && link == v1::DATA_LINK_SHARED_MEMORY;
  clients.split_tensors = strategy.ps_split();
  clients.half_precision = strategy.push_compression() == v1::PUSH_COMPRESSION_FP16;
  if (clients.half_precision && ServerDecidesPulls(strategy.consistency())) {
    // A PDP round's push goes over gRPC and its pulls are pulls alone: nothing would be 16-bit.
    clients.half_precision = false;
    spdlog::warn(
        "strategy.push_compression fp16 does nothing under {}: its rounds push over "
        "gRPC and pull in 32 bits",
        Spelled(strategy.consistency()));
  }
  if (clients.half_precision && !clients.tcp_data_plane) {
    spdlog::warn(
        "strategy.push_compression fp16 needs the plain-TCP data plane ({}); push/pull goes "
        "over gRPC in 32 bits",
        ChannelsUseTls() ? "TLS is on, and it is not encrypted" : "strategy.ps_link is grpc");
  }
  return clients;
}

absl::Status RunWorker(const WorkerOptions& options) {
  if (options.job.strategy().kind() == v1::STRATEGY_KIND_STREAM) return RunStreamReplica(options);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<MetricsEndpoint> metrics_endpoint,
                          MetricsEndpoint::Start(options.metrics));
  STRATA_ASSIGN_OR_RETURN(Dataset dataset, LoadDataset(DatasetOptionsFor(options.job)));
  auto shared = std::make_shared<const Dataset>(std::move(dataset));

  TrainerOptions trainer_options = TrainerOptions::ForWorker(options.job);
  STRATA_ASSIGN_OR_RETURN(trainer_options.shard, LoadShard(options, shared->train.size()));
  ConfigureTorchThreads(trainer_options.threads);
  // Every replica starts from the same weights: the model seed is the job's, not the rank's; the
  // data order differs because the shards differ.
  STRATA_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(trainer_options, shared));

  const double world = std::max(options.world(), 1);
  WorkerMetrics metrics(
      metrics_endpoint->registry(), options.rank,
      2 * (world - 1) / world * static_cast<double>(trainer->parameter_count()) * sizeof(float));
  if (metrics_endpoint->port() > 0) {
    spdlog::info("metrics on port {} (/metrics)", metrics_endpoint->port());
  }

  WorkerState state;
  state.status.set_rank(options.rank);
  state.status.set_mode(v1::SYNC_MODE_UNSPECIFIED);
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<RingAllReduce> ring_owner, MakeWorkerRing(options));
  RingAllReduce& ring = *ring_owner;
  WorkerService service(&state, options.world(), options.run_dir,
                        [&ring](const std::string& reason) { ring.Interrupt(reason); });
  int port = 0;
  std::vector<std::string> also_listen;
  if (!options.ring_listen.empty()) also_listen.push_back(options.ring_listen);
  std::unique_ptr<grpc::Server> server =
      StartServer(options.listen, {&service, ring.service()}, &port, also_listen);
  if (!server || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen,
                                               options.ring_listen.empty() ? "" : " and ",
                                               options.ring_listen));
  }
  if (!options.port_file.empty()) {
    STRATA_RETURN_IF_ERROR(WriteFileAtomic(options.port_file, std::to_string(port) + "\n"));
  }
  spdlog::info("worker {}/{} serving on port {} ({} examples in shard, batch {})", options.rank,
               options.world(), port, trainer->shard_size(), trainer_options.batch_size);

  WorkerSynchronisers synchronisers(options, &ring, &metrics);
  TrainingLoop(options, &state, &synchronisers, &metrics).Run(*trainer);
  server->Shutdown(DeadlineAfter(std::chrono::seconds(2)));
  return absl::OkStatus();
}

}  // namespace strata
