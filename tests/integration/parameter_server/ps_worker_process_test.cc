// Real processes end to end, without the orchestrator: two strata-ps partitions and two
// strata-worker processes training a Fashion-MNIST subset asynchronously with the push/pull
// synchroniser. The servers must see every step of every worker, count the global epochs, and
// every process must exit on Stop; with a sample budget, the workers train until the servers
// have applied it, however many passes over their shards that takes.
#include <cstdlib>

#include <functional>

#include <gtest/gtest.h>

#include "services/common/wire/shard_index.h"
#include "services/parameter_server/ps_process.h"
#include "strata/v1/worker.grpc.pb.h"
#include "tests/integration/parameter_server/ps_test_util.h"
#include "tests/support/server_pieces.h"

namespace strata::testing {
namespace {

constexpr int kWorkers = 2, kPartitions = 2, kExamples = 2048, kBatch = 128, kEpochs = 2;
constexpr int kWorkerBatch = kBatch / kWorkers;

class PsWorkerProcessTest : public ::testing::Test {
 protected:
  // The job, and round-robin shards with the manifest the sharder would write beside them (a
  // worker checks its shard against the plan's manifest and its job).
  void WriteJobAndShards() {
    job_ = dir_ / "job.yaml";
    ASSERT_TRUE(
        WriteFileAtomic(
            job_,
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
    for (int r = 0; r < kWorkers; ++r) {
      std::vector<int64_t> mine;
      for (int64_t i = r; i < kExamples; i += kWorkers) mine.push_back(i);
      ASSERT_TRUE(WriteShardIndex(dir_ / absl::StrCat("shard-", r, ".idx"), mine, kExamples).ok());
    }
    ASSERT_TRUE(WriteFileAtomic(dir_ / "manifest.json", PlanManifest(kWorkers, kExamples)).ok());
  }

  // A manifest of a plan of `workers` round-robin shards of `examples` examples.
  static std::string PlanManifest(int workers, int64_t examples) {
    std::string shards;
    for (int r = 0; r < workers; ++r) {
      const int64_t count = (examples - r + workers - 1) / workers;
      absl::StrAppend(&shards, r > 0 ? ", " : "", "{\"worker\": ", r, ", \"file\": \"shard-", r,
                      ".idx\", \"count\": ", count, "}");
    }
    return absl::StrCat("{\"format\": \"strata-shard-plan\", \"examples\": ", examples,
                        ", \"parameters\": {\"workers\": ", workers, "}, \"shards\": [", shards,
                        "]}");
  }

  // Writes the job and round-robin shards, then starts the servers
  // and the workers, runs `before_start` (if any), and starts training. `sample_budget`: samples
  // the servers apply before they stop the workers (0: none).
  void StartCluster(int64_t sample_budget, const std::function<void()>& before_start = {}) {
    WriteJobAndShards();
    if (HasFatalFailure()) return;
    init_ = dir_ / "init.ckpt";
    const std::string write_init =
        absl::StrCat(STRATA_EVALUATOR_BINARY, " --config ", job_, " --write-init-checkpoint ",
                     init_, " > ", dir_ / "init.log", " 2>&1");
    ASSERT_EQ(std::system(write_init.c_str()), 0) << ReadFile(dir_ / "init.log").value_or("");

    v1::StartRequest start;
    start.set_mode(v1::SYNC_MODE_PS);
    for (int p = 0; p < kPartitions; ++p) {
      PsProcessOptions o;
      o.binary = STRATA_PS_BINARY;
      o.work_dir = dir_.path();
      o.config = job_;
      o.partition = p;
      o.partitions = kPartitions;
      o.workers = kWorkers;
      o.train_examples = kExamples;
      o.init_checkpoint = init_;
      o.sample_budget = sample_budget;
      o.extra_args = {"--run-dir", dir_.path()};
      auto ps = PsProcess::Launch(o);
      ASSERT_TRUE(ps.ok()) << ps.status();
      start.add_parameter_servers((*ps)->address());
      server_stubs_.push_back(Connect((*ps)->address()));
      servers_.push_back(std::move(*ps));
    }
    for (int r = 0; r < kWorkers; ++r) {
      auto worker = PsProcess::LaunchService(
          {STRATA_WORKER_BINARY, "--config", job_, "--rank", std::to_string(r), "--world",
           std::to_string(kWorkers), "--shard-file", dir_ / absl::StrCat("shard-", r, ".idx"),
           "--run-dir", dir_.path()},
          dir_.path(), absl::StrCat("worker-", r), std::chrono::seconds(120));
      ASSERT_TRUE(worker.ok()) << worker.status();
      start.add_workers((*worker)->address());
      worker_stubs_.push_back(v1::Worker::NewStub(MakeChannel((*worker)->address())));
      workers_.push_back(std::move(*worker));
    }
    if (before_start) before_start();
    for (auto& stub : worker_stubs_) {
      grpc::ClientContext context;
      context.set_deadline(TestDeadline());
      v1::StartReply reply;
      grpc::Status s = stub->Start(&context, start, &reply);
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
  }

  v1::WorkerStatus StatusOf(v1::Worker::Stub& stub) {
    grpc::ClientContext context;
    context.set_deadline(TestDeadline());
    v1::WorkerStatus status;
    EXPECT_TRUE(stub.GetStatus(&context, v1::WorkerStatusRequest(), &status).ok());
    return status;
  }

  // Waits until every worker finished; the worker statuses then.
  std::vector<v1::WorkerStatus> WaitForWorkers() {
    EXPECT_TRUE(PollUntil([&] {
      for (auto& stub : worker_stubs_) {
        const v1::WorkerStatus s = StatusOf(*stub);
        if (!s.error().empty() || !s.finished()) return !s.error().empty();
      }
      return true;
    })) << "workers did not finish";
    std::vector<v1::WorkerStatus> statuses;
    for (auto& stub : worker_stubs_) {
      statuses.push_back(StatusOf(*stub));
      EXPECT_EQ(statuses.back().error(), "");
      EXPECT_TRUE(statuses.back().finished());
    }
    return statuses;
  }

  void StopAll() {
    for (auto& stub : worker_stubs_) {
      grpc::ClientContext context;
      context.set_deadline(TestDeadline());
      v1::StopReply reply;
      EXPECT_TRUE(stub->Stop(&context, v1::StopRequest(), &reply).ok());
    }
    for (auto& stub : server_stubs_) {
      grpc::ClientContext context;
      context.set_deadline(TestDeadline());
      v1::StopReply reply;
      EXPECT_TRUE(stub->Stop(&context, v1::StopRequest(), &reply).ok());
    }
    for (auto& p : servers_) {
      auto code = p->WaitForExit(std::chrono::seconds(60));
      ASSERT_TRUE(code.ok()) << code.status();
      EXPECT_EQ(*code, 0);
    }
    for (auto& p : workers_) {
      auto code = p->WaitForExit(std::chrono::seconds(60));
      ASSERT_TRUE(code.ok()) << code.status();
      EXPECT_EQ(*code, 0) << ReadFile(p->log_path()).value_or("");
    }
  }

  ScratchDir dir_;
  std::string job_, init_;
  std::vector<std::unique_ptr<PsProcess>> servers_, workers_;
  std::vector<std::unique_ptr<Stub>> server_stubs_;
  std::vector<std::unique_ptr<v1::Worker::Stub>> worker_stubs_;
};

TEST_F(PsWorkerProcessTest, TwoWorkersTrainAsynchronouslyAgainstTwoServers) {
  ASSERT_NO_FATAL_FAILURE(StartCluster(0));
  int64_t total_steps = 0;
  for (const v1::WorkerStatus& s : WaitForWorkers()) {
    EXPECT_EQ(s.epoch(), kEpochs);
    total_steps += s.step();
  }
  // Each worker: 1024 examples in batches of 64, two epochs.
  EXPECT_EQ(total_steps, kWorkers * kEpochs * (kExamples / kWorkers) / kWorkerBatch);
  for (auto& stub : server_stubs_) {
    const v1::ServerStatus s = GetStatus(*stub);
    EXPECT_EQ(s.pushes(), total_steps) << "partition " << s.partition();
    EXPECT_EQ(s.version(), total_steps) << "partition " << s.partition();
    EXPECT_EQ(s.rejected_pushes(), 0);
    EXPECT_EQ(s.completed_epochs(), kEpochs);
    EXPECT_EQ(s.sample_budget(), 0);
    EXPECT_FLOAT_EQ(s.lr(), 0.025f) << "ASP: lr / n per worker";
  }
  // The servers' model moved away from the initial one.
  auto initial = ReadCheckpoint(init_);
  ASSERT_TRUE(initial.ok());
  for (auto& stub : server_stubs_) {
    const Pulled model = RawPull(*stub);
    ASSERT_TRUE(model.status.ok());
    ASSERT_FALSE(model.tensors.empty());
    const ServerPiece piece = ReadServerTensorName(model.tensors[0].name());
    const CheckpointEntry* before = initial->Find(TensorKind::kParameter, piece.tensor);
    ASSERT_NE(before, nullptr) << model.tensors[0].name();
    EXPECT_NE(BytesFor(before->tensor, piece), model.tensors[0].data);
  }
  StopAll();
}

// Strangers hold 300 connections to each server's data port, without a ticket, sending one byte
// of a hello every 3 s and reconnecting whenever closed, from before the workers start to the
// end. Before: they held the 256 slots, the workers' connections were closed unread and the
// workers stopped with "Broken pipe". Now they wait apart, each cut off 10 s after it connected,
// and training goes on as without them.
TEST_F(PsWorkerProcessTest, TrainingGoesOnWhileStrangersHoldTheDataPorts) {
  std::vector<std::unique_ptr<Strangers>> strangers;
  ASSERT_NO_FATAL_FAILURE(StartCluster(0, [&] {
    for (auto& stub : server_stubs_) {
      grpc::ClientContext context;
      context.set_deadline(TestDeadline());
      v1::DataPlaneRequest request;
      v1::DataPlaneOffer offer;
      ASSERT_TRUE(stub->DataPlane(&context, request, &offer).ok());
      // One byte each every 3 s: within the old per-read timeout of 10 s.
      strangers.push_back(std::make_unique<Strangers>(static_cast<int>(offer.port()), 300,
                                                      std::chrono::seconds(3)));
    }
  }));
  int64_t total_steps = 0;
  for (const v1::WorkerStatus& s : WaitForWorkers()) {
    EXPECT_EQ(s.epoch(), kEpochs);
    total_steps += s.step();
  }
  EXPECT_EQ(total_steps, kWorkers * kEpochs * (kExamples / kWorkers) / kWorkerBatch);
  for (auto& stub : server_stubs_) {
    const v1::ServerStatus s = GetStatus(*stub);
    EXPECT_EQ(s.pushes(), total_steps) << "partition " << s.partition();
    EXPECT_EQ(s.rejected_pushes(), 0);
  }
  StopAll();
}

// A budget of three epochs' samples for a job of two: the workers must go on past their own two
// passes until the servers report the budget spent, then stop together.
TEST_F(PsWorkerProcessTest, WorkersTrainUntilTheServersHaveAppliedTheSampleBudget) {
  constexpr int64_t kBudget = 3 * kExamples;
  ASSERT_NO_FATAL_FAILURE(StartCluster(kBudget));
  int64_t total_steps = 0, total_epochs = 0;
  for (const v1::WorkerStatus& s : WaitForWorkers()) {
    total_steps += s.step();
    total_epochs += s.epoch();
  }
  EXPECT_GT(total_epochs, kWorkers * kEpochs) << "nobody trained past its own epochs";
  for (auto& stub : server_stubs_) {
    const v1::ServerStatus s = GetStatus(*stub);
    EXPECT_EQ(s.sample_budget(), kBudget);
    // Pushes stop being applied at the one that reaches the budget; later ones are dropped.
    EXPECT_GE(s.samples(), kBudget) << "partition " << s.partition();
    EXPECT_LT(s.samples(), kBudget + kWorkerBatch) << "partition " << s.partition();
    EXPECT_EQ(s.samples(), s.pushes() * kWorkerBatch);
    EXPECT_EQ(s.pushes() + s.discarded_pushes(), total_steps) << "partition " << s.partition();
    EXPECT_LE(s.discarded_pushes(), kWorkers - 1) << "a worker went on after it was told to stop";
    EXPECT_EQ(s.completed_epochs(), 3);
  }
  StopAll();
}

// A worker given a shard index of a plan made for another job refuses it before it serves,
// naming the file and what differs: here the plan beside the index is one of three workers and
// another training-set size, while the worker's job has two workers and 2,048 examples. Seen to
// fail with the worker reading the index without CheckShardIndexFor: it started serving.
TEST_F(PsWorkerProcessTest, AWorkerRefusesAShardIndexOfAnotherJobsPlanNamingTheFile) {
  WriteJobAndShards();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(WriteFileAtomic(dir_ / "manifest.json", PlanManifest(3, 3000)).ok());
  const std::string shard = dir_ / "shard-0.idx";
  auto worker = PsProcess::LaunchService({STRATA_WORKER_BINARY, "--config", job_, "--rank", "0",
                                          "--shard-file", shard, "--run-dir", dir_.path()},
                                         dir_.path(), "worker-0", std::chrono::seconds(120));
  EXPECT_FALSE(worker.ok()) << "the worker started on another job's shard";
  const std::string log = ReadFile(dir_ / "worker-0.log").value_or("");
  EXPECT_NE(log.find(shard + ": not this worker's shard: its plan"), std::string::npos) << log;
  EXPECT_NE(log.find("has 3 shard(s), the job 2 worker(s)"), std::string::npos) << log;

  // The plan's right number of shards, for another training set: refused too.
  ASSERT_TRUE(WriteFileAtomic(dir_ / "manifest.json", PlanManifest(kWorkers, 3000)).ok());
  worker = PsProcess::LaunchService({STRATA_WORKER_BINARY, "--config", job_, "--rank", "0",
                                     "--shard-file", shard, "--run-dir", dir_.path()},
                                    dir_.path(), "worker-0-again", std::chrono::seconds(120));
  EXPECT_FALSE(worker.ok()) << "the worker started on another training set's shard";
  const std::string again = ReadFile(dir_ / "worker-0-again.log").value_or("");
  EXPECT_NE(again.find(shard + ": not this worker's shard"), std::string::npos) << again;
}

}  // namespace
}  // namespace strata::testing
