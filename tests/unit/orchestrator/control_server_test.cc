// The orchestrator's control channel in-process: who can reach the socket, what it answers, the
// switch request it queues, and how the commands tell a live orchestrator from a gone one.
#include "orchestrator/run/control_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>

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
