// Trainers with the push/pull synchroniser against parameter servers, compared with the
// single-node trainer on the same data order: ASP with one worker matches it step for step, BSP
// with n workers (each computing a 1/n slice of every global batch) matches training with the
// global batch, and P=1 and P=3 servers give the same model. Every case runs over every
// PartitionLink: against real strata-ps processes over gRPC, plain TCP and shared memory, and
// against PartitionStores of this process over the in-memory link. A small Fashion-MNIST subset
// keeps it fast. All LibTorch tests of the parameter server live in this one executable
// (push_pull_in_memory_test.cc too).
#include <cmath>
#include <thread>

#include <prometheus/registry.h>

#include <gtest/gtest.h>

#include "services/common/base/status.h"
#include "services/common/config/job_spec.h"
#include "services/common/config/resolved_job.h"
#include "services/common/ml/dataset.h"
#include "services/common/ml/trainer.h"
#include "services/common/wire/half_float.h"
#include "services/common/wire/rpc.h"
#include "services/parameter_server/partition.h"
#include "services/parameter_server/ps_process.h"
#include "services/worker/in_memory_partition_link.h"
#include "services/worker/push_pull_sync.h"
#include "services/worker/worker_metrics.h"
#include "tests/integration/parameter_server/ps_test_util.h"
#include "tests/support/fashion_mnist.h"

