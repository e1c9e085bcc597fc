// The orchestrator's control channel in-process: who can reach the socket, what it answers, the
// switch request it queues, and how the commands tell a live orchestrator from a gone one.
#include "orchestrator/run/control_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>

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

TEST(ControlSocket, OnlyItsOwnerCanEnterTheSocketsDirectory) {
  auto server = RunControlServer::Start(Info);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::filesystem::path socket = (*server)->socket_path();
  struct stat st;
  ASSERT_EQ(::stat(socket.parent_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "the directory is the access check";
  EXPECT_EQ(st.st_uid, ::geteuid());
  ASSERT_EQ(::stat(socket.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  // Short whatever the run directory's path: a Unix socket path holds at most 107 bytes.
  EXPECT_LT(socket.string().size(), 108u);
}

TEST(ControlSocket, AnswersWithTheRunAndQueuesOneSwitchRequest) {
  auto server = RunControlServer::Start(Info);
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
  std::string socket, dir;
  {
    auto server = RunControlServer::Start(Info);
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
