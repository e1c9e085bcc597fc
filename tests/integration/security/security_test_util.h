// Helpers shared by the security tests (auth_test.cc, tls_test.cc): the service binaries, one call
// of any method through the generic stub, and a binary run to its exit with a chosen environment.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "services/common/child_process.h"
#include "services/common/files.h"
#include "services/common/rpc.h"
#include "services/common/rpc_auth.h"

namespace strata {

inline std::string Bin(const std::string& name) { return std::string(STRATA_BIN_DIR) + "/" + name; }

// A call of `method` ("/pkg.Service/Method") with one empty message (the serialized default of
// every request type) through the generic stub, whatever the method's kind: unary and streaming
// calls alike end in Finish's status. `authorization` (if not empty) is sent as that header.
inline grpc::Status CallWithDefaultRequest(const std::shared_ptr<grpc::Channel>& channel,
                                           const std::string& method,
                                           const std::string& authorization) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(std::chrono::seconds(30)));
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      stub.PrepareCall(&context, method, &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](intptr_t expected) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), expected);
  };
  call->StartCall(reinterpret_cast<void*>(1));
  step(1);
  grpc::Slice empty{std::string()};
  grpc::ByteBuffer request(&empty, 1);
  call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
  step(2);
  grpc::ByteBuffer reply;
  call->Read(&reply, reinterpret_cast<void*>(3));
  step(3);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  step(4);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

struct Exit {
  int code = -1;
  std::string output;
};

// Runs `argv` with this process's environment minus STRATA_RUN_TOKEN, plus `extra_env`, until it
// exits or `limit` passes (then it is killed).
inline Exit RunWithoutToken(const std::vector<std::string>& argv, const std::string& log,
                            const std::vector<std::string>& extra_env = {},
                            std::chrono::seconds limit = std::chrono::seconds(120)) {
  std::vector<std::string> env_strings;
  for (std::string& e : ChildEnvironment()) {
    if (!absl::StartsWith(e, absl::StrCat(kRunTokenEnv, "="))) env_strings.push_back(std::move(e));
  }
  env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> env, args;
  for (auto& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = -1;
  Exit result;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return result;
  const auto until = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a pid
  }
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.output = ReadFile(log).value_or("");
  return result;
}

}  // namespace strata
