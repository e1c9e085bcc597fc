// The live switch, worker side (ring all-reduce -> push/pull at a step boundary): real
// strata-worker and strata-ps processes on loopback, the handover done the way the orchestrator
// does it (docs/architecture.md, "The live switch"): the servers stream the model from a worker,
// and they run in a directory of their own, so nothing is handed over through a shared disk.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "services/common/process/child_process.h"
#include "services/common/wire/checkpoint.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/tensor_codec.h"
#include "strata/v1/parameter_server.grpc.pb.h"
#include "strata/v1/worker.grpc.pb.h"
#include "tests/support/server_pieces.h"

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

v1::HandoverModelRequest HandoverRequest(int64_t step) {
  v1::HandoverModelRequest request;
  request.set_step(step);
  return request;
}

// The handover model as a worker streams it, put together by the test itself.
absl::StatusOr<Checkpoint> FetchHandoverModelForTest(v1::Worker::Stub& worker, int64_t step) {
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(seconds(60)));
  auto reader = worker.GetHandoverModel(&context, HandoverRequest(step));
  std::string bytes;
  v1::CheckpointChunk chunk;
  while (reader->Read(&chunk)) {
    EXPECT_EQ(chunk.offset(), bytes.size());
    bytes += chunk.data();
    EXPECT_LE(bytes.size(), chunk.total_bytes());
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return absl::InternalError(status.error_message());
  return ParseCheckpoint(bytes, "the test's fetch");
}

