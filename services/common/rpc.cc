#include "services/common/rpc.h"

namespace strata {

grpc::ChannelArguments DefaultChannelArguments() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Reconnect quickly after a peer restarts instead of gRPC's long default backoff.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // Not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC's core takes it as the shortest time it gives a
  // connection attempt to finish (default 20 s). Set to 100 ms, a peer busy starting up on a loaded
  // machine (LibTorch loading, a sanitizer build) missed its HTTP/2 handshake and a first call
  // failed with "connection attempt timed out before receiving SETTINGS frame". Calls are still
  // bounded by their own deadlines.
  return args;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target) {
  return MakeChannel(target, DefaultChannelArguments());
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& target,
                                           const grpc::ChannelArguments& args) {
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

void ConfigureServer(grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder->SetMaxSendMessageSize(kMaxMessageBytes);
}

std::unique_ptr<grpc::Server> StartServer(const std::string& address,
                                          const std::vector<grpc::Service*>& services, int* port,
                                          const std::vector<std::string>& also_listen) {
  grpc::ServerBuilder builder;
  ConfigureServer(&builder);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
  for (const std::string& extra : also_listen) {
    builder.AddListeningPort(extra, grpc::InsecureServerCredentials());
  }
  for (grpc::Service* s : services) builder.RegisterService(s);
  return builder.BuildAndStart();
}

}  // namespace strata
