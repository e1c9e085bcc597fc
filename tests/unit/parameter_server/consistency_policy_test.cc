// The consistency modes in process, without gRPC: each policy's decisions on hand-made states,
// and ParameterPartition (store + policy) against references the test computes itself with
// plain loops (SGD with momentum: d = g + wd * p; v = m * v + d; p -= lr * v).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "services/parameter_server/consistency_policy.h"
#include "services/parameter_server/partition.h"

namespace strata {
namespace {

constexpr float kLr = 0.1f, kMomentum = 0.9f, kWeightDecay = 0.01f;

// A small model: two parameters and one buffer (BatchNorm-like statistics).
const std::vector<TensorSpec>& ModelSpecs() {
  static const std::vector<TensorSpec> specs = {{"fc.weight", {3, 4}, DType::kFloat32},
                                                {"fc.bias", {4}, DType::kFloat32},
                                                {"bn.mean", {2}, DType::kFloat32}};
  return specs;
}
constexpr size_t kParameterFloats = 16, kTotalFloats = 18;

std::vector<float> InitialModel() {
  std::vector<float> v(kTotalFloats);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f - 0.07f * static_cast<float>(i);
  return v;
}

Checkpoint CheckpointOf(const std::vector<float>& flat, int64_t version) {
  Checkpoint c;
  c.version = version;
  size_t offset = 0;
  for (const TensorSpec& spec : ModelSpecs()) {
    NamedTensor t = NamedTensor::Zeros(spec);
    std::memcpy(t.floats(), flat.data() + offset, spec.bytes());
    offset += static_cast<size_t>(spec.numel());
    c.entries.push_back({spec.name == "bn.mean" ? TensorKind::kBuffer : TensorKind::kParameter, t});
  }
  return c;
}

PartitionConfig Config(v1::Consistency mode, int workers) {
  PartitionConfig c;
  c.workers = workers;
  c.consistency = mode;
  c.staleness = 1;
  c.lr = kLr;
  c.lr_scale = 1.0;
  c.momentum = kMomentum;
  c.weight_decay = kWeightDecay;
  c.train_examples = 1000;
  return c;
}

WaitOptions Patient() {  // a safety net against hangs, not a timing assertion
  WaitOptions w;
  w.deadline = std::chrono::system_clock::now() + std::chrono::seconds(60);
  return w;
}

// `values`: gradients of the parameters, then the buffers, in model order.
absl::StatusOr<int64_t> PushFlat(ParameterPartition& p, int worker, int64_t version,
                                 const std::vector<float>& values, const WaitOptions& wait,
                                 double lr = 0, int64_t samples = 4) {
  auto staging = p.NewStaging();
  if (!staging.ok()) return staging.status();
  size_t offset = 0;
  for (const TensorSpec& spec : ModelSpecs()) {
    auto dst = (*staging)->Destination(spec);
    if (!dst.ok()) return dst.status();
    std::memcpy(*dst, values.data() + offset, spec.bytes());
    offset += static_cast<size_t>(spec.numel());
  }
  if (absl::Status s = (*staging)->Validate(); !s.ok()) return s;
  PushMeta meta{worker, version, /*clock=*/0, samples, lr};
  return p.Push(meta, **staging, wait);
}

std::vector<float> Flat(const PullSnapshot& s) { return *s.values; }

// The gradient of 0.5 * |p - target|^2 plus a worker-dependent term, and buffers that
// differ per worker and step, so that averaging and replacing are both visible.
std::vector<float> GradientAt(const std::vector<float>& model, int worker, int step) {
  std::vector<float> g(kTotalFloats);
  for (size_t i = 0; i < kParameterFloats; ++i) {
    const float target = 0.01f * static_cast<float>(i) - 0.2f * static_cast<float>(worker);
    g[i] = model[i] - target + 0.03f * static_cast<float>(step % 3);
  }
  for (size_t i = kParameterFloats; i < kTotalFloats; ++i) {
    g[i] = static_cast<float>(worker + 1) * 0.5f + static_cast<float>(step);
  }
  return g;
}

// Reference SGD with momentum over the parameters; the buffers are replaced by `update`'s.
void ReferenceStep(std::vector<float>& model, std::vector<float>& velocity,
                   const std::vector<float>& update, float lr) {
  for (size_t i = 0; i < kParameterFloats; ++i) {
    const float d = update[i] + kWeightDecay * model[i];
    velocity[i] = kMomentum * velocity[i] + d;
    model[i] -= lr * velocity[i];
  }
  for (size_t i = kParameterFloats; i < kTotalFloats; ++i) model[i] = update[i];
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, int step) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5f * std::max(1.0f, std::fabs(want[i])))
        << "step " << step << " element " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// The policies alone.

TEST(ConsistencyNamesTest, EveryModeHasOneNameThatParsesBackAndAPolicy) {
  for (const std::string name : {"asp", "bsp", "ssp", "pdp", "apdp"}) {
    std::optional<v1::Consistency> mode = EnumFromSpelling<v1::Consistency>(name);
    ASSERT_TRUE(mode.has_value()) << name;
    EXPECT_EQ(Spelled(*mode), name);
    EXPECT_NE(MakeConsistencyPolicy(*mode, {3, 1, 0.2, 0.5}), nullptr) << name;
  }
  EXPECT_FALSE(EnumFromSpelling<v1::Consistency>("tap").has_value());
  EXPECT_EQ(MakeConsistencyPolicy(v1::CONSISTENCY_UNSPECIFIED, {3, 1, 0.2, 0.5}), nullptr);
}

TEST(AspPolicyTest, AppliesEveryPushAndNeverHoldsAReader) {
  auto asp = MakeConsistencyPolicy(v1::CONSISTENCY_ASP, {3, 1, 0.2, 0.5});
  const std::vector<int64_t> clocks = {9, 0, 4};
  const PartitionProgress progress{7, clocks};
  EXPECT_EQ(asp->mode(), v1::CONSISTENCY_ASP);
  EXPECT_EQ(asp->DecidePush({1, 7, 0, 4, 0}, progress).action, PushAction::kApply);
  EXPECT_EQ(asp->DecidePush({0, 2, 0, 4, 0.3}, progress).action, PushAction::kApply);
  for (int w = 0; w < 3; ++w) EXPECT_TRUE(asp->MayRead(w, progress)) << w;
  EXPECT_DOUBLE_EQ(asp->BaseLearningRate(), 0.2 * 0.5);  // one worker's batch: lr * lr_scale
  const float values[2] = {1, 2};
  EXPECT_EQ(asp->Accumulate({0, 7, 0, 4, 0}, values, 2).status().code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(asp->ReadWaitText(2, 9, progress), "pull of worker 2 waited for version 9 (at 7)");
}

TEST(SspPolicyTest, HoldsOnlyAReaderMoreThanStalenessClocksAheadOfTheSlowest) {
  auto ssp = MakeConsistencyPolicy(v1::CONSISTENCY_SSP, {3, /*staleness=*/1, 0.2, 0.5});
  const std::vector<int64_t> clocks = {3, 1, 2};
  const PartitionProgress progress{6, clocks};
  EXPECT_EQ(ssp->DecidePush({0, 6, 0, 4, 0}, progress).action, PushAction::kApply);
  EXPECT_FALSE(ssp->MayRead(0, progress));  // 3 - 1 = 2 > 1
  EXPECT_TRUE(ssp->MayRead(1, progress));   // the slowest itself
  EXPECT_TRUE(ssp->MayRead(2, progress));   // 2 - 1 = 1, at the bound
  EXPECT_EQ(ssp->ReadWaitText(0, 6, progress),
            "SSP pull of worker 0 at clock 3 waited for the slowest worker (worker 1 at clock 1, "
            "staleness bound 1)");
  EXPECT_DOUBLE_EQ(ssp->BaseLearningRate(), 0.2 * 0.5);

  auto ssp0 = MakeConsistencyPolicy(v1::CONSISTENCY_SSP, {2, /*staleness=*/0, 0.2, 0.5});
  const std::vector<int64_t> even = {4, 4}, uneven = {5, 4};
  EXPECT_TRUE(ssp0->MayRead(0, {8, even}));
  EXPECT_FALSE(ssp0->MayRead(0, {9, uneven}));  // staleness 0 is lock-step
}

TEST(BspPolicyTest, GathersOneRoundAndAveragesIt) {
  auto bsp = MakeConsistencyPolicy(v1::CONSISTENCY_BSP, {2, 1, 0.2, 0.5});
  bsp->Reset(3);
  std::vector<int64_t> clocks = {0, 0};
  const PartitionProgress at7{7, clocks};
  EXPECT_DOUBLE_EQ(bsp->BaseLearningRate(), 0.2);  // the global batch: lr, not lr * lr_scale
  EXPECT_TRUE(bsp->MayRead(0, at7));

  const PushMeta first{0, 7, 0, 10, 0.3};
  EXPECT_EQ(bsp->DecidePush(first, at7).action, PushAction::kAccumulate);
  const float g0[3] = {1, 2, 3};
  auto gathered = bsp->Accumulate(first, g0, 3);
  ASSERT_TRUE(gathered.ok());
  EXPECT_FALSE(gathered->has_value());  // 1 of 2

  EXPECT_FALSE(bsp->MayRead(0, at7));  // its round is open
  EXPECT_TRUE(bsp->MayRead(1, at7));
  EXPECT_EQ(bsp->ReadWaitText(0, 7, at7),
            "BSP pull of worker 0 waited for round 7 to close: 1 of 2 workers pushed");
  EXPECT_EQ(bsp->DecidePush({0, 7, 0, 10, 0.3}, at7).action, PushAction::kWait);
  EXPECT_EQ(bsp->PushWaitText({0, 7, 0, 10, 0.3}, at7),
            "BSP push of worker 0 waited for round 7 to close (1 of 2 pushed)");
  const PushDecision disagreeing = bsp->DecidePush({1, 7, 0, 10, 0.4}, at7);
  EXPECT_EQ(disagreeing.action, PushAction::kRefuse);
  EXPECT_NE(disagreeing.refusal.find("asks for learning rate 0.4"), std::string::npos)
      << disagreeing.refusal;

  const PushMeta second{1, 6, 0, 6, 0.3};
  EXPECT_EQ(bsp->DecidePush(second, at7).action, PushAction::kAccumulate);
  const float g1[3] = {3, 4, 7};
  gathered = bsp->Accumulate(second, g1, 3);
  ASSERT_TRUE(gathered.ok());
  ASSERT_TRUE(gathered->has_value());
  const CombinedUpdate& update = **gathered;
  EXPECT_FLOAT_EQ(update.values[0], 2);
  EXPECT_FLOAT_EQ(update.values[1], 3);
  EXPECT_FLOAT_EQ(update.values[2], 5);
  EXPECT_EQ(update.samples, 16);
  EXPECT_DOUBLE_EQ(update.requested_lr, 0.3);
  EXPECT_TRUE(bsp->MayRead(0, at7));  // the next round starts empty
  EXPECT_EQ(bsp->DecidePush({1, 8, 0, 6, 0.5}, {8, clocks}).action, PushAction::kAccumulate);
}

TEST(BspPolicyTest, ResetDropsAHalfGatheredRound) {
  auto bsp = MakeConsistencyPolicy(v1::CONSISTENCY_BSP, {2, 1, 0.2, 1});
  bsp->Reset(1);
  const std::vector<int64_t> clocks = {1, 0};
  const float g[1] = {1};
  ASSERT_TRUE(bsp->Accumulate({0, 0, 0, 1, 0}, g, 1).ok());
  EXPECT_FALSE(bsp->MayRead(0, {0, clocks}));
  bsp->Reset(1);
  EXPECT_TRUE(bsp->MayRead(0, {0, clocks}));
  EXPECT_EQ(bsp->DecidePush({0, 0, 0, 1, 0}, {0, clocks}).action, PushAction::kAccumulate);
}

// A hand-made policy in a bare store: the store counts and applies only what the policy lets in.
class RefuseOddWorkers : public ConsistencyPolicy {
 public:
  v1::Consistency mode() const override { return v1::CONSISTENCY_ASP; }
  PushDecision DecidePush(const PushMeta& push, const PartitionProgress&) const override {
    if (push.worker % 2 == 1) return {PushAction::kRefuse, "odd workers may not push"};
    return {PushAction::kApply, {}};
  }
  bool MayRead(int, const PartitionProgress&) const override { return true; }
  double BaseLearningRate() const override { return 1.0; }
};

TEST(PartitionStoreTest, FollowsAHandMadePolicy) {
  PartitionStore store(Config(v1::CONSISTENCY_ASP, 2), std::make_unique<RefuseOddWorkers>());
  ASSERT_TRUE(store.Load(CheckpointOf(InitialModel(), 0), "test").ok());
  auto staging = store.NewStaging();
  ASSERT_TRUE(staging.ok());
  const std::vector<float> zeros(kTotalFloats, 0.0f);
  size_t offset = 0;
  for (const TensorSpec& spec : ModelSpecs()) {
    std::memcpy(*(*staging)->Destination(spec), zeros.data() + offset, spec.bytes());
    offset += static_cast<size_t>(spec.numel());
  }
  auto refused = store.Push({1, 0, 0, 4, 0}, **staging, Patient());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(), "odd workers may not push");
  EXPECT_EQ(store.Status().pushes, 0);
  auto applied = store.Push({0, 0, 0, 4, 0}, **staging, Patient());
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(*applied, 1);
  EXPECT_EQ(store.Status().pushes, 1);
}

// ---------------------------------------------------------------------------------------------
// ASP and BSP against single-node SGD.

TEST(AspPartitionTest, OneWorkerEqualsSingleNodeSgdStepForStep) {
  ParameterPartition partition(Config(v1::CONSISTENCY_ASP, 1));
  ASSERT_TRUE(partition.Load(CheckpointOf(InitialModel(), 0), "test").ok());
  std::vector<float> model = InitialModel(), velocity(kParameterFloats, 0.0f);
  int64_t version = 0;
  for (int step = 0; step < 25; ++step) {
    auto pulled = partition.Pull(0, version, Patient());
    ASSERT_TRUE(pulled.ok()) << pulled.status();
    ExpectClose(Flat(*pulled), model, step);
    const std::vector<float> g = GradientAt(Flat(*pulled), 0, step);
    auto pushed = PushFlat(partition, 0, pulled->version, g, Patient());
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    version = *pushed;
    ReferenceStep(model, velocity, g, kLr);
  }
  auto last = partition.Pull(0, version, Patient());
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->version, 25);
  ExpectClose(Flat(*last), model, 25);
}

