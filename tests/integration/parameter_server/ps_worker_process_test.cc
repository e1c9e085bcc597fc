// Real processes end to end, without the orchestrator: two strata-ps partitions and two
// strata-worker processes training a Fashion-MNIST subset asynchronously with the push/pull
// synchroniser. The servers must see every step of every worker, count the global epochs, and
// every process must exit on Stop.
#include <cstdlib>

#include <gtest/gtest.h>

#include "services/common/shard_index.h"
#include "services/parameter_server/ps_process.h"
#include "strata/v1/worker.grpc.pb.h"
#include "tests/integration/parameter_server/ps_test_util.h"

namespace strata::testing {
namespace {

constexpr int kWorkers = 2, kPartitions = 2, kExamples = 2048, kBatch = 128, kEpochs = 2;

TEST(PsWorkerProcessTest, TwoWorkersTrainAsynchronouslyAgainstTwoServers) {
  ScratchDir dir;
  const std::string job = dir / "job.yaml";
  ASSERT_TRUE(
      WriteFileAtomic(
          job,
          absl::StrCat("name: ps-worker-test\n"
                       "dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist,"
                       " max_train: ",
                       kExamples,
                       ", max_test: 200 }\n"
                       "model: { arch: mlp }\n"
                       "training: { epochs: ",
                       kEpochs, ", batch_size: ", kBatch,
                       ", lr: 0.05, momentum: 0.9, seed: 1, threads: 1 }\n"
                       "cluster: { workers: 2, parameter_servers: 2, threads_per_worker: 1 }\n"
                       "strategy: { kind: ps, consistency: asp }\n"))
          .ok());
  for (int r = 0; r < kWorkers; ++r) {  // round-robin shards
    std::vector<int64_t> mine;
    for (int64_t i = r; i < kExamples; i += kWorkers) mine.push_back(i);
    ASSERT_TRUE(WriteShardIndex(dir / absl::StrCat("shard-", r, ".idx"), mine, kExamples).ok());
  }
  const std::string init = dir / "init.ckpt";
  const std::string write_init =
      absl::StrCat(STRATA_EVALUATOR_BINARY, " --config ", job, " --write-init-checkpoint ", init,
                   " > ", dir / "init.log", " 2>&1");
  ASSERT_EQ(std::system(write_init.c_str()), 0) << ReadFile(dir / "init.log").value_or("");

  std::vector<std::unique_ptr<PsProcess>> servers, workers;
  std::vector<std::unique_ptr<Stub>> server_stubs;
  std::vector<std::unique_ptr<v1::Worker::Stub>> worker_stubs;
  v1::StartRequest start;
  start.set_mode(v1::SYNC_MODE_PS);
  for (int p = 0; p < kPartitions; ++p) {
    PsProcessOptions o;
    o.binary = STRATA_PS_BINARY;
    o.work_dir = dir.path();
    o.config = job;
    o.partition = p;
    o.partitions = kPartitions;
    o.workers = kWorkers;
    o.train_examples = kExamples;
    o.init_checkpoint = init;
    o.extra_args = {"--run-dir", dir.path()};
    auto ps = PsProcess::Launch(o);
    ASSERT_TRUE(ps.ok()) << ps.status();
    start.add_parameter_servers((*ps)->address());
    server_stubs.push_back(Connect((*ps)->address()));
    servers.push_back(std::move(*ps));
  }
  for (int r = 0; r < kWorkers; ++r) {
    auto worker = PsProcess::LaunchService(
        {STRATA_WORKER_BINARY, "--config", job, "--rank", std::to_string(r), "--world",
         std::to_string(kWorkers), "--shard-file", dir / absl::StrCat("shard-", r, ".idx"),
         "--run-dir", dir.path()},
        dir.path(), absl::StrCat("worker-", r), std::chrono::seconds(120));
    ASSERT_TRUE(worker.ok()) << worker.status();
    start.add_workers((*worker)->address());
    worker_stubs.push_back(v1::Worker::NewStub(MakeChannel((*worker)->address())));
    workers.push_back(std::move(*worker));
  }
  for (auto& stub : worker_stubs) {
    grpc::ClientContext context;
    context.set_deadline(TestDeadline());
    v1::StartReply reply;
    grpc::Status s = stub->Start(&context, start, &reply);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  auto status_of = [](v1::Worker::Stub& stub) {
    grpc::ClientContext context;
    context.set_deadline(TestDeadline());
    v1::WorkerStatus status;
    EXPECT_TRUE(stub.GetStatus(&context, v1::WorkerStatusRequest(), &status).ok());
    return status;
  };
  ASSERT_TRUE(PollUntil([&] {
    for (auto& stub : worker_stubs) {
      const v1::WorkerStatus s = status_of(*stub);
      if (!s.error().empty() || !s.finished()) return !s.error().empty();
    }
    return true;
  })) << "workers did not finish";
  int64_t total_steps = 0;
  for (auto& stub : worker_stubs) {
    const v1::WorkerStatus s = status_of(*stub);
    EXPECT_EQ(s.error(), "");
    EXPECT_TRUE(s.finished());
    EXPECT_EQ(s.epoch(), kEpochs);
    total_steps += s.step();
  }
  // Each worker: 1024 examples in batches of 64, two epochs.
  EXPECT_EQ(total_steps, kWorkers * kEpochs * (kExamples / kWorkers) / (kBatch / kWorkers));
  for (auto& stub : server_stubs) {
    const v1::ServerStatus s = GetStatus(*stub);
    EXPECT_EQ(s.pushes(), total_steps) << "partition " << s.partition();
    EXPECT_EQ(s.version(), total_steps) << "partition " << s.partition();
    EXPECT_EQ(s.rejected_pushes(), 0);
    EXPECT_EQ(s.completed_epochs(), kEpochs);
    EXPECT_FLOAT_EQ(s.lr(), 0.025f) << "ASP: lr / n per worker";
  }
  // The servers' model moved away from the initial one.
  auto initial = ReadCheckpoint(init);
  ASSERT_TRUE(initial.ok());
  for (auto& stub : server_stubs) {
    const Pulled model = RawPull(*stub);
    ASSERT_TRUE(model.status.ok());
    ASSERT_FALSE(model.tensors.empty());
    const CheckpointEntry* before = initial->Find(TensorKind::kParameter, model.tensors[0].name());
    ASSERT_NE(before, nullptr);
    EXPECT_NE(before->tensor.data, model.tensors[0].data);
  }
  for (auto& stub : worker_stubs) {
    grpc::ClientContext context;
    context.set_deadline(TestDeadline());
    v1::StopReply reply;
    EXPECT_TRUE(stub->Stop(&context, v1::StopRequest(), &reply).ok());
  }
  for (auto& stub : server_stubs) {
    grpc::ClientContext context;
    context.set_deadline(TestDeadline());
    v1::StopReply reply;
    EXPECT_TRUE(stub->Stop(&context, v1::StopRequest(), &reply).ok());
  }
  for (auto& p : servers) {
    auto code = p->WaitForExit(std::chrono::seconds(60));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0);
  }
  for (auto& p : workers) {
    auto code = p->WaitForExit(std::chrono::seconds(60));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << ReadFile(p->log_path()).value_or("");
  }
}

}  // namespace
}  // namespace strata::testing
