// The orchestrator's control channel in-process: who can reach the socket, what it answers, the
// switch request it queues, and how the commands tell a live orchestrator from a gone one.
#include "orchestrator/run/control_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

namespace strata {
namespace {

v1::RunInfo Info() {
  v1::RunInfo info;
  info.set_name("control-test");
  info.set_pid(::getpid());
  info.set_phase("allreduce");
  info.set_switch_job(true);
  return info;
}

// A run directory of its own (`suffix` below a fresh temporary directory), removed with the test:
// the temporary directory it made, and nothing above it.
class RunDir {
 public:
  explicit RunDir(const std::string& suffix = "") {
    std::string pattern = ::testing::TempDir() + "/control-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) return;
    root_ = pattern;
    path_ = suffix.empty() ? root_ : root_ + "/" + suffix;
    std::filesystem::create_directories(path_);
  }
  ~RunDir() {
    if (root_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string root_, path_;
};

TEST(ControlSocket, OnlyItsOwnerCanEnterTheSocketsDirectory) {
  RunDir run;
  ASSERT_FALSE(run.path().empty());
  // Left behind by an orchestrator killed in this run directory: replaced, not trusted.
  std::filesystem::create_directories(run.path() + "/.control/old");
  ::chmod((run.path() + "/.control").c_str(), 0777);
  // A run directory too long for a socket path under it: the socket goes to the temporary
  // directory.
  RunDir deep(std::string(120, 'd'));
  for (const RunDir* dir : {&run, &deep}) {
    auto server = RunControlServer::Start(dir->path(), Info);
    ASSERT_TRUE(server.ok()) << server.status();
    const std::filesystem::path socket = (*server)->socket_path();
    EXPECT_TRUE(socket.is_absolute()) << socket;
    struct stat st;
    ASSERT_EQ(::stat(socket.parent_path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u) << "the directory is the access check";
    EXPECT_EQ(st.st_uid, ::geteuid());
    ASSERT_EQ(::stat(socket.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_LT(socket.string().size(), 108u) << "a Unix socket path holds at most 107 bytes";
    if (dir == &run) {
      EXPECT_EQ(socket.parent_path(), std::filesystem::path(run.path()) / ".control");
      EXPECT_FALSE(std::filesystem::exists(socket.parent_path() / "old"));
    } else {
      EXPECT_EQ(socket.string().rfind(std::filesystem::temp_directory_path().string(), 0), 0u)
          << socket;
    }
  }
}

TEST(ControlSocket, AnswersWithTheRunAndQueuesOneSwitchRequest) {
  RunDir run;
  auto server = RunControlServer::Start(run.path(), Info);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string socket = (*server)->socket_path();
  auto info = GetRunInfo(socket, std::chrono::seconds(30));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name(), "control-test");
  EXPECT_EQ(info->pid(), ::getpid());
  EXPECT_TRUE(info->switch_job());
  EXPECT_FALSE((*server)->TakeSwitchRequest()) << "nothing asked yet";
  ASSERT_TRUE(RequestSwitchNow(socket, "test", std::chrono::seconds(30)).ok());
  ASSERT_TRUE(RequestSwitchNow(socket, "test", std::chrono::seconds(30)).ok());
  EXPECT_TRUE((*server)->TakeSwitchRequest());
  EXPECT_FALSE((*server)->TakeSwitchRequest()) << "two calls before a step are one request";
}

// Predict goes to the handler the run gave (a stream job's, which passes it on to a replica), and
// its refusal comes back as it was; a run that gave none refuses it, saying which runs answer.
TEST(ControlSocket, PassesPredictToTheRunsHandlerOrSaysItHasNone) {
  RunDir plain, stream;
  auto without = RunControlServer::Start(plain.path(), Info);
  ASSERT_TRUE(without.ok()) << without.status();
  v1::RunPredictRequest request;
  request.set_replica(1);
  auto refused = PredictThroughRun((*without)->socket_path(), request, std::chrono::seconds(30));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("its final model answers"), std::string::npos)
      << refused.status();

  auto with = RunControlServer::Start(
      stream.path(), Info, [](const v1::RunPredictRequest& r, v1::PredictReply* reply) {
        if (r.replica() != 1) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no such");
        reply->set_replica(1);
        reply->set_model_version(42);
        return grpc::Status::OK;
      });
  ASSERT_TRUE(with.ok()) << with.status();
  auto answered = PredictThroughRun((*with)->socket_path(), request, std::chrono::seconds(30));
  ASSERT_TRUE(answered.ok()) << answered.status();
  EXPECT_EQ(answered->model_version(), 42u);
  request.set_replica(3);
  auto wrong = PredictThroughRun((*with)->socket_path(), request, std::chrono::seconds(30));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("no such"), std::string::npos) << wrong.status();
}

TEST(ControlSocket, TellsALiveOrchestratorFromAGoneOne) {
  const double now = static_cast<double>(std::time(nullptr));
  RunDir run;
  std::string socket, dir;
  {
    auto server = RunControlServer::Start(run.path(), Info);
    ASSERT_TRUE(server.ok()) << server.status();
    socket = (*server)->socket_path();
    dir = std::filesystem::path(socket).parent_path();
    // However old status.json is: the socket answers.
    EXPECT_EQ(ProbeOrchestrator(socket, 0), OrchestratorLiveness::kAlive);
  }
  EXPECT_FALSE(std::filesystem::exists(dir)) << "the socket's directory outlived the server";
  EXPECT_EQ(ProbeOrchestrator(socket, now), OrchestratorLiveness::kGone);
  EXPECT_EQ(GetRunInfo(socket, std::chrono::seconds(30)).status().code(),
            absl::StatusCode::kUnavailable);
  // A run without a socket (its orchestrator in a container): status.json's age decides.
  EXPECT_EQ(ProbeOrchestrator("", now), OrchestratorLiveness::kUnknown);
  EXPECT_EQ(ProbeOrchestrator("", now - 120), OrchestratorLiveness::kGone);
}

}  // namespace
}  // namespace strata