TEST(BspPartitionTest, NWorkersEqualOneUpdateWithTheAverageGradient) {
  constexpr int kWorkers = 3;
  PartitionConfig config = Config(v1::CONSISTENCY_BSP, kWorkers);
  config.lr_scale = 1.0 / kWorkers;  // ignored by BSP: the round is one global-batch update
  ParameterPartition partition(config);
  ASSERT_TRUE(partition.Load(CheckpointOf(InitialModel(), 0), "test").ok());
  std::vector<float> model = InitialModel(), velocity(kParameterFloats, 0.0f);
  for (int step = 0; step < 12; ++step) {
    std::vector<float> average(kTotalFloats, 0.0f);
    std::vector<int64_t> round_end(kWorkers);
    for (int w = 0; w < kWorkers; ++w) {
      auto pulled = partition.Pull(w, step, Patient());
      ASSERT_TRUE(pulled.ok()) << pulled.status();
      EXPECT_EQ(pulled->version, step);
      ExpectClose(Flat(*pulled), model, step);
      const std::vector<float> g = GradientAt(Flat(*pulled), w, step);
      for (size_t i = 0; i < kTotalFloats; ++i) average[i] += g[i] / kWorkers;
      // Pushes of one round from one thread: only a worker's second push would wait.
      auto pushed = PushFlat(partition, w, pulled->version, g, Patient());
      ASSERT_TRUE(pushed.ok()) << pushed.status();
      round_end[w] = *pushed;
      EXPECT_EQ(partition.Status().version, w + 1 < kWorkers ? step : step + 1);
    }
    for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(round_end[w], step + 1);
    ReferenceStep(model, velocity, average, kLr);
  }
  auto last = partition.Pull(-1, 0, Patient());
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->version, 12);
  ExpectClose(Flat(*last), model, 12);
}

