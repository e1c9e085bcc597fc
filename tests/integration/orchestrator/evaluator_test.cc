// strata-evaluator as a process: scores a checkpoint, streams the metrics to a watcher, refuses
// bad requests with a message naming the problem, and exits on Stop.
#include <gtest/gtest.h>

#include <thread>

#include "services/common/base/files.h"
#include "services/common/process/child_process.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/tensor_codec.h"
#include "strata/v1/evaluator.grpc.pb.h"
#include "tests/integration/orchestrator/cli_test_util.h"

namespace strata::testing {
namespace {

constexpr char kJob[] = R"(name: eval-test
dataset: { name: fashion-mnist, path: /usr/share/datasets/fashion-mnist, max_train: 256, max_test: 500 }
model: { arch: mlp }
)";

class EvaluatorProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("evaluator");
    ASSERT_FALSE(dir_.empty());
    WriteText(dir_ + "/job.yaml", kJob);
    SpawnOptions o;
    o.name = "evaluator";
    o.argv = {BinDir() + "/strata-evaluator",
              "--config",
              dir_ + "/job.yaml",
              "--listen",
              "127.0.0.1:0",
              "--port-file",
              dir_ + "/port",
              "--fetch-deadline-s",
              "10",
              "--run-dir",
              dir_};
    o.log_path = dir_ + "/evaluator.log";
    auto child = ChildProcess::Spawn(o);
    ASSERT_TRUE(child.ok()) << child.status();
    process_ = std::move(*child);
    ASSERT_TRUE(Eventually([&] { return Exists(dir_ + "/port") || process_->Poll(); },
                           std::chrono::seconds(120)))
        << Slurp(o.log_path);
    ASSERT_FALSE(process_->exited()) << Slurp(o.log_path);
    stub_ = v1::Evaluator::NewStub(MakeChannel(
        "127.0.0.1:" + Slurp(dir_ + "/port").substr(0, Slurp(dir_ + "/port").find('\n'))));
  }
  void TearDown() override {
    process_.reset();  // kills it if a test left it running
    RunCommand("rm -rf " + dir_);
  }

  std::string dir_;
  std::unique_ptr<ChildProcess> process_;
  std::unique_ptr<v1::Evaluator::Stub> stub_;
};

TEST_F(EvaluatorProcess, ScoresACheckpointAndStreamsTheMetrics) {
  const std::string checkpoint = dir_ + "/init.ckpt";
  CommandResult init = RunCommand(BinDir() + "/strata-evaluator --config " + dir_ +
                                  "/job.yaml --write-init-checkpoint " + checkpoint);
  ASSERT_EQ(init.exit_code, 0) << init.output;

  // A watcher that is already listening receives the evaluation.
  grpc::ClientContext watch_context;
  watch_context.set_deadline(DeadlineAfter(std::chrono::seconds(120)));
  auto watch = stub_->Watch(&watch_context, v1::WatchMetricsRequest());
  v1::EvalMetrics watched;
  std::thread watcher([&] { watch->Read(&watched); });

  v1::EvaluateModelRequest request;
  request.set_epoch(3);
  request.set_phase("allreduce");
  request.set_checkpoint(checkpoint);
  request.set_train_loss(0.5);
  request.set_wall_s(12.0);
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(std::chrono::seconds(120)));
  v1::EvalMetrics m;
  grpc::Status s = stub_->Evaluate(&context, request, &m);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(m.epoch(), 3);
  EXPECT_EQ(m.phase(), "allreduce");
  EXPECT_EQ(m.examples(), 500);
  EXPECT_DOUBLE_EQ(m.train_loss(), 0.5);
  EXPECT_DOUBLE_EQ(m.wall_s(), 12.0);
  // An untrained 10-class model: loss near ln(10) = 2.30, accuracy near chance.
  EXPECT_GT(m.val_loss(), 1.5);
  EXPECT_LT(m.val_loss(), 3.5);
  EXPECT_LT(m.val_acc(), 0.4);
  watcher.join();
  EXPECT_EQ(watched.epoch(), 3);
  EXPECT_DOUBLE_EQ(watched.val_loss(), m.val_loss());
  watch_context.TryCancel();

  grpc::ClientContext status_context;
  v1::EvaluatorStatus status;
  ASSERT_TRUE(stub_->GetStatus(&status_context, v1::EvaluatorStatusRequest(), &status).ok());
  EXPECT_EQ(status.evaluations(), 1);
  EXPECT_EQ(status.last_epoch(), 3);
}

