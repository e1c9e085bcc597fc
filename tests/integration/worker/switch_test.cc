// The live switch, worker side (issue: ring all-reduce -> push/pull at a step boundary): real
// strata-worker and strata-ps processes on loopback, the handover done the way the orchestrator
// does it (DESIGN.md §3).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "services/common/child_process.h"
#include "services/common/rpc.h"
#include "strata/v1/parameter_server.grpc.pb.h"
#include "strata/v1/worker.grpc.pb.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

constexpr int kWorkers = 2;
constexpr int kServers = 2;
constexpr int kEpochs = 8;
constexpr int kStepsPerEpoch = 12;
constexpr int kSwitchStep = 18;  // in the second epoch
// Push/pull learning rate the switch asks for (the servers' own would be 0.05 / 2 workers).
constexpr double kSwitchLr = 0.02;

class SwitchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/strata-switch-XXXXXX";
    dir_ = mkdtemp(pattern);
    fs::create_directories(dir_ + "/logs");
    std::ofstream(dir_ + "/job.yaml") << R"(name: switch-test
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 1536, max_test: 500 }
model: { arch: mlp }
training: { epochs: 8, batch_size: 128, lr: 0.05, momentum: 0.9, seed: 3 }
cluster: { workers: 2, parameter_servers: 2, threads_per_worker: 1 }
)";
  }
  void TearDown() override {
    std::vector<ChildProcess*> all;
    for (auto& w : workers_) all.push_back(w.process.get());
    for (auto& s : servers_) all.push_back(s.process.get());
    TerminateAll(all, seconds(5));
    if (!HasFailure()) fs::remove_all(dir_);
  }

  struct Service {
    std::unique_ptr<ChildProcess> process;
    std::string address;
    std::string LogTail() const { return strata::LogTail(process->log_path()); }
  };

  // Starts a service on 127.0.0.1:0 and waits for the port it reports.
  Service Launch(const std::string& binary, const std::string& name,
                 std::vector<std::string> args) {
    SpawnOptions o;
    o.name = name;
    o.log_path = dir_ + "/logs/" + name + ".log";
    const std::string port_file = dir_ + "/" + name + ".port";
    o.argv = {std::string(STRATA_BIN_DIR) + "/" + binary};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.argv.insert(o.argv.end(), {"--listen", "127.0.0.1:0", "--port-file", port_file});
    Service s;
    auto child = ChildProcess::Spawn(o);
    EXPECT_TRUE(child.ok()) << child.status();
    if (!child.ok()) return s;
    s.process = std::move(*child);
    auto port = WaitForPortFile(*s.process, port_file, seconds(120));
    EXPECT_TRUE(port.ok()) << port.status();
    if (port.ok()) s.address = "127.0.0.1:" + std::to_string(*port);
    return s;
  }

  // Launches kWorkers strata-workers (with `extra` flags) and starts them as one ring.
  std::vector<std::unique_ptr<v1::Worker::Stub>> StartRing(
      const std::vector<std::string>& extra = {}) {
    std::vector<std::unique_ptr<v1::Worker::Stub>> stubs;
    v1::StartRequest start;
    start.set_mode(v1::SYNC_MODE_ALLREDUCE);
    start.set_steps_per_epoch(kStepsPerEpoch);
    for (int r = 0; r < kWorkers; ++r) {
      std::vector<std::string> args = {
          "--config", dir_ + "/job.yaml",       "--rank",    std::to_string(r),
          "--world",  std::to_string(kWorkers), "--run-dir", dir_};
      args.insert(args.end(), extra.begin(), extra.end());
      workers_.push_back(Launch("strata-worker", "worker-" + std::to_string(r), args));
      if (workers_.back().address.empty()) return {};
      start.add_workers(workers_.back().address);
      stubs.push_back(v1::Worker::NewStub(MakeChannel(workers_.back().address)));
    }
    for (auto& s : stubs) {
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(seconds(60)));
      v1::StartReply reply;
      grpc::Status status = s->Start(&context, start, &reply);
      EXPECT_TRUE(status.ok()) << status.error_message();
      if (!status.ok()) return {};
    }
    return stubs;
  }

  v1::WorkerStatus StatusOf(v1::Worker::Stub& stub) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(seconds(60)));
    v1::WorkerStatus status;
    grpc::Status rpc = stub.GetStatus(&context, {}, &status);
    EXPECT_TRUE(rpc.ok()) << rpc.error_message();
    return status;
  }

  // Polls a worker's status until it has finished training (or the deadline passes).
  v1::WorkerStatus WaitUntilFinished(v1::Worker::Stub& stub,
                                     std::chrono::steady_clock::time_point give_up) {
    v1::WorkerStatus status;
    for (;;) {
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(seconds(60)));
      grpc::Status rpc = stub.GetStatus(&context, {}, &status);
      EXPECT_TRUE(rpc.ok()) << rpc.error_message();
      if (!rpc.ok() || status.finished()) return status;
      if (std::chrono::steady_clock::now() > give_up) {
        ADD_FAILURE() << "worker " << status.rank() << " did not finish";
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling progress
    }
  }

  std::string dir_;
  std::vector<Service> workers_, servers_;
};