namespace strata::testing {
namespace {

constexpr int64_t kTrainExamples = 512;
constexpr int64_t kGlobalBatch = 64;
// The milestone after epoch 1 checks that the servers drive the schedule by the global epoch.
constexpr char kTraining[] =
    "{ lr: 0.05, momentum: 0.9, weight_decay: 0.0005, batch_size: 64, epochs: 2, seed: 3,"
    " lr_schedule: { milestones: [1], gamma: 0.5 } }";

std::shared_ptr<const Dataset> SmallFashionMnist() {
  static std::shared_ptr<const Dataset> dataset = testing::FashionMnistSubset(kTrainExamples, 256);
  return dataset;
}

TrainerOptions Options(int64_t batch) {
  TrainerOptions o;
  o.arch = v1::MODEL_ARCH_MLP;
  o.batch_size = batch;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.weight_decay = 0.0005;
  o.lr_milestones = {1};
  o.lr_gamma = 0.5;
  o.seed = 3;
  o.threads = 1;
  return o;
}

std::unique_ptr<Trainer> MakeTrainer(int64_t batch, v1::ModelArch arch = v1::MODEL_ARCH_MLP) {
  TrainerOptions options = Options(batch);
  options.arch = arch;
  auto t = Trainer::Create(options, SmallFashionMnist());
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

float MaxDifference(Trainer& a, Trainer& b) {
  float worst = 0;
  const float* pa = a.parameter_data();
  const float* pb = b.parameter_data();
  for (int64_t i = 0; i < a.parameter_count(); ++i)
    worst = std::max(worst, std::fabs(pa[i] - pb[i]));
  return worst;
}

// Batches [first, end) of epoch 0: local SGD on `reference`, push/pull on `worker`; after each
// step the two models agree.
void StepBesideTheReference(Trainer& reference, Trainer& worker, Synchroniser& sync, int64_t first,
                            int64_t end) {
  for (int64_t b = first; b < end; ++b) {
    ASSERT_TRUE(reference.ComputeGradients(b).ok());
    reference.ApplyGradients(reference.SgdFor(0));
    auto stats = worker.ComputeGradients(b);
    ASSERT_TRUE(stats.ok());
    absl::Status synced = sync.Step(worker, {0, b, stats->examples}).status();
    ASSERT_TRUE(synced.ok()) << synced;
    ASSERT_LT(MaxDifference(reference, worker), 1e-6f) << "step " << b;
  }
}

// How the workers' push/pull travels: gRPC streams, the plain-TCP data plane, or that plane with
// the tensors in shared memory (the servers run on this host), to strata-ps processes; or the
// in-memory link, to PartitionStores of this process.
enum class Link { kGrpc, kTcp, kSharedMemory, kInMemory };

std::string LinkName(const ::testing::TestParamInfo<Link>& info) {
  switch (info.param) {
    case Link::kGrpc:
      return "Grpc";
    case Link::kTcp:
      return "PlainTcp";
    case Link::kSharedMemory:
      return "SharedMemory";
    case Link::kInMemory:
      return "InMemory";
  }
  return "Unknown";
}

void UseLink(Link link, PartitionClientsOptions* clients) {
  clients->tcp_data_plane = link == Link::kTcp || link == Link::kSharedMemory;
  clients->shared_memory = link == Link::kSharedMemory;
}

// The servers of one test: their addresses (names, in memory) and, in memory, the stores.
struct Servers {
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<ParameterPartition>> stores;
  std::unique_ptr<InMemoryPartitionServers> in_memory;
  size_t size() const { return addresses.size(); }
};

class PsTrainingTest : public ::testing::TestWithParam<Link> {
 protected:
  static void SetUpTestSuite() { ConfigureTorchThreads(1); }
  void SetUp() override {
    ASSERT_NE(SmallFashionMnist(), nullptr);
    config_ = WriteJobSpec(dir_, kTraining);
  }

  // P servers holding `trainer`'s model.
  Servers& LaunchServers(Trainer& trainer, int partitions, int workers,
                         const std::string& consistency) {
    const std::string checkpoint = dir_ / absl::StrCat("init-", launched_.size(), ".ckpt");
    EXPECT_TRUE(WriteCheckpoint(checkpoint, trainer.ToCheckpoint(0, 0, 0)).ok());
    return StartServers(checkpoint, partitions, workers, consistency);
  }

  // P servers, loaded from `checkpoint` or, if it is empty, idle (LoadInto loads them).
  Servers& StartServers(const std::string& checkpoint, int partitions, int workers,
                        const std::string& consistency) {
    launched_.push_back(std::make_unique<Servers>());
    Servers& servers = *launched_.back();
    if (GetParam() == Link::kInMemory) {
      // The job strata-ps would read from the same flags (ps_main.cc), with no sample budget.
      auto job = LoadJobSpec(config_, {absl::StrCat("cluster.parameter_servers=", partitions),
                                       absl::StrCat("cluster.workers=", workers),
                                       "strategy.consistency=" + consistency});
      EXPECT_TRUE(job.ok()) << job.status();
      if (!job.ok()) return servers;
      std::vector<PartitionStore*> stores;
      for (int p = 0; p < partitions; ++p) {
        auto config = PartitionConfigFor(*job, p, kTrainExamples);
        EXPECT_TRUE(config.ok()) << config.status();
        if (!config.ok()) return servers;
        config->sample_budget = 0;
        servers.stores.push_back(std::make_unique<ParameterPartition>(*config));
        stores.push_back(servers.stores.back().get());
        servers.addresses.push_back(absl::StrCat("in-memory-", p));
      }
      servers.in_memory = std::make_unique<InMemoryPartitionServers>(stores);
      for (int p = 0; !checkpoint.empty() && p < partitions; ++p) {
        EXPECT_TRUE(LoadInto(servers, p, checkpoint).ok());
      }
      return servers;
    }
    for (int p = 0; p < partitions; ++p) {
      PsProcessOptions o;
      o.binary = STRATA_PS_BINARY;
      o.work_dir = dir_.path();
      o.config = config_;
      o.partition = p;
      o.partitions = partitions;
      o.workers = workers;
      o.consistency = consistency;
      o.train_examples = kTrainExamples;
      if (checkpoint.empty()) {
        o.extra_args = {"--run-dir", dir_.path()};  // LoadCheckpoint takes paths inside it only
      } else {
        o.init_checkpoint = checkpoint;
      }
      auto ps = PsProcess::Launch(o);
      EXPECT_TRUE(ps.ok()) << ps.status();
      if (!ps.ok()) return servers;
      servers.addresses.push_back((*ps)->address());
      processes_.push_back(std::move(*ps));
    }
    return servers;
  }

  // Server p loads the checkpoint at `path` (LoadCheckpoint); returns the version it then holds.
  absl::StatusOr<int64_t> LoadInto(Servers& servers, int p, const std::string& path) {
    if (GetParam() == Link::kInMemory) {
      STRATA_ASSIGN_OR_RETURN(const Checkpoint checkpoint, ReadCheckpoint(path));
      STRATA_RETURN_IF_ERROR(servers.stores[p]->Load(checkpoint, path));
      return servers.stores[p]->Status().version;
    }
    auto stub = Connect(servers.addresses[p]);
    grpc::ClientContext context;
    context.set_deadline(TestDeadline());
    v1::CheckpointRequest request;
    request.set_path(path);
    v1::CheckpointReply reply;
    const grpc::Status loaded = stub->LoadCheckpoint(&context, request, &reply);
    if (!loaded.ok()) return FromGrpcStatus(loaded, "LoadCheckpoint");
    return reply.version();
  }

  // What server p says about itself (GetStatus; in memory, the store's own status).
  v1::ServerStatus StatusOf(const Servers& servers, int p) {
    if (GetParam() != Link::kInMemory) return GetStatus(*Connect(servers.addresses[p]));
    const PartitionStatus s = servers.stores[p]->Status();
    v1::ServerStatus status;
    status.set_version(s.version);
    status.set_completed_epochs(s.completed_epochs);
    status.set_lr(s.lr);
    return status;
  }

  PushPullOptions SyncOptions(const Servers& servers, int rank) {
    PushPullOptions o;
    o.clients.servers = servers.addresses;
    o.clients.rank = rank;
    UseLink(GetParam(), &o.clients);
    if (servers.in_memory) o.clients.make_link = servers.in_memory->LinkFactory();
    return o;
  }

  std::unique_ptr<Synchroniser> Sync(const Servers& servers, int rank, Trainer& trainer) {
    auto s = MakePushPullSynchroniser(SyncOptions(servers, rank), trainer);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  // Trains n workers under BSP against P servers for two epochs; each step, worker i computes the
  // i-th slice of the reference's global batch. Returns worker 0's trainer; checks the reference
  // (local SGD on the global batch) after every step.
  std::unique_ptr<Trainer> RunBsp(int workers, int partitions) {
    auto reference = MakeTrainer(kGlobalBatch);
    std::vector<std::unique_ptr<Trainer>> trainers;
    for (int w = 0; w < workers; ++w) trainers.push_back(MakeTrainer(kGlobalBatch / workers));
    Servers& servers = LaunchServers(*trainers[0], partitions, workers, "bsp");
    if (servers.size() != static_cast<size_t>(partitions)) return nullptr;
    std::vector<std::unique_ptr<Synchroniser>> syncs;
    for (int w = 0; w < workers; ++w) {
      syncs.push_back(Sync(servers, w, *trainers[w]));
      absl::Status started = syncs[w]->Start(*trainers[w]);
      EXPECT_TRUE(started.ok()) << started;
    }
    int64_t step = 0;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      reference->StartEpoch(epoch);
      for (int64_t b = 0; b < reference->batches_per_epoch(); ++b, ++step) {
        const std::vector<int64_t> batch = reference->BatchExamples(b);
        EXPECT_EQ(batch.size() % workers, 0u);
        EXPECT_TRUE(reference->ComputeGradients(b).ok());
        reference->ApplyGradients(reference->SgdFor(static_cast<double>(epoch)));
        std::vector<absl::Status> results(workers);
        std::vector<std::thread> threads;
        const size_t slice = batch.size() / workers;
        for (int w = 0; w < workers; ++w) {
          threads.emplace_back([&, w] {
            std::vector<int64_t> mine(batch.begin() + w * slice, batch.begin() + (w + 1) * slice);
            auto stats = trainers[w]->ComputeGradientsOn(mine);
            if (!stats.ok()) {
              results[w] = stats.status();
              return;
            }
            results[w] = syncs[w]
                             ->Step(*trainers[w], {epoch, step, static_cast<int64_t>(mine.size())})
                             .status();
          });
        }
        for (auto& t : threads) t.join();
        for (const auto& r : results) EXPECT_TRUE(r.ok()) << r;
        for (int w = 1; w < workers; ++w)
          EXPECT_EQ(MaxDifference(*trainers[0], *trainers[w]), 0.0f);
        EXPECT_LT(MaxDifference(*trainers[0], *reference), 2e-5f)
            << "epoch " << epoch << " step " << b;
        if (::testing::Test::HasFailure()) return nullptr;
      }
    }
    return std::move(trainers[0]);
  }

  ScratchDir dir_;
  std::string config_;
  std::vector<std::unique_ptr<PsProcess>> processes_;
  std::vector<std::unique_ptr<Servers>> launched_;
};

TEST_P(PsTrainingTest, AspOneWorkerOneServerReproducesSingleNodeSgdStepForStep) {
  auto reference = MakeTrainer(kGlobalBatch);
  auto worker = MakeTrainer(kGlobalBatch);
  ASSERT_TRUE(reference && worker);
  Servers& servers = LaunchServers(*worker, /*partitions=*/1, /*workers=*/1, "asp");
  ASSERT_EQ(servers.size(), 1u);
  auto sync = Sync(servers, 0, *worker);
  ASSERT_TRUE(sync);
  ASSERT_TRUE(sync->Start(*worker).ok());
  int64_t step = 0;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    reference->StartEpoch(epoch);
    worker->StartEpoch(epoch);
    for (int64_t b = 0; b < reference->batches_per_epoch(); ++b, ++step) {
      ASSERT_TRUE(reference->ComputeGradients(b).ok());
      reference->ApplyGradients(reference->SgdFor(static_cast<double>(epoch)));
      auto stats = worker->ComputeGradients(b);
      ASSERT_TRUE(stats.ok());
      absl::Status synced = sync->Step(*worker, {epoch, step, stats->examples}).status();
      ASSERT_TRUE(synced.ok()) << synced;
      ASSERT_LT(MaxDifference(*reference, *worker), 1e-6f) << "epoch " << epoch << " step " << b;
    }
  }
  const v1::ServerStatus s = StatusOf(servers, 0);
  EXPECT_EQ(s.version(), step);
  EXPECT_EQ(s.completed_epochs(), 2);
  EXPECT_FLOAT_EQ(s.lr(), 0.025f) << "the milestone after epoch 1 halves the lr";
  // Under shm every exchange went through the region (the server is on this host), else none.
  EXPECT_EQ(s.shared_memory_exchanges(), GetParam() == Link::kSharedMemory ? step : 0);
}

TEST_P(PsTrainingTest, BspTwoWorkersReproduceTheGlobalBatchAndThreeServersGiveTheSameModel) {
  auto one = RunBsp(/*workers=*/2, /*partitions=*/1);
  ASSERT_TRUE(one);
  auto three = RunBsp(/*workers=*/2, /*partitions=*/3);
  ASSERT_TRUE(three);
  EXPECT_LT(MaxDifference(*one, *three), 1e-6f);
}

TEST_P(PsTrainingTest, BspFourWorkersReproduceTheGlobalBatch) {
  ASSERT_TRUE(RunBsp(/*workers=*/4, /*partitions=*/2));
}

// The switch's handover: a worker's whole-model checkpoint (weights, buffers and momentum) is
// loaded by idle servers, each keeping its partition; a push/pull worker then continues exactly
// where local SGD would have gone, which needs the momentum to have come along.
TEST_P(PsTrainingTest, HandoverFromAWorkerCheckpointContinuesTheOptimizer) {
  auto reference = MakeTrainer(kGlobalBatch);
  auto worker = MakeTrainer(kGlobalBatch);
  ASSERT_TRUE(reference && worker);
  reference->StartEpoch(0);
  for (int64_t b = 0; b < 4; ++b) {
    ASSERT_TRUE(reference->ComputeGradients(b).ok());
    reference->ApplyGradients(reference->SgdFor(0));
  }
  const std::string handover = dir_ / "handover.ckpt";
  ASSERT_TRUE(WriteCheckpoint(handover, reference->ToCheckpoint(0, 4, 4)).ok());

  Servers& servers = StartServers(/*checkpoint=*/"", 2, 1, "asp");  // idle
  ASSERT_EQ(servers.size(), 2u);
  for (int p = 0; p < 2; ++p) {
    absl::StatusOr<int64_t> version = LoadInto(servers, p, handover);
    ASSERT_TRUE(version.ok()) << version.status();
    EXPECT_EQ(*version, 4);
  }
  auto sync = Sync(servers, 0, *worker);
  ASSERT_TRUE(sync);
  ASSERT_TRUE(sync->Start(*worker).ok());
  EXPECT_EQ(MaxDifference(*reference, *worker), 0.0f) << "Start pulls the handed-over model";
  worker->StartEpoch(0);
  StepBesideTheReference(*reference, *worker, *sync, /*first=*/4, /*end=*/8);
}

TEST_P(PsTrainingTest, AServerHoldingAnotherModelIsRefusedNamingTheServer) {
  auto worker = MakeTrainer(kGlobalBatch);
  ASSERT_TRUE(worker);
  SmallModel other = SmallModel::Make();
  const std::string path = dir_ / "other.ckpt";
  ASSERT_TRUE(WriteCheckpoint(path, other.ToCheckpoint()).ok());
  Servers& servers = StartServers(path, 1, 1, "asp");
  ASSERT_EQ(servers.size(), 1u);
  auto sync = MakePushPullSynchroniser(SyncOptions(servers, 0), *worker);
  ASSERT_TRUE(sync.ok());
  absl::Status s = (*sync)->Start(*worker);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find(absl::StrCat("parameter server 0 (", servers.addresses[0], ")")),
            absl::string_view::npos)
      << s;
  // gRPC names the tensor; the data plane (and the in-memory link, which checks as it does)
  // carries no names, only the layout's fingerprint.
  EXPECT_NE(s.message().find(GetParam() != Link::kGrpc ? "different model" : "fc1.weight"),
            absl::string_view::npos)
      << s;
}

INSTANTIATE_TEST_SUITE_P(Links, PsTrainingTest,
                         ::testing::Values(Link::kGrpc, Link::kTcp, Link::kSharedMemory,
                                           Link::kInMemory),
                         LinkName);

// What only a network link can meet: a server nobody listens for, a server without a data plane.
class PsNetworkLinkTest : public PsTrainingTest {};

TEST_P(PsNetworkLinkTest, AnUnreachableServerIsNamed) {
  auto worker = MakeTrainer(kGlobalBatch);
  ASSERT_TRUE(worker);
  Servers& servers = LaunchServers(*worker, 2, 1, "asp");
  ASSERT_EQ(servers.size(), 2u);
  // Nothing listens on port 1 of loopback: partition 1 is unreachable, partition 0 answers.
  PushPullOptions o;
  o.clients.servers = {servers.addresses[0], "127.0.0.1:1"};
  o.clients.deadline = std::chrono::seconds(10);
  UseLink(GetParam(), &o.clients);
  auto sync = MakePushPullSynchroniser(o, *worker);
  ASSERT_TRUE(sync.ok());
  absl::Status s = (*sync)->Start(*worker);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("parameter server 1 (127.0.0.1:1)"), absl::string_view::npos) << s;
}