TEST_F(EvaluatorProcess, RefusesBadRequestsNamingTheProblemAndKeepsServing) {
  {
    grpc::ClientContext context;
    v1::EvalMetrics m;
    grpc::Status s = stub_->Evaluate(&context, v1::EvaluateModelRequest(), &m);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("source"), std::string::npos) << s.error_message();
  }
  {
    // A worker that is not there: the message names its address.
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(std::chrono::seconds(60)));
    v1::EvaluateModelRequest request;
    request.set_worker("127.0.0.1:1");
    v1::EvalMetrics m;
    grpc::Status s = stub_->Evaluate(&context, request, &m);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.error_message().find("127.0.0.1:1"), std::string::npos) << s.error_message();
  }
  {
    // A tensor the model does not have.
    NamedTensor stray = NamedTensor::Zeros({"not_a_layer.weight", {2, 2}, DType::kFloat32});
    auto chunks = EncodeAll({stray});
    ASSERT_TRUE(chunks.ok());
    v1::EvaluateRequest request;
    for (const auto& c : *chunks) *request.add_tensors() = c;
    grpc::ClientContext context;
    v1::EvalMetrics m;
    grpc::Status s = stub_->EvaluateTensors(&context, request, &m);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("not_a_layer.weight"), std::string::npos) << s.error_message();
  }
  EXPECT_FALSE(process_->Poll()) << "a bad request must not end the evaluator";

  grpc::ClientContext context;
  v1::StopReply reply;
  ASSERT_TRUE(stub_->Stop(&context, v1::StopRequest(), &reply).ok());
  EXPECT_TRUE(process_->WaitFor(std::chrono::seconds(30)));
  EXPECT_TRUE(process_->succeeded()) << process_->ExitDescription();
}

// Peak resident memory of a process, from /proc (kB); -1 if unreadable.
long PeakRssKb(pid_t pid) {
  const std::string status = Slurp("/proc/" + std::to_string(pid) + "/status");
  const size_t at = status.find("VmHWM:");
  return at == std::string::npos ? -1 : std::atol(status.c_str() + at + 6);
}

TEST_F(EvaluatorProcess, RefusesCheckpointsOutsideTheRunAndHeadersLargerThanTheirData) {
  {
    // Before: any file the evaluator could read was parsed as a checkpoint.
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(std::chrono::seconds(60)));
    v1::EvaluateModelRequest request;
    request.set_checkpoint("/etc/passwd");
    v1::EvalMetrics m;
    grpc::Status s = stub_->Evaluate(&context, request, &m);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    EXPECT_NE(s.error_message().find("/etc/passwd"), std::string::npos) << s.error_message();
  }
  {
    // A 16-byte tensor under a header declaring 1 GiB. Before: the 1 GiB was allocated, zeroed,
    // and only then found missing.
    const long before = PeakRssKb(process_->pid());
    ASSERT_GT(before, 0);
    v1::EvaluateRequest request;
    v1::TensorChunk* chunk = request.add_tensors();
    chunk->mutable_header()->set_name("fc1.weight");
    chunk->mutable_header()->add_shape(int64_t{1} << 28);
    chunk->mutable_header()->set_dtype(v1::DTYPE_FLOAT32);
    chunk->set_data(std::string(16, '\0'));
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(std::chrono::seconds(60)));
    v1::EvalMetrics m;
    grpc::Status s = stub_->EvaluateTensors(&context, request, &m);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    const long grew_mb = (PeakRssKb(process_->pid()) - before) / 1024;
    EXPECT_LT(grew_mb, 256) << "the evaluator's peak memory grew by " << grew_mb << " MiB";
  }
  EXPECT_FALSE(process_->Poll()) << "a bad request must not end the evaluator";
}

}  // namespace
}  // namespace strata::testing