TEST_F(SwitchTest, AllReduceWorkersSwitchToParameterServersWithTheSameWeights) {
  for (int p = 0; p < kServers; ++p) {
    servers_.push_back(Launch("strata-ps", "ps-" + std::to_string(p),
                              {"--config", dir_ + "/job.yaml", "--partition", std::to_string(p),
                               "--partitions", std::to_string(kServers), "--workers",
                               std::to_string(kWorkers), "--train-examples", "1536"}));
    ASSERT_FALSE(servers_.back().address.empty());
  }
  std::vector<std::unique_ptr<v1::Worker::Stub>> stubs = StartRing();
  ASSERT_EQ(stubs.size(), static_cast<size_t>(kWorkers));

  // The requests reach the workers at different times, the second only after the first worker
  // has passed the requested step: the ring must not split (the first worker handing over while
  // its peer still trains) but agree on a later step and switch there together.
  int64_t furthest = 0;
  for (auto& s : stubs) furthest = std::max(furthest, StatusOf(*s).step());
  const int64_t requested_step = std::max<int64_t>(kSwitchStep, furthest + 2);
  auto send_switch = [this, requested_step](v1::Worker::Stub* stub) {
    return std::async(std::launch::async, [stub, this, requested_step] {
      v1::SwitchRequest request;
      request.set_mode(v1::SYNC_MODE_PS);
      request.set_at_step(requested_step);
      request.set_lr(kSwitchLr);
      for (auto& server : servers_) request.add_parameter_servers(server.address);
      grpc::ClientContext context;
      context.set_deadline(DeadlineAfter(seconds(300)));
      v1::SwitchReply reply;
      grpc::Status status = stub->Switch(&context, request, &reply);
      return std::make_pair(status, reply);
    });
  };
  std::vector<std::future<std::pair<grpc::Status, v1::SwitchReply>>> switches;
  switches.push_back(send_switch(stubs[0].get()));
  const auto give_up = std::chrono::steady_clock::now() + seconds(300);
  int64_t first_worker_step = 0;
  for (;;) {
    const v1::WorkerStatus first = StatusOf(*stubs[0]);
    ASSERT_EQ(first.switch_began_at_step(), 0)
        << "worker 0 began the switch before its peer had the request";
    first_worker_step = first.step();
    if (first_worker_step > requested_step) break;
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "worker 0 stopped short of the step";
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polling progress
  }
  switches.push_back(send_switch(stubs[1].get()));

  // Worker 0 publishes the agreed step when the switch begins and writes the all-reduce model
  // there; the servers load it.
  int64_t switch_step = 0;
  while ((switch_step = StatusOf(*stubs[0]).switch_began_at_step()) == 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "the switch did not begin";
    for (auto& w : workers_) ASSERT_FALSE(w.process->Poll()) << w.LogTail();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling progress
  }
  EXPECT_GT(switch_step, first_worker_step) << "worker 0 switched before its peer had the request";
  ASSERT_LT(switch_step, (kEpochs - 2) * kStepsPerEpoch)
      << "training ran too far ahead to test the switch";
  const std::string checkpoint =
      dir_ + "/checkpoints/switch-step" + std::to_string(switch_step) + ".ckpt";
  while (!fs::exists(checkpoint)) {
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "no handover checkpoint";
    for (auto& w : workers_) ASSERT_FALSE(w.process->Poll()) << w.LogTail();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& server : servers_) {
    auto stub = v1::ParameterServer::NewStub(MakeChannel(server.address));
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(seconds(60)));
    v1::CheckpointRequest request;
    request.set_path(checkpoint);
    v1::CheckpointReply reply;
    grpc::Status status = stub->LoadCheckpoint(&context, request, &reply);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  for (auto& f : switches) {
    auto [status, reply] = f.get();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(reply.switched_at_step(), switch_step);
    // The weights each worker pulled right after the switch are the all-reduce weights.
    EXPECT_EQ(reply.handover_max_abs_diff(), 0.0);
  }

  // Training continues asynchronously to the end, and the loss keeps falling.
  std::vector<v1::WorkerStatus> final_status(kWorkers);
  for (int r = 0; r < kWorkers; ++r) {
    final_status[r] = WaitUntilFinished(*stubs[r], give_up + seconds(300));
    const v1::WorkerStatus& st = final_status[r];
    EXPECT_EQ(st.error(), "") << workers_[r].LogTail();
    EXPECT_EQ(st.mode(), v1::SYNC_MODE_PS);
    EXPECT_EQ(st.switched_at_step(), switch_step);
    EXPECT_EQ(st.step(), kEpochs * kStepsPerEpoch);
    ASSERT_EQ(st.epoch_train_loss_size(), kEpochs);
    // The switch falls in epoch 2 to 5; at least two pure push/pull epochs follow. Asynchronous
    // epochs are noisy one by one, so the last two together are compared with the switch epoch.
    const double last_two =
        (st.epoch_train_loss(kEpochs - 1) + st.epoch_train_loss(kEpochs - 2)) / 2;
    EXPECT_LT(last_two, st.epoch_train_loss(switch_step / kStepsPerEpoch))
        << "loss did not keep falling after the switch";
    EXPECT_LT(st.epoch_train_loss(kEpochs - 1), st.epoch_train_loss(0));
  }
  // The servers applied the workers' pushes at the rate the switch asked for.
  for (auto& server : servers_) {
    auto stub = v1::ParameterServer::NewStub(MakeChannel(server.address));
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(seconds(60)));
    v1::ServerStatus status;
    ASSERT_TRUE(stub->GetStatus(&context, {}, &status).ok());
    EXPECT_GT(status.pushes(), 0);
    EXPECT_FLOAT_EQ(status.lr(), static_cast<float>(kSwitchLr));
  }
  for (auto& s : stubs) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(seconds(30)));
    v1::StopReply reply;
    s->Stop(&context, v1::StopRequest(), &reply);
  }
  for (auto& w : workers_) {
    ASSERT_TRUE(w.process->WaitFor(seconds(60))) << "worker did not exit on Stop";
    EXPECT_TRUE(w.process->succeeded()) << w.process->ExitDescription() << "\n" << w.LogTail();
  }
}

