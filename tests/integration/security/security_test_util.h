// Helpers shared by the security tests (auth_test.cc, tls_test.cc): the service binaries, one call
// of any method through the generic stub, and a binary run to its exit with a chosen environment.
#pragma once

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "services/common/base/files.h"
#include "services/common/process/child_process.h"
#include "services/common/wire/rpc.h"
#include "services/common/wire/rpc_auth.h"

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
  SpawnOptions o;
  o.name = argv.empty() ? "" : argv[0];
  o.argv = argv;
  o.log_path = log;
  o.env = std::move(env_strings);
  std::remove(log.c_str());  // the log is appended to
  Exit result;
  auto child = ChildProcess::Spawn(o);
  if (!child.ok()) return result;
  // Killed (and reaped) by its destructor if it is still running after `limit`.
  if (!(*child)->WaitFor(limit)) {
    (*child)->Signal(SIGKILL);
    (*child)->WaitFor(std::chrono::seconds(30));
  }
  result.code = (*child)->exit_code();
  result.output = ReadFile(log).value_or("");
  return result;
}

}  // namespace strata