// A server that opens no data plane (its job says strategy.ps_link: grpc) answers DataPlane with
// FAILED_PRECONDITION; a worker asking for the TCP link then trains over gRPC, step for step as
// single-node SGD, instead of failing.
TEST_P(PsNetworkLinkTest, AWorkerFallsBackToGrpcWhenTheServerOffersNoDataPlane) {
  config_ =
      WriteJobSpec(dir_, kTraining, "grpc-job.yaml", "strategy: { kind: ps, ps_link: grpc }\n");
  auto reference = MakeTrainer(kGlobalBatch);
  auto worker = MakeTrainer(kGlobalBatch);
  ASSERT_TRUE(reference && worker);
  Servers& servers = LaunchServers(*worker, /*partitions=*/1, /*workers=*/1, "asp");
  ASSERT_EQ(servers.size(), 1u);
  {
    auto stub = Connect(servers.addresses[0]);
    grpc::ClientContext context;
    context.set_deadline(TestDeadline());
    v1::DataPlaneOffer offer;
    grpc::Status s = stub->DataPlane(&context, v1::DataPlaneRequest(), &offer);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  }
  auto sync = Sync(servers, 0, *worker);
  ASSERT_TRUE(sync);
  ASSERT_TRUE(sync->Start(*worker).ok());
  reference->StartEpoch(0);
  worker->StartEpoch(0);
  StepBesideTheReference(*reference, *worker, *sync, /*first=*/0, /*end=*/4);
}