// PDP and APDP's round (consistency/pdp.cc): with equal points per worker it is BSP's round step
// for step; with unequal points it is the points-weighted average.
TEST(PointWeightedRoundTest, WithEqualPointsEveryRoundIsTheBspStepOnTheGlobalBatch) {
  constexpr int kWorkers = 3;
  for (v1::Consistency mode : {v1::CONSISTENCY_PDP, v1::CONSISTENCY_APDP}) {
    ParameterPartition bsp(Config(v1::CONSISTENCY_BSP, kWorkers));
    ParameterPartition pdp(Config(mode, kWorkers));
    ASSERT_TRUE(bsp.Load(CheckpointOf(InitialModel(), 0), "test").ok());
    ASSERT_TRUE(pdp.Load(CheckpointOf(InitialModel(), 0), "test").ok());
    for (int round = 0; round < 10; ++round) {
      auto b = bsp.Pull(-1, round, Patient());
      auto p = pdp.Pull(-1, round, Patient());
      ASSERT_TRUE(b.ok() && p.ok());
      ExpectClose(Flat(*p), Flat(*b), round);
      for (int w = 0; w < kWorkers; ++w) {
        const std::vector<float> g = GradientAt(Flat(*b), w, round);
        ASSERT_TRUE(PushFlat(bsp, w, round, g, Patient(), 0, 64).ok());
        // K* = 192 points, 64 from each worker: the global batch of BSP with 3 x 64.
        ASSERT_TRUE(PushFlat(pdp, w, round, g, Patient(), 0, 64).ok());
      }
      EXPECT_EQ(pdp.Status().version, round + 1);
    }
    auto b = bsp.Pull(-1, 10, Patient());
    auto p = pdp.Pull(-1, 10, Patient());
    ASSERT_TRUE(b.ok() && p.ok());
    ExpectClose(Flat(*p), Flat(*b), 10);
    EXPECT_EQ(pdp.Status().samples, 10 * 3 * 64);
  }
}

