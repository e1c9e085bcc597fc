// Many workers pushing and pulling at once against one in-process parameter server, over gRPC and
// over the plain-TCP data plane (so that a ThreadSanitizer build instruments the server and the
// clients together; see docs/protocol.md).
// Every update subtracts the same amount from every element, so any torn or half-applied state
// shows up as unequal elements in a pulled tensor.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "services/common/wire/rpc.h"
#include "services/parameter_server/partition.h"
#include "services/parameter_server/service.h"
#include "services/parameter_server/tcp_push_pull_server.h"
#include "tests/integration/parameter_server/ps_test_util.h"

namespace strata::testing {
namespace {

constexpr int kWorkers = 8;
constexpr int kSteps = 50;
constexpr float kStart = 1.0f;

struct Mode {
  v1::Consistency mode;
  const char* name;
};

std::vector<NamedTensor> Model(float value) {
  // Large enough that pushes and pulls span many 16 KiB chunks.
  return {Filled("a.weight", {128, 128}, value, 0), Filled("a.bias", {128}, value, 0),
          Filled("b.weight", {10, 1000}, value, 0), Filled("bn.mean", {64}, value, 0)};
}

class PsStressTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    PartitionConfig c;
    c.workers = kWorkers;
    c.consistency = GetParam().mode;
    c.staleness = 1;
    c.lr = 0.01;
    c.momentum = 0;
    c.weight_decay = 0;
    c.lr_scale = 1.0;
    c.train_examples = 100;
    partition_ = std::make_unique<ParameterPartition>(c);
    Checkpoint checkpoint;
    for (auto& t : Model(kStart)) {
      checkpoint.entries.push_back(
          {t.name() == "bn.mean" ? TensorKind::kBuffer : TensorKind::kParameter, t});
    }
    ASSERT_TRUE(partition_->Load(checkpoint, "test").ok());
    TcpPushPullServerOptions plane;
    plane.listen_host = "127.0.0.1";
    auto started = TcpPushPullServer::Start(partition_.get(), plane);
    ASSERT_TRUE(started.ok()) << started.status();
    data_plane_ = std::move(*started);
    ParameterServerServiceOptions o;
    o.chunk_bytes = 16 << 10;
    o.data_plane = data_plane_.get();
    service_ = std::make_unique<ParameterServerService>(partition_.get(), o);
    int port = 0;
    server_ = StartServer("127.0.0.1:0", {service_.get()}, &port);
    ASSERT_NE(server_, nullptr);
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  void TearDown() override {
    partition_->Shutdown();
    if (data_plane_) data_plane_->Stop();
    if (server_) server_->Shutdown(DeadlineAfter(std::chrono::seconds(5)));
  }

  // Runs `worker` for every worker at once, with observers pulling, reading the status and
  // watching progress over gRPC meanwhile; then checks the counters and the final model.
  // `worker` returns its largest SSP clock gap as it saw it, or -1 after a failure it reported.
  void RunWorkersWithObservers(const std::function<int64_t(int w)>& worker);

  std::unique_ptr<ParameterPartition> partition_;
  std::unique_ptr<TcpPushPullServer> data_plane_;
  std::unique_ptr<ParameterServerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

// Every element of every parameter tensor holds the same value; returns it (NaN if torn).
float UniformValue(const Pulled& p) {
  float value = NAN;
  for (const auto& t : p.tensors) {
    if (t.name() == "bn.mean") continue;
    for (int64_t i = 0; i < t.spec.numel(); ++i) {
      if (std::isnan(value)) value = t.floats()[i];
      if (t.floats()[i] != value) return NAN;
    }
  }
  return value;
}

// Each worker counts its pushes before sending them: SSP's clock gap as the test sees it is a
// worker's clock when its pull returns (exactly its pushes) less the fewest pushes any worker
// has started.
std::atomic<int64_t> pushes_started[kWorkers];

int64_t ClockGapAfter(int64_t step) {
  int64_t slowest = step + 1;
  for (const auto& started : pushes_started) slowest = std::min(slowest, started.load());
  return step + 1 - slowest;
}

void PsStressTest::RunWorkersWithObservers(const std::function<int64_t(int w)>& worker) {
  for (auto& started : pushes_started) started = 0;
  std::atomic<bool> done{false};
  std::atomic<int> failures{0}, torn{0};
  std::vector<int64_t> max_clock_gap(kWorkers, 0);  // per worker, written by its thread only
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      max_clock_gap[w] = worker(w);
      if (max_clock_gap[w] < 0) ++failures;
    });
  }
  // Observers: pulls of the whole model, status and progress, all while the workers run.
  threads.emplace_back([&] {
    auto stub = Connect(address_);
    while (!done) {
      Pulled r = RawPull(*stub, /*worker=*/-1);
      if (!r.status.ok()) ++failures;
      if (std::isnan(UniformValue(r))) ++torn;
      GetStatus(*stub);
    }
  });
  grpc::ClientContext watch_context;
  watch_context.set_deadline(TestDeadline());
  threads.emplace_back([&] {
    auto stub = Connect(address_);
    auto watch = stub->WatchProgress(&watch_context, v1::WatchProgressRequest());
    v1::Progress p;
    int64_t last = -1;
    while (watch->Read(&p)) {
      if (p.completed_epochs() < last) ++failures;  // progress never goes back
      last = p.completed_epochs();
    }
    watch->Finish();
  });
  for (int w = 0; w < kWorkers; ++w) threads[w].join();
  done = true;
  watch_context.TryCancel();
  for (size_t i = kWorkers; i < threads.size(); ++i) threads[i].join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(torn.load(), 0);
  auto stub = Connect(address_);
  const v1::ServerStatus s = GetStatus(*stub);
  EXPECT_EQ(s.pushes(), kWorkers * kSteps);
  EXPECT_EQ(s.samples(), kWorkers * kSteps * 2);
  const int64_t updates = GetParam().mode == v1::CONSISTENCY_BSP ? kSteps : kWorkers * kSteps;
  EXPECT_EQ(s.version(), updates);
  if (GetParam().mode == v1::CONSISTENCY_SSP) {
    for (int w = 0; w < kWorkers; ++w) EXPECT_LE(max_clock_gap[w], 1) << "worker " << w;
  }
  // Each update subtracts lr * gradient (1.0) from every element.
  Pulled final_model = RawPull(*stub);
  EXPECT_NEAR(UniformValue(final_model), kStart - 0.01f * updates, 1e-4);
}

