// strata-ps against a hostile client: checkpoint paths outside --run-dir, devices, FIFOs and
// lying checkpoint headers, and pushes that are finite but would leave the model non-finite.
// Each is refused with a status naming the problem, the model stays as it was, and the server
// keeps serving.
#include <sys/stat.h>

#include <cfloat>
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "services/parameter_server/ps_process.h"
#include "tests/integration/parameter_server/ps_test_util.h"

namespace strata::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kTraining[] =
    "{ lr: 0.1, momentum: 0.9, weight_decay: 0.01, batch_size: 8, epochs: 1 }";

// A checkpoint whose only tensor claims shape [-1] with 2^64-4 bytes, plus one of 4 bytes: the
// sizes sum to 0 modulo 2^64, so with a valid checksum only the parser's own checks refuse it.
std::string LyingCheckpoint() {
  nlohmann::json tensor = {{"name", "fc1.weight"}, {"shape", {-1}}, {"dtype", "float32"},
                           {"kind", "parameter"}, {"bytes", uint64_t{0} - 4}};
  nlohmann::json other = {{"name", "fc1.bias"}, {"shape", {1}}, {"dtype", "float32"},
                          {"kind", "parameter"}, {"bytes", 4}};
  const std::string meta =
      nlohmann::json{{"epoch", 0}, {"step", 0}, {"version", 0}, {"tensors", {tensor, other}}}
          .dump();
  std::string out = "STRATACK";
  auto put = [&](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  put(kCheckpointFormatVersion);
  put(static_cast<uint32_t>(meta.size()));
  out += meta;
  put(static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(out.data()), static_cast<uInt>(out.size()))));
  return out;
}

class PsInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = dir_ / "run";
    fs::create_directories(run_);
    config_ = WriteJobSpec(dir_, kTraining);
    model_ = SmallModel::Make(/*with_momentum=*/true);
    checkpoint_ = run_ + "/model.ckpt";
    ASSERT_TRUE(WriteCheckpoint(checkpoint_, model_.ToCheckpoint(/*version=*/5)).ok());
  }

  std::unique_ptr<PsProcess> Launch(bool loaded, bool with_run_dir = true) {
    PsProcessOptions o;
    o.binary = STRATA_PS_BINARY;
    o.work_dir = dir_.path();
    o.config = config_;
    o.workers = 1;
    o.consistency = "asp";
    o.train_examples = 1000;
    if (loaded) o.init_checkpoint = checkpoint_;
    if (with_run_dir) o.extra_args = {"--run-dir", run_};
    auto p = PsProcess::Launch(o);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }

  static grpc::Status Checkpoint(Stub& stub, bool save, const std::string& path,
                                 v1::CheckpointReply* reply = nullptr) {
    grpc::ClientContext context;
    // Short: a FIFO that blocked the server thread would show as DEADLINE_EXCEEDED.
    context.set_deadline(DeadlineAfter(std::chrono::seconds(10)));
    v1::CheckpointRequest request;
    request.set_path(path);
    v1::CheckpointReply ignored;
    return save ? stub.SaveCheckpoint(&context, request, reply ? reply : &ignored)
                : stub.LoadCheckpoint(&context, request, reply ? reply : &ignored);
  }

  std::vector<v1::PushRequest> PushOf(float gradient, double lr) const {
    std::vector<NamedTensor> tensors;
    for (const auto& p : model_.params) tensors.push_back(Filled(p.name(), p.spec.shape, gradient, 0));
    for (const auto& b : model_.buffers) tensors.push_back(Filled(b.name(), b.spec.shape, 1, 0));
    std::vector<v1::PushRequest> m = {Header(0, 5)};
    m[0].mutable_header()->set_lr(lr);
    for (auto& c : Chunks(tensors)) m.push_back(std::move(c));
    return m;
  }

  ScratchDir dir_;
  std::string run_, config_, checkpoint_;
  SmallModel model_;
};