TEST(PointWeightedRoundTest, AWorkerWeighsByThePointsItProcessed) {
  ParameterPartition pdp(Config(v1::CONSISTENCY_PDP, 2));
  ASSERT_TRUE(pdp.Load(CheckpointOf(InitialModel(), 0), "test").ok());
  std::vector<float> model = InitialModel(), velocity(kParameterFloats, 0.0f);
  const std::vector<float> fast = GradientAt(model, 0, 0), straggler = GradientAt(model, 1, 0);
  // The straggler processed 32 points while the fast worker processed 288.
  ASSERT_TRUE(PushFlat(pdp, 0, 0, fast, Patient(), 0, 288).ok());
  ASSERT_TRUE(PushFlat(pdp, 1, 0, straggler, Patient(), 0, 32).ok());
  std::vector<float> weighted(kTotalFloats);
  for (size_t i = 0; i < kTotalFloats; ++i) weighted[i] = 0.9f * fast[i] + 0.1f * straggler[i];
  ReferenceStep(model, velocity, weighted, kLr);
  auto pulled = pdp.Pull(0, 1, Patient());
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  ExpectClose(Flat(*pulled), model, 1);
}

TEST(PointWeightedRoundTest, AnUpdateWithoutPointsWeighsNothingAndAWaitingPullNamesWhoIsMissing) {
  ParameterPartition pdp(Config(v1::CONSISTENCY_APDP, 3));
  ASSERT_TRUE(pdp.Load(CheckpointOf(InitialModel(), 0), "test").ok());
  const std::vector<float> g = GradientAt(InitialModel(), 0, 0);
  auto negative = PushFlat(pdp, 0, 0, g, Patient(), 0, -1);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("counts -1 points"), std::string::npos)
      << negative.status().message();
  // Worker 0's batch was still computing when the pull came: its update holds no point, and the
  // garbage it sends weighs nothing.
  std::vector<float> garbage(kTotalFloats, 1e6f);
  ASSERT_TRUE(PushFlat(pdp, 0, 0, garbage, Patient(), 0, 0).ok());
  ASSERT_TRUE(PushFlat(pdp, 2, 0, g, Patient(), 0, 10).ok());
  WaitOptions brief;  // the deadline's expiry is what is tested, not its length
  brief.deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(50);
  auto held = pdp.Pull(0, 0, brief);
  EXPECT_EQ(held.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(held.status().message().find("2 of 3 updates in, waiting for worker 1"),
            std::string::npos)
      << held.status().message();
  EXPECT_EQ(pdp.Status().version, 0);
  ASSERT_TRUE(PushFlat(pdp, 1, 0, g, Patient(), 0, 10).ok());
  std::vector<float> model = InitialModel(), velocity(kParameterFloats, 0.0f);
  ReferenceStep(model, velocity, g, kLr);  // workers 1 and 2 sent g over 10 points each
  auto pulled = pdp.Pull(0, 1, Patient());
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  ExpectClose(Flat(*pulled), model, 1);
}