// What a parameter server holds, read as an observer (no consistency wait).
std::vector<NamedTensor> PullAsObserver(const std::string& address) {
  auto stub = v1::ParameterServer::NewStub(MakeChannel(address));
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(seconds(60)));
  v1::PullRequest pull;
  pull.set_worker(-1);
  auto reader = stub->Pull(&context, pull);
  std::vector<v1::TensorChunk> chunks;
  v1::PullResponse response;
  while (reader->Read(&response)) {
    if (response.has_chunk()) chunks.push_back(response.chunk());
  }
  grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  auto tensors = DecodeAll(chunks);
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  return tensors.ok() ? *tensors : std::vector<NamedTensor>{};
}

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
  // The servers get a folder of their own: they cannot read what the workers write.
  const std::string server_dir = dir_ + "/servers";
  fs::create_directories(server_dir);
  fs::copy_file(dir_ + "/job.yaml", server_dir + "/job.yaml");
  for (int p = 0; p < kServers; ++p) {
    servers_.push_back(
        Launch("strata-ps", "ps-" + std::to_string(p),
               {"--config", server_dir + "/job.yaml", "--partition", std::to_string(p),
                "--partitions", std::to_string(kServers), "--workers", std::to_string(kWorkers),
                "--train-examples", "1536", "--sample-budget", "0"}));
    ASSERT_FALSE(servers_.back().address.empty());
  }
  // A witness: one more server holding the whole model, loaded the same way, that nobody pushes
  // to, so the test can read what a load from a worker installs without racing the first push.
  servers_.push_back(Launch(
      "strata-ps", "witness",
      {"--config", server_dir + "/job.yaml", "--partition", "0", "--partitions", "1", "--workers",
       std::to_string(kWorkers), "--train-examples", "1536", "--sample-budget", "0"}));
  ASSERT_FALSE(servers_.back().address.empty());
  const Service& witness = servers_.back();
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
      for (int p = 0; p < kServers; ++p) request.add_parameter_servers(servers_[p].address);
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
  // Every worker keeps the model of the switch step for the servers.
  for (auto& stub : stubs) {
    while (StatusOf(*stub).handover_model_step() != switch_step) {
      ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "no handover model";
      for (auto& w : workers_) ASSERT_FALSE(w.process->Poll()) << w.LogTail();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling progress
    }
  }
  // A step the worker does not hold is refused, naming the step.
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(seconds(60)));
    auto reader = stubs[0]->GetHandoverModel(&context, HandoverRequest(switch_step + 1));
    v1::CheckpointChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    const grpc::Status refused = reader->Finish();
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(refused.error_message().find(std::to_string(switch_step + 1)), std::string::npos)
        << refused.error_message();
  }
  // The servers stream the model from worker 1 (any replica serves: they are equal); the witness
  // too. Nothing tells them a path.
  for (auto& server : servers_) {
    auto stub = v1::ParameterServer::NewStub(MakeChannel(server.address));
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(seconds(60)));
    v1::CheckpointRequest request;
    request.set_from_worker(workers_[1].address);
    request.set_from_worker_step(switch_step);
    v1::CheckpointReply reply;
    grpc::Status status = stub->LoadCheckpoint(&context, request, &reply);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(reply.version(), switch_step);  // the model version continues from the step
  }
  // The record: worker 0 also writes the model to the workers' run directory.
  const std::string checkpoint =
      dir_ + "/checkpoints/switch-step" + std::to_string(switch_step) + ".ckpt";
  while (!fs::exists(checkpoint)) {
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "no handover checkpoint";
    for (auto& w : workers_) ASSERT_FALSE(w.process->Poll()) << w.LogTail();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Compared here, not by the product: both workers' handover models, the file, and what the
  // witness server installed are the same weights, buffers and momentum.
  auto file = ReadCheckpoint(checkpoint);
  ASSERT_TRUE(file.ok()) << file.status();
  for (auto& stub : stubs) {
    auto streamed = FetchHandoverModelForTest(*stub, switch_step);
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    ASSERT_EQ(streamed->entries.size(), file->entries.size());
    for (size_t i = 0; i < file->entries.size(); ++i) {
      EXPECT_EQ(streamed->entries[i].kind, file->entries[i].kind);
      EXPECT_EQ(streamed->entries[i].tensor.name(), file->entries[i].tensor.name());
      EXPECT_EQ(streamed->entries[i].tensor.data, file->entries[i].tensor.data);
    }
  }
  size_t compared = 0;
  // A tensor split over the servers comes as pieces "<tensor>[<first row>:<end row>]", each
  // compared with its rows of the file's tensor.
  for (const NamedTensor& t : PullAsObserver(witness.address)) {
    const testing::ServerPiece piece = testing::ReadServerTensorName(t.name());
    const CheckpointEntry* e = file->Find(TensorKind::kParameter, piece.tensor);
    if (e == nullptr) e = file->Find(TensorKind::kBuffer, piece.tensor);
    ASSERT_NE(e, nullptr) << t.name();
    EXPECT_EQ(testing::BytesFor(e->tensor, piece), t.data) << t.name();
    ++compared;
  }
  EXPECT_GT(compared, 0u);
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
  for (int p = 0; p < kServers; ++p) {
    const Service& server = servers_[p];
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
  for (double lr : {std::nan(""), -0.5, 1e300}) {
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

// What an adversarial client sends a worker: a Start naming more workers than --world (before:
// accepted, then training failed), and checkpoint paths outside the run directory (before: the
// file was written wherever the caller said).
TEST_F(SwitchTest, StartBeyondTheWorldAndCheckpointsOutsideTheRunAreRefused) {
  const std::string run = dir_ + "/run";
  fs::create_directories(run);
  workers_.push_back(
      Launch("strata-worker", "worker-0",
             {"--config", dir_ + "/job.yaml", "--rank", "0", "--world", "1", "--run-dir", run}));
  ASSERT_FALSE(workers_.back().address.empty());
  auto stub = v1::Worker::NewStub(MakeChannel(workers_[0].address));

  for (const std::string& outside :
       {dir_ + "/outside.ckpt", std::string("../escape.ckpt"), std::string("/proc/self/mem")}) {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(seconds(60)));
    v1::CheckpointRequest request;
    request.set_path(outside);
    v1::CheckpointReply reply;
    grpc::Status status = stub->SaveCheckpoint(&context, request, &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
    EXPECT_NE(status.error_message().find(outside), std::string::npos) << status.error_message();
  }
  EXPECT_FALSE(fs::exists(dir_ + "/outside.ckpt"));
  EXPECT_FALSE(fs::exists(dir_ + "/escape.ckpt"));
  {  // Inside the run directory it works, relative to it.
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(seconds(60)));
    v1::CheckpointRequest request;
    request.set_path("mine.ckpt");
    v1::CheckpointReply reply;
    grpc::Status status = stub->SaveCheckpoint(&context, request, &reply);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(ReadCheckpoint(run + "/mine.ckpt").ok());
  }

  v1::StartRequest start;
  start.set_mode(v1::SYNC_MODE_ALLREDUCE);
  start.set_steps_per_epoch(kStepsPerEpoch);
  start.add_workers(workers_[0].address);
  start.add_workers("127.0.0.1:1");
  for (auto mode : {v1::SYNC_MODE_ALLREDUCE, v1::SYNC_MODE_PS}) {
    start.set_mode(mode);
    if (mode == v1::SYNC_MODE_PS) start.add_parameter_servers("127.0.0.1:1");
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(seconds(30)));
    v1::StartReply reply;
    grpc::Status status = stub->Start(&context, start, &reply);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find("the job has 1"), std::string::npos)
        << status.error_message();
  }
  // The refusal left the worker unstarted: a correct Start is still accepted.
  start.set_mode(v1::SYNC_MODE_ALLREDUCE);
  start.clear_parameter_servers();
  start.clear_workers();
  start.add_workers(workers_[0].address);
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(seconds(30)));
  v1::StartReply reply;
  grpc::Status status = stub->Start(&context, start, &reply);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

}  // namespace
}  // namespace strata