TEST_F(SwitchTest, AWithdrawnSwitchLeavesTheRingTraining) {
  // Enough steps that the callers give up long before the requested one.
  constexpr int kLongEpochs = 100;
  std::vector<std::unique_ptr<v1::Worker::Stub>> stubs =
      StartRing({"--epochs", std::to_string(kLongEpochs)});
  ASSERT_EQ(stubs.size(), static_cast<size_t>(kWorkers));
  // A Switch to a server that is never there, whose caller gives up after `wait`.
  const auto switch_and_give_up = [](v1::Worker::Stub& stub, int64_t at_step,
                                     std::chrono::milliseconds wait) {
    v1::SwitchRequest request;
    request.set_mode(v1::SYNC_MODE_PS);
    request.set_at_step(at_step);
    request.add_parameter_servers("127.0.0.1:1");
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(wait));
    v1::SwitchReply reply;
    return stub.Switch(&context, request, &reply);
  };
  const int64_t last_step = kLongEpochs * kStepsPerEpoch - 1;
  // The callers give up (deadline) long before the last step: both requests must be withdrawn,
  // or one worker would wait at the handover for the other forever.
  for (auto& s : stubs) {
    EXPECT_FALSE(switch_and_give_up(*s, last_step, std::chrono::milliseconds(300)).ok());
  }
  // A request due at once on one worker only: it votes at every step, its peer never does, so
  // nobody switches; when its caller gives up the request is dropped after the step in flight.
  EXPECT_FALSE(switch_and_give_up(*stubs[0], 0, std::chrono::milliseconds(500)).ok());
  // Dropped, it leaves room for a new request (a pending one would refuse it: ALREADY_EXISTS).
  bool room = false;
  for (const auto until = std::chrono::steady_clock::now() + seconds(120);
       !room && std::chrono::steady_clock::now() < until;) {
    room = switch_and_give_up(*stubs[0], last_step, std::chrono::milliseconds(300)).error_code() !=
           grpc::StatusCode::ALREADY_EXISTS;
  }
  EXPECT_TRUE(room) << "the withdrawn request stayed pending";
  const auto give_up = std::chrono::steady_clock::now() + seconds(300);
  for (int r = 0; r < kWorkers; ++r) {
    const v1::WorkerStatus st = WaitUntilFinished(*stubs[r], give_up);
    EXPECT_EQ(st.error(), "") << workers_[r].LogTail();
    EXPECT_EQ(st.mode(), v1::SYNC_MODE_ALLREDUCE);
    EXPECT_EQ(st.switched_at_step(), 0);
    EXPECT_EQ(st.step(), kLongEpochs * kStepsPerEpoch);
  }
}