INSTANTIATE_TEST_SUITE_P(Links, PsNetworkLinkTest,
                         ::testing::Values(Link::kGrpc, Link::kTcp, Link::kSharedMemory), LinkName);

// strategy.push_compression fp16 (the link's half_precision): over the plain-TCP data plane the
// gradients go up and the weights come down as 16-bit floats, while the servers keep the model in
// 32 bits. The witness is test code: a reference that trains the exact model on gradients
// computed on the 16-bit copy of it and rounded to 16 bits, as the link should; the worker must
// hold that model's 16-bit copy after every step, and its byte counters must count 2 bytes a
// value. Under shm the same option moves the tensors through memory in 32 bits, step for step
// as local SGD. Seen to fail: with the server replying in 32 bits to a 16-bit exchange, "weight 0
// after step 0 is not a 16-bit value". A worker that pushed in 32 bits would count 4 bytes a
// value.
class PsSixteenBitTest : public PsTrainingTest {
 protected:
  // Rank 0's push/pull with 16-bit exchanges asked for, counting its bytes in `metrics`,
  // started (its first pull done); null after a failure, which the test then reports.
  std::unique_ptr<Synchroniser> StartSixteenBit(const Servers& servers, Trainer& worker,
                                                WorkerMetrics* metrics) {
    PushPullOptions o = SyncOptions(servers, 0);
    o.clients.half_precision = true;
    o.metrics = metrics;
    auto sync = MakePushPullSynchroniser(o, worker);
    EXPECT_TRUE(sync.ok()) << sync.status();
    if (!sync.ok()) return nullptr;
    absl::Status started = (*sync)->Start(worker);
    EXPECT_TRUE(started.ok()) << started;
    return started.ok() ? std::move(*sync) : nullptr;
  }