TEST_F(PsInputTest, CheckpointPathsOutsideTheRunDirectoryAreRefused) {
  auto ps = Launch(/*loaded=*/true);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());

  // Before: the file was written wherever the caller said.
  for (const std::string& outside : {dir_ / "outside.ckpt", std::string("../escape.ckpt")}) {
    grpc::Status s = Checkpoint(*stub, /*save=*/true, outside);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
    EXPECT_NE(s.error_message().find(outside), std::string::npos) << s.error_message();
  }
  EXPECT_FALSE(fs::exists(dir_ / "outside.ckpt"));
  EXPECT_FALSE(fs::exists(dir_ / "escape.ckpt"));
  v1::CheckpointReply reply;
  grpc::Status saved = Checkpoint(*stub, /*save=*/true, "saved/ps-0.ckpt", &reply);
  ASSERT_TRUE(saved.ok()) << saved.error_message();
  EXPECT_TRUE(ReadCheckpoint(run_ + "/saved/ps-0.ckpt").ok());

  // Before: any readable file was parsed, and /etc/passwd's failure said what it held.
  grpc::Status s = Checkpoint(*stub, /*save=*/false, "/etc/passwd");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_EQ(s.error_message().find("root:"), std::string::npos) << s.error_message();

  // A link in the run directory to /dev/zero (before: read until the server ran out of memory).
  fs::create_symlink("/dev/zero", run_ + "/zero.ckpt");
  s = Checkpoint(*stub, /*save=*/false, "zero.ckpt");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();

  // A FIFO inside the run directory (before: the handler blocked for ever waiting for a writer).
  ASSERT_EQ(mkfifo((run_ + "/fifo.ckpt").c_str(), 0600), 0);
  s = Checkpoint(*stub, /*save=*/false, "fifo.ckpt");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("not a regular file"), std::string::npos) << s.error_message();

  // A lying header inside the run directory (before: an exception, UNKNOWN to the caller).
  ASSERT_TRUE(WriteFileAtomic(run_ + "/lying.ckpt", LyingCheckpoint()).ok());
  s = Checkpoint(*stub, /*save=*/false, "lying.ckpt");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DATA_LOSS) << s.error_message();

  // Nothing changed and the server still serves.
  const v1::ServerStatus status = GetStatus(*stub);
  EXPECT_TRUE(status.loaded());
  EXPECT_EQ(status.version(), 5);
}

TEST_F(PsInputTest, WithoutARunDirectoryTheCheckpointRpcsTakeNoPath) {
  auto ps = Launch(/*loaded=*/true, /*with_run_dir=*/false);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  grpc::Status s = Checkpoint(*stub, /*save=*/false, checkpoint_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("--run-dir"), std::string::npos) << s.error_message();
  s = Checkpoint(*stub, /*save=*/true, dir_ / "anywhere.ckpt");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_FALSE(fs::exists(dir_ / "anywhere.ckpt"));
}

TEST_F(PsInputTest, InitCheckpointWithALyingHeaderEndsTheServerCleanly) {
  // Before: the exception escaped main and the process aborted (killed by SIGABRT).
  const std::string lying = run_ + "/lying.ckpt";
  ASSERT_TRUE(WriteFileAtomic(lying, LyingCheckpoint()).ok());
  PsProcessOptions o;
  o.binary = STRATA_PS_BINARY;
  o.work_dir = dir_.path();
  o.config = config_;
  o.train_examples = 1000;
  o.init_checkpoint = lying;
  auto refused = PsProcess::Launch(o);
  ASSERT_FALSE(refused.ok());
  const std::string message(refused.status().message());
  EXPECT_NE(message.find("exited with code"), std::string::npos) << message;  // not a signal
  EXPECT_NE(message.find("negative dimension"), std::string::npos) << message;
}

TEST_F(PsInputTest, PushesThatWouldPoisonTheModelAreRefusedAndChangeNothing) {
  auto ps = Launch(/*loaded=*/true);
  ASSERT_TRUE(ps);
  auto stub = Connect(ps->address());
  const Pulled before = RawPull(*stub);
  ASSERT_TRUE(before.status.ok());

  // Before: 1e300 is finite as a double, became inf as the float rate, and every weight NaN.
  grpc::Status s = RawPush(*stub, PushOf(0.5f, 1e300));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("learning rate"), std::string::npos) << s.error_message();
  // Finite gradients near FLT_MAX at an admissible rate: the step overflows to inf.
  s = RawPush(*stub, PushOf(FLT_MAX / 2, 10.0));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("non-finite"), std::string::npos) << s.error_message();

  const Pulled after = RawPull(*stub);
  ASSERT_TRUE(after.status.ok());
  EXPECT_EQ(after.version, before.version);
  ASSERT_EQ(after.tensors.size(), before.tensors.size());
  for (size_t i = 0; i < after.tensors.size(); ++i) {
    EXPECT_EQ(after.tensors[i].data, before.tensors[i].data) << after.tensors[i].name();
  }
  const v1::ServerStatus status = GetStatus(*stub);
  EXPECT_EQ(status.pushes(), 0);
  EXPECT_EQ(status.rejected_pushes(), 2);
  // The momentum is untouched too: an ordinary push afterwards gives finite weights.
  const Pulled good = RawPushPull(*stub, PushOf(0.5f, 0));
  ASSERT_TRUE(good.status.ok()) << good.status.error_message();
  EXPECT_EQ(good.version, 6);
  for (const auto& t : good.tensors) {
    for (int64_t k = 0; k < t.spec.numel(); ++k) ASSERT_TRUE(std::isfinite(t.floats()[k])) << t.name();
  }
}

}  // namespace
}  // namespace strata::testing
