// LoadCheckpoint from a worker (the switch's streamed handover) against a real strata-ps: the model
// arrives whole from an honest worker; a worker that lies about sizes or order, stops half way,
// holds another step or cannot be reached is refused with an error naming it, and the server
// keeps the model it had. The worker here is a fake served by the test, so it can lie.
#include <functional>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "services/parameter_server/ps_process.h"
#include "strata/v1/worker.grpc.pb.h"
#include "tests/integration/parameter_server/ps_test_util.h"

namespace strata::testing {
namespace {

constexpr char kTraining[] = "{ lr: 0.1, momentum: 0.9, batch_size: 8, epochs: 1 }";
constexpr int64_t kStep = 42;

// Serves GetHandoverModel for step kStep; `send` decides what goes on the wire.
class FakeWorker final : public v1::Worker::Service {
 public:
  using Sender = std::function<grpc::Status(const std::string& model,
                                            grpc::ServerWriter<v1::CheckpointChunk>*)>;
  FakeWorker(std::string model, Sender send) : model_(std::move(model)), send_(std::move(send)) {}

  grpc::Status GetHandoverModel(grpc::ServerContext*, const v1::HandoverModelRequest* request,
                                grpc::ServerWriter<v1::CheckpointChunk>* writer) override {
    if (request->step() != kStep) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no model of that step");
    }
    return send_(model_, writer);
  }

 private:
  std::string model_;
  Sender send_;
};

v1::CheckpointChunk Chunk(uint64_t total, uint64_t offset, std::string data) {
  v1::CheckpointChunk c;
  c.set_total_bytes(total);
  c.set_offset(offset);
  c.set_data(std::move(data));
  return c;
}

// Honest: the model in two pieces.
grpc::Status SendHonestly(const std::string& m, grpc::ServerWriter<v1::CheckpointChunk>* w) {
  const size_t half = m.size() / 2;
  w->Write(Chunk(m.size(), 0, m.substr(0, half)));
  w->Write(Chunk(m.size(), half, m.substr(half)));
  return grpc::Status::OK;
}

class HandoverLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PsProcessOptions o;
    o.binary = STRATA_PS_BINARY;
    o.work_dir = dir_.path();
    o.config = WriteJobSpec(dir_, kTraining);
    o.workers = 1;
    auto ps = PsProcess::Launch(o);
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = std::move(*ps);
    stub_ = Connect(ps_->address());
    auto bytes = SerializeCheckpoint(honest_.ToCheckpoint(/*version=*/kStep));
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    model_ = *bytes;
  }

  // Serves a fake worker with `send` and returns its address; it lives as long as the test.
  std::string ServeWorker(FakeWorker::Sender send) {
    workers_.push_back(std::make_unique<FakeWorker>(model_, std::move(send)));
    int port = 0;
    servers_.push_back(StartServer("127.0.0.1:0", {workers_.back().get()}, &port));
    EXPECT_NE(servers_.back(), nullptr);
    return "127.0.0.1:" + std::to_string(port);
  }

  grpc::Status LoadFrom(const std::string& worker, int64_t step) {
    grpc::ClientContext context;
    context.set_deadline(TestDeadline());
    v1::CheckpointRequest request;
    request.set_from_worker(worker);
    request.set_from_worker_step(step);
    v1::CheckpointReply reply;
    return stub_->LoadCheckpoint(&context, request, &reply);
  }

  // The server holds exactly `model`'s parameters and buffers.
  void ExpectHolds(const SmallModel& model) {
    Pulled pulled = RawPull(*stub_);
    ASSERT_TRUE(pulled.status.ok()) << pulled.status.error_message();
    for (const auto* group : {&model.params, &model.buffers}) {
      for (const NamedTensor& t : *group) {
        const NamedTensor* got = pulled.Find(t.name());
        ASSERT_NE(got, nullptr) << t.name();
        EXPECT_EQ(got->data, t.data) << t.name();
      }
    }
  }

  ScratchDir dir_;
  SmallModel honest_ = SmallModel::Make(/*with_momentum=*/true);
  std::string model_;
  std::unique_ptr<PsProcess> ps_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
};

TEST_F(HandoverLoadTest, AServerLoadsTheModelAWorkerStreams) {
  ASSERT_TRUE(LoadFrom(ServeWorker(SendHonestly), kStep).ok());
  ExpectHolds(honest_);
  EXPECT_EQ(GetStatus(*stub_).version(), kStep);
}

TEST_F(HandoverLoadTest, ALyingOrFailingWorkerIsRefusedAndTheModelStays) {
  ASSERT_TRUE(LoadFrom(ServeWorker(SendHonestly), kStep).ok());
  using W = grpc::ServerWriter<v1::CheckpointChunk>;
  const std::vector<std::pair<std::string, FakeWorker::Sender>> liars = {
      {"announces a petabyte",
       [](const std::string& m, W* w) {
         w->Write(Chunk(uint64_t{1} << 50, 0, m));
         return grpc::Status::OK;
       }},
      {"skips ahead",
       [](const std::string& m, W* w) {
         w->Write(Chunk(m.size(), 7, m.substr(7)));
         return grpc::Status::OK;
       }},
      {"sends more than it announced",
       [](const std::string& m, W* w) {
         w->Write(Chunk(m.size(), 0, m));
         w->Write(Chunk(m.size(), m.size(), "x"));
         return grpc::Status::OK;
       }},
      {"changes the total half way",
       [](const std::string& m, W* w) {
         w->Write(Chunk(m.size(), 0, m.substr(0, 10)));
         w->Write(Chunk(m.size() + 1, 10, m.substr(10)));
         return grpc::Status::OK;
       }},
      {"stops half way",
       [](const std::string& m, W* w) {
         w->Write(Chunk(m.size(), 0, m.substr(0, m.size() / 2)));
         return grpc::Status::OK;
       }},
      {"sends nothing", [](const std::string&, W*) { return grpc::Status::OK; }},
      {"flips a byte (CRC)",
       [](const std::string& m, W* w) {
         std::string bad = m;
         bad[bad.size() / 2] ^= 0x5a;
         w->Write(Chunk(bad.size(), 0, bad));
         return grpc::Status::OK;
       }},
      {"fails the call",
       [](const std::string&, W*) {
         return grpc::Status(grpc::StatusCode::INTERNAL, "worker broke");
       }},
  };
  for (const auto& [what, send] : liars) {
    const std::string worker = ServeWorker(send);
    grpc::Status s = LoadFrom(worker, kStep);
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_NE(s.error_message().find(worker), std::string::npos)
        << what << ": " << s.error_message();
    ExpectHolds(honest_);
  }
  // A step the worker does not hold, and no step at all.
  const std::string worker = ServeWorker(SendHonestly);
  EXPECT_EQ(LoadFrom(worker, kStep + 1).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(LoadFrom(worker, 0).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectHolds(honest_);
  // The server keeps serving.
  EXPECT_TRUE(LoadFrom(worker, kStep).ok());
}

TEST_F(HandoverLoadTest, AWorkerThatIsGoneIsNamed) {
  std::string gone;
  {
    int port = 0;
    FakeWorker worker(model_, SendHonestly);
    auto server = StartServer("127.0.0.1:0", {&worker}, &port);
    ASSERT_NE(server, nullptr);
    gone = "127.0.0.1:" + std::to_string(port);
    server->Shutdown();
  }
  grpc::Status s = LoadFrom(gone, kStep);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error_message().find(gone), std::string::npos) << s.error_message();
}

}  // namespace
}  // namespace strata::testing