  // The pushed and pulled bytes the worker's metrics counted.
  static std::pair<double, double> Bytes(prometheus::Registry& registry) {
    std::pair<double, double> bytes{-1, -1};
    for (const auto& family : registry.Collect()) {
      if (family.metric.empty()) continue;
      if (family.name == "strata_worker_push_bytes_total")
        bytes.first = family.metric[0].counter.value;
      if (family.name == "strata_worker_pull_bytes_total")
        bytes.second = family.metric[0].counter.value;
    }
    return bytes;
  }
};

// The MLP (no buffers), and ResNet-20, whose BatchNorm statistics travel as floats after the
// halves both ways; two servers, so that the model is cut over both.
TEST_P(PsSixteenBitTest, GradientsAndWeightsTravelInSixteenBitsAndTheServersKeepThirtyTwo) {
  for (const v1::ModelArch arch : {v1::MODEL_ARCH_MLP, v1::MODEL_ARCH_RESNET20}) {
    SCOPED_TRACE(Spelled(arch));
    auto reference = MakeTrainer(kGlobalBatch, arch);  // the servers' exact model
    auto view = MakeTrainer(kGlobalBatch, arch);       // what the worker computes on: its copy
    auto worker = MakeTrainer(kGlobalBatch, arch);
    ASSERT_TRUE(reference && view && worker);
    Servers& servers = LaunchServers(*worker, /*partitions=*/2, /*workers=*/1, "asp");
    ASSERT_EQ(servers.size(), 2u);
    prometheus::Registry registry;
    WorkerMetrics metrics(registry, 0, 0);
    auto sync = StartSixteenBit(servers, *worker, &metrics);
    ASSERT_TRUE(sync);
    const bool on_wire = GetParam() == Link::kTcp;
    const int64_t p = reference->parameter_count();
    const auto b = static_cast<int64_t>(reference->buffers().total_floats());
    EXPECT_EQ(b > 0, arch == v1::MODEL_ARCH_RESNET20);
    std::vector<float> view_buffers(static_cast<size_t>(b)), held_buffers(static_cast<size_t>(b));
    reference->StartEpoch(0);
    view->StartEpoch(0);
    worker->StartEpoch(0);
    const int64_t steps = 4;
    for (int64_t step = 0; step < steps; ++step) {
      std::copy_n(reference->parameter_data(), p, view->parameter_data());
      // A pull alone (Start's) is exact; every exchange's reply is 16-bit.
      if (on_wire && step > 0) RoundToHalves(view->parameter_data(), static_cast<size_t>(p));
      ASSERT_TRUE(view->ComputeGradients(step).ok());
      if (on_wire) RoundToHalves(view->gradient_data(), static_cast<size_t>(p));
      std::copy_n(view->gradient_data(), p, reference->gradient_data());
      reference->ApplyGradients(reference->SgdFor(0));

      auto stats = worker->ComputeGradients(step);
      ASSERT_TRUE(stats.ok());
      absl::Status synced = sync->Step(*worker, {0, step, stats->examples}).status();
      ASSERT_TRUE(synced.ok()) << synced;
      std::vector<float> expected(reference->parameter_data(), reference->parameter_data() + p);
      if (on_wire) RoundToHalves(expected.data(), expected.size());
      const float* held = worker->parameter_data();
      for (int64_t i = 0; i < p; ++i) {
        if (on_wire) {
          ASSERT_EQ(HalfToFloat(FloatToHalf(held[i])), held[i])
              << "weight " << i << " after step " << step << " is not a 16-bit value";
        }
        // The servers' arithmetic may differ from the trainer's in the last bit of a float, which
        // can move a value to the next half: one step of 2^-10 of its size at most. Through
        // shared memory nothing is rounded: the 1e-6 of the other tests.
        const float bound = on_wire ? std::fabs(expected[i]) * 0x1p-10f + 1e-6f : 1e-6f;
        ASSERT_LE(std::fabs(held[i] - expected[i]), bound)
            << "weight " << i << " after step " << step;
      }
      // The buffers go up and come back as floats: the worker keeps exactly what its forward pass
      // computed, as the reference's copy does.
      view->CopyBuffersTo(view_buffers.data());
      worker->CopyBuffersTo(held_buffers.data());
      ASSERT_EQ(held_buffers, view_buffers) << "after step " << step;
    }
    const auto [pushed, pulled] = Bytes(registry);
    const double value_bytes = on_wire ? 2 : 4;
    const double per_step = static_cast<double>(p) * value_bytes + static_cast<double>(b) * 4;
    EXPECT_EQ(pushed, static_cast<double>(steps) * per_step);
    EXPECT_EQ(pulled, static_cast<double>(steps) * per_step);
  }
}

