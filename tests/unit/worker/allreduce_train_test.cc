// Training with the all-reduce synchroniser, N ranks as threads of one process (each with its own
// gRPC server and Trainer), on a small Fashion-MNIST subset. Every test runs both ways of
// reducing: one operation after backward, and buckets reduced while backward runs.
#include "services/common/config/job_keys.h"
#include "services/worker/allreduce_sync.h"
#include "tests/support/fashion_mnist.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "services/collective/bucket_reduction.h"
#include "services/collective/tcp_ring_link.h"
#include "services/common/ml/dataset.h"
#include "services/common/ml/trainer.h"
#include "services/common/wire/rpc.h"

namespace strata {
namespace {

std::shared_ptr<const Dataset> FashionMnist(size_t max_train) {
  return testing::FashionMnistSubset(max_train, 100);
}

struct Replica {
  std::unique_ptr<RingAllReduce> ring;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<Synchroniser> sync;
};

// After backward in one operation (0), and in buckets small enough to cut every test model in
// several (the MLP in 2, ResNet-20 in about 20) while backward runs.
constexpr size_t kBucketSizes[] = {0, 16 << 10};

// The ring's links (strategy.ring_link): the TCP link applies what it receives in place itself,
// so the equivalence and bit-identity tests run over both.
enum class Link { kGrpc, kTcp };
constexpr Link kLinks[] = {Link::kGrpc, Link::kTcp};
const char* LinkName(Link link) { return link == Link::kTcp ? "tcp link" : "grpc link"; }

// n replicas of `options` (seed + rank, so that Start() has something to agree on), connected.
std::vector<Replica> MakeReplicas(int n, TrainerOptions options,
                                  std::shared_ptr<const Dataset> data, bool own_seeds,
                                  size_t bucket_bytes = 0,
                                  std::chrono::milliseconds deadline = std::chrono::seconds(120),
                                  Link link = Link::kGrpc) {
  std::vector<Replica> replicas(n);
  std::vector<std::string> peers;
  for (int r = 0; r < n; ++r) {
    if (link == Link::kTcp) {
      auto tcp = TcpRingLink::Create(TcpRingLinkOptions{});
      EXPECT_TRUE(tcp.ok()) << tcp.status();
      replicas[r].ring = std::make_unique<RingAllReduce>(r, std::move(*tcp));
    } else {
      replicas[r].ring = std::make_unique<RingAllReduce>(r);
    }
    int port = 0;
    replicas[r].server = StartServer("127.0.0.1:0", {replicas[r].ring->service()}, &port);
    peers.push_back(absl::StrCat("127.0.0.1:", port));
    TrainerOptions o = options;
    if (own_seeds) o.seed = options.seed + r;
    auto trainer = Trainer::Create(o, data);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    replicas[r].trainer = std::move(*trainer);
  }
  AllReduceSyncOptions sync_options;
  sync_options.ring.deadline = deadline;
  sync_options.bucket_bytes = bucket_bytes;
  for (auto& replica : replicas) {
    EXPECT_TRUE(replica.ring->Connect(peers).ok());
    auto sync = MakeAllReduceSynchroniser(replica.ring.get(), sync_options);
    EXPECT_TRUE(sync.ok()) << sync.status();
    replica.sync = std::move(*sync);
  }
  return replicas;
}

void OnAllRanks(int n, const std::function<absl::Status(int)>& fn) {
  std::vector<std::future<absl::Status>> futures;
  for (int r = 0; r < n; ++r) futures.push_back(std::async(std::launch::async, fn, r));
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(futures[r].wait_for(std::chrono::seconds(300)), std::future_status::ready)
        << "rank " << r << " hangs";
    absl::Status status = futures[r].get();
    ASSERT_TRUE(status.ok()) << "rank " << r << ": " << status;
  }
}

std::vector<float> Parameters(Trainer& t) {
  return std::vector<float>(t.parameter_data(), t.parameter_data() + t.parameters().total_floats());
}
std::vector<float> Buffers(const Trainer& t) {
  std::vector<float> out(t.buffers().total_floats());
  t.CopyBuffersTo(out.data());
  return out;
}

void ExpectBitIdentical(std::vector<Replica>& replicas, const std::string& when) {
  const std::vector<float> p0 = Parameters(*replicas[0].trainer),
                           b0 = Buffers(*replicas[0].trainer);
  for (size_t r = 1; r < replicas.size(); ++r) {
    const std::vector<float> p = Parameters(*replicas[r].trainer),
                             b = Buffers(*replicas[r].trainer);
    ASSERT_EQ(p.size(), p0.size());
    EXPECT_EQ(std::memcmp(p.data(), p0.data(), p.size() * sizeof(float)), 0)
        << "parameters of rank " << r << " differ " << when;
    EXPECT_EQ(std::memcmp(b.data(), b0.data(), b.size() * sizeof(float)), 0)
        << "buffers of rank " << r << " differ " << when;
  }
}

// n workers with batch B/n each, every global batch split in n slices, reproduce single-node
// training with batch B (MLP: no BatchNorm, so only float rounding differs).
TEST(AllReduceTraining, MlpWithNWorkersReproducesSingleNodeBatch) {
  ConfigureTorchThreads(1);
  auto data = FashionMnist(1024);
  ASSERT_NE(data, nullptr);
  TrainerOptions options;
  options.arch = v1::MODEL_ARCH_MLP;
  options.batch_size = 96;
  options.lr = 0.05;
  options.momentum = 0.9;
  options.weight_decay = 5e-4;
  options.augment = false;
  const int steps = 6;

  auto single = Trainer::Create(options, data);
  ASSERT_TRUE(single.ok()) << single.status();
  Trainer& reference = **single;
  reference.StartEpoch(0);
  for (int b = 0; b < steps; ++b) {
    ASSERT_TRUE(reference.ComputeGradients(b).ok());
    reference.ApplyGradients(reference.SgdFor(0));
  }
  const std::vector<float> expected = Parameters(reference);

  for (const Link link : kLinks) {
    for (const size_t bucket_bytes : kBucketSizes) {
      for (int n : {2, 3, 4}) {
        SCOPED_TRACE(
            absl::StrCat(n, " workers, buckets of ", bucket_bytes, " bytes, ", LinkName(link)));
        std::vector<Replica> replicas = MakeReplicas(n, options, data, /*own_seeds=*/false,
                                                     bucket_bytes, std::chrono::seconds(120), link);
        OnAllRanks(n, [&](int r) -> absl::Status {
          Trainer& t = *replicas[r].trainer;
          absl::Status started = replicas[r].sync->Start(t);
          if (!started.ok()) return started;
          t.StartEpoch(0);
          for (int b = 0; b < steps; ++b) {
            const std::vector<int64_t> batch = t.BatchExamples(b);  // the single node's batch b
            const size_t per = batch.size() / n;
            std::vector<int64_t> mine(batch.begin() + r * per, batch.begin() + (r + 1) * per);
            auto stats = t.ComputeGradientsOn(mine);
            if (!stats.ok()) return stats.status();
            StepContext context;
            context.epoch = 0;
            context.step = b;
            context.batch_examples = static_cast<int64_t>(mine.size());
            absl::Status stepped = replicas[r].sync->Step(t, context).status();
            if (!stepped.ok()) return stepped;
          }
          return absl::OkStatus();
        });
        ExpectBitIdentical(replicas, "after training");
        const std::vector<float> got = Parameters(*replicas[0].trainer);
        ASSERT_EQ(got.size(), expected.size());
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          worst = std::max(worst, std::abs(static_cast<double>(got[i]) - expected[i]) /
                                      (1e-3 + std::abs(expected[i])));
        }
        EXPECT_LT(worst, 1e-3) << "largest relative difference to single-node training";
      }
    }
  }
}