TEST_F(SwitchTest, SwitchToAllReduceOrBeforeStartIsRefused) {
  workers_.push_back(
      Launch("strata-worker", "worker-0",
             {"--config", dir_ + "/job.yaml", "--rank", "0", "--world", "1", "--run-dir", dir_}));
  ASSERT_FALSE(workers_.back().address.empty());
  auto stub = v1::Worker::NewStub(MakeChannel(workers_[0].address));
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(seconds(30)));
  v1::SwitchRequest request;
  request.set_mode(v1::SYNC_MODE_ALLREDUCE);
  v1::SwitchReply reply;
  grpc::Status status = stub->Switch(&context, request, &reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  // A learning rate that is not a number >= 0 is refused, naming it.
  for (double lr : {std::nan(""), -0.5}) {
    grpc::ClientContext bad_lr_context;
    bad_lr_context.set_deadline(DeadlineAfter(seconds(30)));
    v1::SwitchRequest bad_lr;
    bad_lr.set_mode(v1::SYNC_MODE_PS);
    bad_lr.add_parameter_servers("127.0.0.1:1");
    bad_lr.set_lr(lr);
    status = stub->Switch(&bad_lr_context, bad_lr, &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find("Switch: lr"), std::string::npos)
        << status.error_message();
  }
  // Before Start the worker is not in all-reduce mode: a switch makes no sense yet.
  grpc::ClientContext context2;
  context2.set_deadline(DeadlineAfter(seconds(30)));
  request.set_mode(v1::SYNC_MODE_PS);
  request.add_parameter_servers("127.0.0.1:1");
  request.set_at_step(5);
  status = stub->Switch(&context2, request, &reply);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
}

}  // namespace
}  // namespace strata
