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
// `authorization: Bearer <token>`. With TLS on (tls.h), the channel trusts only the run's CA,
// verifies the server's certificate against the run's server name, and under `mutual` presents the
// client certificate.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target);
// With arguments of the caller's, built on DefaultChannelArguments().
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const grpc::ChannelArguments& args);
// Over a socket the caller connected (and tuned) itself; `target` names it in messages. The
// channel owns `fd`. Calls carry the run token like MakeChannel's. Plaintext only: with TLS on,
// `fd` is closed and the channel is MakeChannel(target, args), never a plaintext one.
std::shared_ptr<grpc::Channel> MakeChannelFromFd(const std::string& target, int fd,
                                                 const grpc::ChannelArguments& args);
// True when this process's channels and servers use TLS (callers that would connect a socket of
// their own for MakeChannelFromFd can skip it).
bool ChannelsUseTls();

// A caller's connection may hold this many calls open at once; further calls wait in the caller's
// transport. Strata's own callers need far fewer: the ring keeps at most 16 operations in flight
// per neighbour, a worker a call or two per server.
inline constexpr int kMaxStreamsPerConnection = 128;
// Threads a server runs handlers on, all callers together. A call that finds none free is refused
// at once with RESOURCE_EXHAUSTED ("Server Threadpool Exhausted") instead of growing the process
// (docs/security.md, "Limits").
inline constexpr int kMaxServerThreads = 512;

// Applies message, stream and thread limits to a server under construction.
void ConfigureServer(grpc::ServerBuilder* builder);

inline std::chrono::system_clock::time_point DeadlineAfter(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

// Binds `address` ("host:0" picks a free port) and returns the bound port in *port. The services
// are also served on every address of `also_listen` (such as "unix-abstract:NAME" for peers on
// the same machine). On every address, every method of every service refuses a call without this
// process's run token (rpc_auth.h) with UNAUTHENTICATED before its handler runs, except the
// standard health check (grpc.health.v1.Health/Check), which every server also serves. With TLS
// on, every address serves TLS only (under `mutual`, to clients with a certificate of the run's
// CA), the health check included.
std::unique_ptr<grpc::Server> StartServer(const std::string& address,
                                          const std::vector<grpc::Service*>& services, int* port,
                                          const std::vector<std::string>& also_listen = {});

}  // namespace strata