// Starts every replica and trains `steps` steps of batch 8, each rank on its own slice of the
// data (a stride of the data set, as with real shards); `check` runs after Start and after each
// step with what it follows.
void TrainSteps(std::vector<Replica>& replicas, int steps,
                const std::function<void(const std::string&)>& check = {}) {
  const int n = static_cast<int>(replicas.size());
  OnAllRanks(n, [&](int r) { return replicas[r].sync->Start(*replicas[r].trainer); });
  if (check) check("after Start");
  for (int r = 0; r < n; ++r) replicas[r].trainer->StartEpoch(0);
  for (int b = 0; b < steps; ++b) {
    OnAllRanks(n, [&](int r) -> absl::Status {
      Trainer& t = *replicas[r].trainer;
      std::vector<int64_t> mine;
      for (int64_t i = 0; i < 8; ++i) mine.push_back((b * 8 + i) * n + r);
      auto stats = t.ComputeGradientsOn(mine);
      if (!stats.ok()) return stats.status();
      StepContext context;
      context.step = b;
      return replicas[r].sync->Step(t, context).status();
    });
    if (check) check(absl::StrCat("after step ", b + 1));
  }
}

// With BatchNorm the running statistics are averaged too: replicas started from different
// seeds and fed different data are bit-identical after Start and after every step.
TEST(AllReduceTraining, ResNetReplicasAreBitIdenticalAfterEveryStep) {
  ConfigureTorchThreads(1);
  auto data = FashionMnist(96);
  ASSERT_NE(data, nullptr);
  TrainerOptions options;
  options.arch = v1::MODEL_ARCH_RESNET20;
  options.batch_size = 8;
  options.lr = 0.05;
  options.momentum = 0.9;
  options.augment = false;
  const int n = 3, steps = 3;
  for (const Link link : kLinks) {
    for (const size_t bucket_bytes : kBucketSizes) {
      SCOPED_TRACE(absl::StrCat("buckets of ", bucket_bytes, " bytes, ", LinkName(link)));
      std::vector<Replica> replicas = MakeReplicas(n, options, data, /*own_seeds=*/true,
                                                   bucket_bytes, std::chrono::seconds(120), link);
      ASSERT_GT(replicas[0].trainer->buffers().total_floats(), 0u);
      TrainSteps(replicas, steps,
                 [&](const std::string& when) { ExpectBitIdentical(replicas, when); });
    }
  }
}

