// gRPC settings shared by every client and server: message limits raised explicitly on both ends
// (tensors still travel in chunks far below them) and deadlines from durations.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

namespace strata {

// Chunks are <= 1 MiB; the limit leaves room for a whole small model in one message (tests,
// Evaluate) while refusing anything absurd.
inline constexpr int kMaxMessageBytes = 64 << 20;

// Message limits and a quick reconnect after a peer restarts.
grpc::ChannelArguments DefaultChannelArguments();
// Every call on the channel carries this process's run token (rpc_auth.h) as
// `authorization: Bearer <token>`.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target);
// With arguments of the caller's, built on DefaultChannelArguments().
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const grpc::ChannelArguments& args);
// Over a socket the caller connected (and tuned) itself; `target` names it in messages. The
// channel owns `fd`. Calls carry the run token like MakeChannel's.
std::shared_ptr<grpc::Channel> MakeChannelFromFd(const std::string& target, int fd,
                                                 const grpc::ChannelArguments& args);

// Applies message limits and keepalive to a server under construction.
void ConfigureServer(grpc::ServerBuilder* builder);

inline std::chrono::system_clock::time_point DeadlineAfter(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

// Binds `address` ("host:0" picks a free port) and returns the bound port in *port. The services
// are also served on every address of `also_listen` (such as "unix-abstract:NAME" for peers on
// the same machine). On every address, every method of every service refuses a call without this
// process's run token (rpc_auth.h) with UNAUTHENTICATED before its handler runs, except the
// standard health check (grpc.health.v1.Health/Check), which every server also serves.
std::unique_ptr<grpc::Server> StartServer(const std::string& address,
                                          const std::vector<grpc::Service*>& services, int* port,
                                          const std::vector<std::string>& also_listen = {});

}  // namespace strata