// A gradient beyond a half's range goes in a 32-bit exchange, and weights beyond it come back in
// 32 bits: the worker holds the servers' large weight, not infinity.
TEST_P(PsSixteenBitTest, ValuesBeyondAHalfsRangeTravelInThirtyTwoBits) {
  auto worker = MakeTrainer(kGlobalBatch);
  ASSERT_TRUE(worker);
  Servers& servers = LaunchServers(*worker, /*partitions=*/1, /*workers=*/1, "asp");
  ASSERT_EQ(servers.size(), 1u);
  prometheus::Registry registry;
  WorkerMetrics metrics(registry, 0, 0);
  auto sync = StartSixteenBit(servers, *worker, &metrics);
  ASSERT_TRUE(sync);
  worker->StartEpoch(0);
  const int64_t p = worker->parameter_count();
  auto stats = worker->ComputeGradients(0);
  ASSERT_TRUE(stats.ok());
  // lr 0.05: a gradient of -4e6 moves weight 0 by about +2e5, beyond 65,504.
  const float before = worker->parameter_data()[0];
  worker->gradient_data()[0] = -4e6f;
  absl::Status synced = sync->Step(*worker, {0, 0, stats->examples}).status();
  ASSERT_TRUE(synced.ok()) << synced;
  const float large = worker->parameter_data()[0];
  EXPECT_TRUE(std::isfinite(large));
  EXPECT_GT(large, 65504.0f) << "was " << before;
  EXPECT_EQ(Bytes(registry).first, static_cast<double>(p) * 4) << "the push went in 32 bits";
  EXPECT_EQ(Bytes(registry).second, static_cast<double>(p) * 4) << "the reply came in 32 bits";
  // The next step's gradients are ordinary again and go in 16 bits; the weights do not.
  stats = worker->ComputeGradients(1);
  ASSERT_TRUE(stats.ok());
  synced = sync->Step(*worker, {0, 1, stats->examples}).status();
  ASSERT_TRUE(synced.ok()) << synced;
  const double value_bytes = GetParam() == Link::kTcp ? 2 : 4;  // shm: 32 bits throughout
  EXPECT_EQ(Bytes(registry).first, static_cast<double>(p) * (4 + value_bytes));
  EXPECT_EQ(Bytes(registry).second, static_cast<double>(p) * 8);
}

INSTANTIATE_TEST_SUITE_P(Links, PsSixteenBitTest,
                         ::testing::Values(Link::kTcp, Link::kSharedMemory), LinkName);

}  // namespace
}  // namespace strata::testing