// The switch vote travels with each step's gradients: every rank gets the same outcome, yes only
// when every rank voted yes. Both reduction paths: in place (MLP) and staged with BatchNorm
// statistics (ResNet-20).
TEST(AllReduceTraining, TheSwitchVoteIsYesOnEveryRankOnlyWhenEveryRankVotesYes) {
  ConfigureTorchThreads(1);
  auto data = FashionMnist(96);
  ASSERT_NE(data, nullptr);
  // Who votes yes at each step, rank by rank.
  const std::vector<std::vector<bool>> votes = {{false, false, false}, {true, false, false},
                                                {true, true, false},   {true, true, true},
                                                {false, true, true},   {true, true, true}};
  for (const size_t bucket_bytes : kBucketSizes) {
    for (const std::string arch : {"mlp", "resnet20"}) {
      SCOPED_TRACE(absl::StrCat(arch, ", buckets of ", bucket_bytes, " bytes"));
      TrainerOptions options;
      options.arch = *EnumFromSpelling<v1::ModelArch>(arch);
      options.batch_size = 8;
      options.augment = false;
      const int n = 3;
      std::vector<Replica> replicas =
          MakeReplicas(n, options, data, /*own_seeds=*/true, bucket_bytes);
      OnAllRanks(n, [&](int r) { return replicas[r].sync->Start(*replicas[r].trainer); });
      for (size_t step = 0; step < votes.size(); ++step) {
        std::vector<int> outcome(n, -1);
        OnAllRanks(n, [&](int r) -> absl::Status {
          Trainer& t = *replicas[r].trainer;
          std::vector<int64_t> mine;
          for (int64_t i = 0; i < 8; ++i) mine.push_back((static_cast<int64_t>(step) * 8 + i) % 96);
          auto stats = t.ComputeGradientsOn(mine);
          if (!stats.ok()) return stats.status();
          StepContext context;
          context.step = static_cast<int64_t>(step);
          context.ready_to_switch = votes[step][r];
          auto stepped = replicas[r].sync->Step(t, context);
          if (!stepped.ok()) return stepped.status();
          outcome[r] = stepped->all_ready_to_switch ? 1 : 0;
          return absl::OkStatus();
        });
        const bool all_yes = votes[step][0] && votes[step][1] && votes[step][2];
        for (int r = 0; r < n; ++r) {
          EXPECT_EQ(outcome[r], all_yes ? 1 : 0) << "step " << step << ", rank " << r;
        }
      }
      // The vote does not leak into the model: the replicas still agree bit for bit.
      ExpectBitIdentical(replicas, "after the voting steps");
    }
  }
}