TEST_P(PsStressTest, ManyWorkersPushAndPullConcurrently) {
  RunWorkersWithObservers([&](int w) -> int64_t {
    auto stub = Connect(address_);  // a channel per worker, as separate processes would have
    int64_t version = 0, max_gap = 0;
    for (int step = 0; step < kSteps; ++step) {
      ++pushes_started[w];
      std::vector<v1::PushRequest> m = {Header(w, version, /*samples=*/2, step)};
      for (auto& c : Chunks(Model(1.0f), 16 << 10)) m.push_back(std::move(c));
      Pulled r;
      if (step % 2 == 0) {
        r = RawPushPull(*stub, m);
      } else {  // the two-call path: Push, then Pull
        v1::PushReply reply;
        grpc::Status pushed = RawPush(*stub, m, &reply);
        if (pushed.ok()) {
          r = RawPull(*stub, w, step + 1);
        } else {
          r.status = pushed;
        }
      }
      if (!r.status.ok()) {
        ADD_FAILURE() << "worker " << w << " step " << step << ": " << r.status.error_message();
        return -1;
      }
      if (std::isnan(UniformValue(r))) {
        ADD_FAILURE() << "worker " << w << " step " << step << ": a torn model";
        return -1;
      }
      max_gap = std::max(max_gap, ClockGapAfter(step));
      version = r.version;
    }
    return max_gap;
  });
}

// The same over the plain-TCP data plane: one connection per worker, the tensors as raw floats in
// the partition's order (parameters, then the buffer), every other step followed by a pull.
TEST_P(PsStressTest, ManyWorkersPushAndPullConcurrentlyOverTheTcpDataPlane) {
  push_pull_wire::LayoutFingerprint fingerprint;
  size_t floats = 0, parameter_floats = 0;
  for (const auto& t : Model(1.0f)) {
    const bool is_buffer = t.name() == "bn.mean";
    fingerprint.Add(t.spec, is_buffer);
    floats += static_cast<size_t>(t.spec.numel());
    if (!is_buffer) parameter_floats = floats;
  }
  const std::vector<float> gradients(floats, 1.0f);
  RunWorkersWithObservers([&](int w) -> int64_t {
    DataPlaneClient client(data_plane_->port(), data_plane_->ticket(w), static_cast<uint32_t>(w));
    push_pull_wire::Request request;
    request.worker = static_cast<uint32_t>(w);
    request.samples = 2;
    request.layout_fingerprint = fingerprint.value();
    request.deadline_ms = 120000;
    int64_t max_gap = 0;
    for (int step = 0; step < kSteps; ++step) {
      ++pushes_started[w];
      request.kind = push_pull_wire::RequestKind::kExchange;
      request.clock = step;
      request.payload_bytes = floats * sizeof(float);
      auto answer = client.Call(request, gradients);
      if (answer.status.ok() && step % 2 == 1) {
        push_pull_wire::Request pull = request;
        pull.kind = push_pull_wire::RequestKind::kPull;
        pull.payload_bytes = 0;
        answer = client.Call(pull);
      }
      if (!answer.status.ok() || answer.model.size() != floats) {
        ADD_FAILURE() << "worker " << w << " step " << step << ": " << answer.status;
        return -1;
      }
      for (size_t i = 1; i < parameter_floats; ++i) {
        if (answer.model[i] != answer.model[0]) {
          ADD_FAILURE() << "worker " << w << " step " << step << ": a torn model at " << i;
          return -1;
        }
      }
      max_gap = std::max(max_gap, ClockGapAfter(step));
      request.version = answer.reply.version;
    }
    return max_gap;
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, PsStressTest,
                         ::testing::Values(Mode{v1::CONSISTENCY_ASP, "asp"},
                                           Mode{v1::CONSISTENCY_BSP, "bsp"},
                                           Mode{v1::CONSISTENCY_SSP, "ssp"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata::testing