// ---------------------------------------------------------------------------------------------
// SSP's bound, measured by the test from its own pushes and returned pulls.

TEST(SspPartitionTest, ConcurrentWorkersNeverSeeAClockGapAboveTheBound) {
  constexpr int kWorkers = 4, kSteps = 40, kStaleness = 1;
  PartitionConfig config = Config(v1::CONSISTENCY_SSP, kWorkers);
  config.staleness = kStaleness;
  config.momentum = 0;
  config.weight_decay = 0;
  ParameterPartition partition(config);
  ASSERT_TRUE(partition.Load(CheckpointOf(InitialModel(), 0), "test").ok());
  // pushes_started[w] counts worker w's pushes from before each Push call, so at any moment it
  // is at least the number of w's pushes the server has counted.
  std::vector<std::atomic<int64_t>> pushes_started(kWorkers);
  std::vector<int64_t> max_gap(kWorkers, 0);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      int64_t version = 0;
      for (int step = 0; step < kSteps; ++step) {
        ++pushes_started[w];
        auto pushed =
            PushFlat(partition, w, version, std::vector<float>(kTotalFloats, 0.01f), Patient());
        auto pulled = pushed.ok() ? partition.Pull(w, *pushed, Patient())
                                  : absl::StatusOr<PullSnapshot>(pushed.status());
        if (!pulled.ok()) {
          ++failures;
          ADD_FAILURE() << "worker " << w << " step " << step << ": " << pulled.status();
          return;
        }
        // This worker's clock is exactly its pushes; the others' are at most what they started,
        // so this gap is at most the one the server saw when it released the pull.
        const int64_t mine = step + 1;
        int64_t slowest = mine;
        for (int k = 0; k < kWorkers; ++k) slowest = std::min(slowest, pushes_started[k].load());
        max_gap[w] = std::max(max_gap[w], mine - slowest);
        version = pulled->version;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (int w = 0; w < kWorkers; ++w) EXPECT_LE(max_gap[w], kStaleness) << "worker " << w;
  EXPECT_EQ(partition.Status().version, kWorkers * kSteps);
}

TEST(SspPartitionTest, APullBeyondTheBoundWaitsUntilTheSlowestWorkerPushes) {
  constexpr int kStaleness = 2;
  PartitionConfig config = Config(v1::CONSISTENCY_SSP, 2);
  config.staleness = kStaleness;
  ParameterPartition partition(config);
  ASSERT_TRUE(partition.Load(CheckpointOf(InitialModel(), 0), "test").ok());
  const std::vector<float> g(kTotalFloats, 0.01f);
  int64_t fast_clock = 0, slow_clock = 0, version = 0;

  // Worker 1 runs ahead while worker 0 has not pushed: pulls return up to a gap of kStaleness.
  for (int step = 0; step < kStaleness; ++step) {
    auto pushed = PushFlat(partition, 1, version, g, Patient());
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    ++fast_clock;
    auto pulled = partition.Pull(1, *pushed, Patient());
    ASSERT_TRUE(pulled.ok()) << pulled.status();
    EXPECT_LE(fast_clock - slow_clock, kStaleness);
    version = pulled->version;
  }
  // One more push is accepted, but its pull would make the gap kStaleness + 1: it waits out its
  // deadline (nobody else pushes meanwhile).
  auto pushed = PushFlat(partition, 1, version, g, Patient());
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  ++fast_clock;
  WaitOptions short_wait;
  short_wait.deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(20);
  auto held = partition.Pull(1, *pushed, short_wait);
  EXPECT_EQ(held.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(held.status().message().find("SSP pull of worker 1 at clock 3 waited for the slowest "
                                         "worker (worker 0 at clock 0, staleness bound 2)"),
            std::string::npos)
      << held.status();
  EXPECT_EQ(partition.Status().waiting_now, 0);  // a call that gave up no longer counts

  // The same pull again, in a thread; once it is waiting (its cancellation probe is polled only
  // while waiting), the slowest worker pushes, and the pull returns.
  std::promise<void> waiting;
  std::future<void> is_waiting = waiting.get_future();
  std::once_flag signalled;
  WaitOptions patient = Patient();
  patient.cancelled = [&] {
    std::call_once(signalled, [&] { waiting.set_value(); });
    return false;
  };
  absl::StatusOr<PullSnapshot> released = absl::UnknownError("not run");
  std::thread puller([&] { released = partition.Pull(1, *pushed, patient); });
  is_waiting.wait();
  // What an observer sees of the held pull (ServerStatus.waiting_now).
  EXPECT_EQ(partition.Status().waiting_now, 1);
  ASSERT_TRUE(PushFlat(partition, 0, 0, g, Patient()).ok());
  ++slow_clock;
  puller.join();
  EXPECT_EQ(partition.Status().waiting_now, 0);
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(fast_clock - slow_clock, kStaleness);
  EXPECT_EQ(released->version, 4);  // worker 1's three pushes and worker 0's one
}

// ---------------------------------------------------------------------------------------------
// The job's sample budget: once the servers have applied it, the model is final.

TEST(SampleBudgetTest, PushesAfterTheBudgetAreDiscardedAndTheModelStaysFinal) {
  PartitionConfig config = Config(v1::CONSISTENCY_ASP, 2);
  config.sample_budget = 12;  // three pushes of 4 samples
  ParameterPartition partition(config);
  ASSERT_TRUE(partition.Load(CheckpointOf(InitialModel(), 0), "test").ok());
  const std::vector<float> g(kTotalFloats, 0.01f);
  for (int i = 0; i < 3; ++i) {
    auto pulled = partition.Pull(i % 2, 0, Patient());
    ASSERT_TRUE(pulled.ok()) << pulled.status();
    EXPECT_LT(pulled->samples, pulled->sample_budget);
    ASSERT_TRUE(PushFlat(partition, i % 2, pulled->version, g, Patient()).ok());
  }
  auto final_model = partition.Pull(0, 3, Patient());
  ASSERT_TRUE(final_model.ok()) << final_model.status();
  EXPECT_EQ(final_model->samples, 12);
  EXPECT_EQ(final_model->sample_budget, 12);

  // A push computed meanwhile is accepted and dropped: same version, same weights.
  auto late = PushFlat(partition, 1, 2, g, Patient());
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(*late, 3);
  auto after = partition.Pull(1, *late, Patient());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->version, 3);
  EXPECT_EQ(Flat(*after), Flat(*final_model));
  const PartitionStatus status = partition.Status();
  EXPECT_EQ(status.pushes, 3);
  EXPECT_EQ(status.discarded_pushes, 1);
  EXPECT_EQ(status.samples, 12);
  EXPECT_EQ(status.sample_budget, 12);
}

TEST(SampleBudgetTest, APullTheStalenessBoundWouldHoldReturnsOnceTheBudgetIsSpent) {
  // Worker 1 spends the budget alone while worker 0 never pushes: without a budget its pull at
  // clock 3 waits for worker 0 (see the SSP test above); with it, the job is over and nothing
  // should wait for a worker that has no more work to do.
  PartitionConfig config = Config(v1::CONSISTENCY_SSP, 2);
  config.staleness = 2;
  config.sample_budget = 12;
  ParameterPartition partition(config);
  ASSERT_TRUE(partition.Load(CheckpointOf(InitialModel(), 0), "test").ok());
  const std::vector<float> g(kTotalFloats, 0.01f);
  int64_t version = 0;
  for (int step = 0; step < 3; ++step) {
    auto pushed = PushFlat(partition, 1, version, g, Patient());
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    version = *pushed;
  }
  WaitOptions short_wait;  // would end in DEADLINE_EXCEEDED if the pull were held
  short_wait.deadline = std::chrono::system_clock::now() + std::chrono::seconds(60);
  auto pulled = partition.Pull(1, version, short_wait);
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(pulled->version, 3);
  EXPECT_GE(pulled->samples, pulled->sample_budget);
}

TEST(SampleBudgetTest, NoBudgetMeansNoLimit) {
  ParameterPartition partition(Config(v1::CONSISTENCY_ASP, 1));
  ASSERT_TRUE(partition.Load(CheckpointOf(InitialModel(), 0), "test").ok());
  const std::vector<float> g(kTotalFloats, 0.01f);
  int64_t version = 0;
  for (int step = 0; step < 10; ++step) {
    auto pushed = PushFlat(partition, 0, version, g, Patient());
    ASSERT_TRUE(pushed.ok()) << pushed.status();
    version = *pushed;
  }
  EXPECT_EQ(version, 10);
  EXPECT_EQ(partition.Status().discarded_pushes, 0);
}

// The server's own account of staleness: from the versions it handed each worker, whatever the
// pushes' headers claim. Here every header claims the newest version (0 staleness); the served
// counts must not believe it. Seen to fail with Pull not recording what it handed (every push
// went uncounted).
TEST(ServedStalenessTest, CountsFromTheVersionsHandedOutNotFromTheHeaders) {
  ParameterPartition partition(Config(v1::CONSISTENCY_ASP, 2));
  ASSERT_TRUE(partition.Load(CheckpointOf(InitialModel(), 10), "test").ok());
  const std::vector<float> g = GradientAt(InitialModel(), 0, 0);
  auto claim_current = [&] { return partition.Status().version; };
  // Worker 1 pushes before any pull: not counted (the server handed it nothing).
  ASSERT_TRUE(PushFlat(partition, 1, claim_current(), g, Patient()).ok());  // -> 11
  ASSERT_TRUE(partition.Pull(0, 0, Patient()).ok());                        // handed 11
  ASSERT_TRUE(partition.Pull(1, 0, Patient()).ok());                        // handed 11
  ASSERT_TRUE(PushFlat(partition, 0, claim_current(), g, Patient()).ok());  // met 11: 0, 0 -> 12
  ASSERT_TRUE(PushFlat(partition, 1, claim_current(), g, Patient()).ok());  // met 12: 1, 1 -> 13
  // Worker 0 pushes again without pulling: still on 11 at best, and held 11 at its last push.
  ASSERT_TRUE(PushFlat(partition, 0, claim_current(), g, Patient()).ok());  // met 13: 2, 2 -> 14
  ASSERT_TRUE(partition.Pull(0, 0, Patient()).ok());                        // handed 14
  ASSERT_TRUE(PushFlat(partition, 0, claim_current(), g, Patient()).ok());  // met 14: 0, 3 -> 15
  const PartitionStatus s = partition.Status();
  EXPECT_EQ(s.pushes, 5);
  EXPECT_EQ(s.staleness_histogram[0], 5);  // what the headers claimed
  std::vector<int64_t> low(kStalenessBuckets, 0), high(kStalenessBuckets, 0);
  low[0] = 2, low[1] = 1, low[2] = 1;
  high[0] = 1, high[1] = 1, high[2] = 1, high[3] = 1;
  EXPECT_EQ(s.served_staleness_low, low);
  EXPECT_EQ(s.served_staleness_high, high);
}

}  // namespace
}  // namespace strata