// With 2 ranks every average is (a + b) / 2 whichever rank adds, so buckets must give exactly the
// model of one operation after backward: nothing lost, doubled or mixed up between buckets.
TEST(AllReduceTraining, BucketsGiveExactlyTheModelOfOneOperationWithTwoRanks) {
  ConfigureTorchThreads(1);
  auto data = FashionMnist(96);
  ASSERT_NE(data, nullptr);
  TrainerOptions options;
  options.arch = v1::MODEL_ARCH_RESNET20;
  options.batch_size = 8;
  options.lr = 0.05;
  options.momentum = 0.9;
  options.augment = false;
  std::vector<std::vector<float>> models;
  for (const size_t bucket_bytes : kBucketSizes) {
    std::vector<Replica> replicas =
        MakeReplicas(2, options, data, /*own_seeds=*/true, bucket_bytes);
    TrainSteps(replicas, 3);
    ExpectBitIdentical(replicas, "after training");
    models.push_back(Parameters(*replicas[0].trainer));
  }
  ASSERT_EQ(models[0].size(), models[1].size());
  EXPECT_EQ(std::memcmp(models[0].data(), models[1].data(), models[0].size() * sizeof(float)), 0)
      << "buckets changed the averaged model";
}

// A rank that never takes part: the first bucket's operation fails within the deadline, and the
// step's error names the bucket and the silent rank.
TEST(AllReduceTraining, ABucketWaitingForADeadPeerFailsInTimeNamingIt) {
  ConfigureTorchThreads(1);
  auto data = FashionMnist(96);
  ASSERT_NE(data, nullptr);
  TrainerOptions options;
  options.arch = v1::MODEL_ARCH_MLP;
  options.batch_size = 8;
  options.augment = false;
  std::vector<Replica> replicas =
      MakeReplicas(2, options, data, /*own_seeds=*/false, 16 << 10, std::chrono::seconds(3));
  // Both start (the broadcast needs both), then rank 1 goes away for good.
  OnAllRanks(2, [&](int r) { return replicas[r].sync->Start(*replicas[r].trainer); });
  replicas[1].sync.reset();
  replicas[1].server->Shutdown();
  Trainer& t = *replicas[0].trainer;
  t.StartEpoch(0);
  const auto began = std::chrono::steady_clock::now();
  ASSERT_TRUE(t.ComputeGradientsOn({0, 1, 2, 3, 4, 5, 6, 7}).ok());
  StepContext context;
  const absl::Status stepped = replicas[0].sync->Step(t, context).status();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  ASSERT_FALSE(stepped.ok());
  EXPECT_NE(stepped.message().find("gradient bucket 1 of 2"), std::string::npos) << stepped;
  EXPECT_NE(stepped.message().find("rank 1"), std::string::npos) << stepped;
  EXPECT_LT(waited, 60) << "the 3 s deadline was not kept";  // generous: a loaded machine
}

TEST(PlanGradientBuckets, WholeParametersFromTheLastToTheFirstCoveringTheBufferOnce) {
  std::vector<TensorSpec> specs;
  for (int64_t n : {100, 10, 300, 30, 50}) {
    specs.push_back({absl::StrCat("t", specs.size()), {n}, DType::kFloat32});
  }
  const absl::StatusOr<FlatLayout> made = FlatLayout::Create(specs);
  ASSERT_TRUE(made.ok()) << made.status();
  const FlatLayout& layout = *made;
  // 120 floats = 480 bytes per bucket at least.
  const std::vector<GradientBucket> buckets = PlanGradientBuckets(layout, 480);
  ASSERT_EQ(buckets.size(), 2u);
  // Parameters 4 and 3 (80 floats) are not enough; 4, 3, 2 are.
  EXPECT_EQ(buckets[0].first_param, 2u);
  EXPECT_EQ(buckets[0].params, 3u);
  EXPECT_EQ(buckets[0].begin, 110u);
  EXPECT_EQ(buckets[0].end, 490u);
  // Then 1 and 0 (110 floats): the remainder.
  EXPECT_EQ(buckets[1].first_param, 0u);
  EXPECT_EQ(buckets[1].params, 2u);
  EXPECT_EQ(buckets[1].begin, 0u);
  EXPECT_EQ(buckets[1].end, 110u);
  const std::vector<GradientBucket> one = PlanGradientBuckets(layout, 0);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].begin, 0u);
  EXPECT_EQ(one[0].end, 490u);
  EXPECT_EQ(one[0].params, 5u);
}

}  // namespace
}  // namespace strata
