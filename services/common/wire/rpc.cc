#include "services/common/wire/rpc.h"

#include <unistd.h>

#include <atomic>

#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpcpp/create_channel_posix.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/client_interceptor.h>

#include "services/common/wire/rpc_auth.h"

namespace strata {
namespace {

constexpr char kAuthorizationKey[] = "authorization";
constexpr char kPathKey[] = ":path";
// The one method served without the token: the kubelet's gRPC probes and generic probes send no
// credentials, and the answer ("SERVING") tells a caller nothing it could not learn by connecting.
// Only Check: Watch is a stream that would hold server resources open for anyone.
constexpr char kHealthCheckPath[] = "/grpc.health.v1.Health/Check";

std::string BearerValue(const std::string& token) { return "Bearer " + token; }

// The header a server expects, handed to gRPC's transport threads through its C core. The
// release/acquire pair on `published` orders the write of `value` before every read of it in a
// way ThreadSanitizer can see (the core's own synchronisation is not instrumented).
struct ExpectedHeader {
  std::atomic<bool> published{false};
  std::string value;
};

// Client side: the token goes into the initial metadata of every call. An interceptor rather than
// call credentials because gRPC sends call credentials only over channels with transport security,
// and ours are plain HTTP/2 unless the job turns TLS on.
class RunTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit RunTokenInterceptor(std::shared_ptr<const std::string> value)
      : value_(std::move(value)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kAuthorizationKey, *value_);
    }
    methods->Proceed();
  }

 private:
  std::shared_ptr<const std::string> value_;
};

class RunTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit RunTokenInterceptorFactory(std::string value)
      : value_(std::make_shared<const std::string>(std::move(value))) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new RunTokenInterceptor(value_);
  }

 private:
  std::shared_ptr<const std::string> value_;
};

// Server side: gRPC's auth metadata processor, the hook made for this. It runs in the transport's
// auth filter when a call's headers arrive, before the call is matched to a method, so a refused
// call never reaches a handler of any service (sync, async or streaming alike) and the client sees
// the status given here. The C++ wrapper (ServerCredentials::SetAuthMetadataProcessor) refuses
// insecure credentials, which are what we serve with unless TLS is on; the C core accepts a
// processor on any credentials, so this class binds each port with core credentials (insecure, or
// TLS with the run's certificates) carrying the processor. The check is a comparison of a few
// dozen bytes: cheap enough to run inline on gRPC's thread, as the processor contract allows for a
// non-blocking check. Under TLS it runs after the handshake, so under `mutual` a caller without a
// client certificate of the run's CA never gets as far as presenting a token.
class RunTokenServerCredentials final : public grpc::ServerCredentials {
 public:
  explicit RunTokenServerCredentials(RpcAuth auth) : auth_(std::move(auth)) {}

  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>& /*processor*/) override {
    // The token check is this class's only processor; nothing in Strata sets another.
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    grpc_server_credentials* creds = CoreCredentials();
    if (!auth_.insecure) {
      // The expected header lives as long as the core credentials, which free it through Destroy.
      auto* expected = new ExpectedHeader;
      expected->value = auth_.token.empty() ? "" : BearerValue(auth_.token);
      expected->published.store(true, std::memory_order_release);
      grpc_server_credentials_set_auth_metadata_processor(creds, {&Check, &Destroy, expected});
    }
    const int port = grpc_server_add_http2_port(server, addr.c_str(), creds);
    grpc_server_credentials_release(creds);  // the server holds its own reference
    return port;
  }

  grpc_server_credentials* CoreCredentials() const {
    const TlsMaterial& tls = auth_.tls;
    if (!tls.enabled()) return grpc_insecure_server_credentials_create();
    grpc_ssl_pem_key_cert_pair pair{tls.server_key_pem.c_str(), tls.server_cert_pem.c_str()};
    // `on`: no client certificate is asked for (the token authenticates callers); `mutual`: the
    // handshake fails unless the client presents one that the run's CA signed.
    const grpc_ssl_client_certificate_request_type request =
        tls.mode == TlsMode::kMutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                     : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
    return grpc_ssl_server_credentials_create_ex(tls.ca_pem.c_str(), &pair, 1, request, nullptr);
  }

  static void Check(void* state, grpc_auth_context* /*context*/, const grpc_metadata* md,
                    size_t num_md, grpc_process_auth_metadata_done_cb done, void* user_data) {
    const auto* header = static_cast<const ExpectedHeader*>(state);
    const bool published = header->published.load(std::memory_order_acquire);
    const std::string& expected = header->value;
    // `:path` is the method the call is routed to, so exempting it by name opens nothing else.
    for (size_t i = 0; i < num_md; ++i) {
      if (grpc_slice_str_cmp(md[i].key, kPathKey) == 0 &&
          grpc_slice_str_cmp(md[i].value, kHealthCheckPath) == 0) {
        done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
        return;
      }
    }
    for (size_t i = 0; i < num_md && published && !expected.empty(); ++i) {
      if (grpc_slice_str_cmp(md[i].key, kAuthorizationKey) != 0) continue;
      const std::string_view value(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].value)),
                                   GRPC_SLICE_LENGTH(md[i].value));
      if (ConstantTimeEquals(value, expected)) {
        // Consumed: gRPC removes the header, so no handler can see (or log) the token.
        done(user_data, &md[i], 1, nullptr, 0, GRPC_STATUS_OK, nullptr);
        return;
      }
    }
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED,
         "missing or wrong run token (authorization: Bearer <token>); see docs/security.md");
  }

  static void Destroy(void* state) {
    auto* header = static_cast<ExpectedHeader*>(state);
    // The core frees its credentials on whichever of its threads drops the last reference, through
    // atomics ThreadSanitizer cannot see; acquiring what AddPortToServer published orders the
    // header's writes before this delete, as in Check.
    (void)header->published.load(std::memory_order_acquire);
    delete header;
  }

  RpcAuth auth_;
};

// The interceptors every channel of this process gets: the token's, unless it runs without one.
std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
ClientInterceptorsFor(const RpcAuth& auth) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  if (!auth.insecure && !auth.token.empty()) {
    interceptors.push_back(std::make_unique<RunTokenInterceptorFactory>(BearerValue(auth.token)));
  }
  return interceptors;
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const RpcAuth& auth) {
  if (auth.insecure && !auth.tls.enabled()) return grpc::InsecureServerCredentials();
  return std::make_shared<RunTokenServerCredentials>(auth);
}

}  // namespace

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
  const RpcAuth auth = CurrentRpcAuth();
  if (!auth.tls.enabled()) {
    return grpc::experimental::CreateCustomChannelWithInterceptors(
        target, grpc::InsecureChannelCredentials(), args, ClientInterceptorsFor(auth));
  }
  grpc::ChannelArguments tls_args = args;
  SetTlsTargetName(auth.tls, &tls_args);
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, TlsChannelCredentials(auth.tls), tls_args, ClientInterceptorsFor(auth));
}

std::shared_ptr<grpc::Channel> MakeChannelFromFd(const std::string& target, int fd,
                                                 const grpc::ChannelArguments& args) {
  const RpcAuth auth = CurrentRpcAuth();
  if (auth.tls.enabled()) {
    // gRPC (1.51) wraps a connected descriptor in insecure credentials only: rather than a
    // plaintext channel where TLS was asked for, gRPC connects (with TLS) by itself.
    ::close(fd);
    return MakeChannel(target, args);
  }
  return grpc::experimental::CreateCustomInsecureChannelWithInterceptorsFromFd(
      target, fd, args, ClientInterceptorsFor(auth));
}

bool ChannelsUseTls() { return CurrentRpcAuth().tls.enabled(); }

void ConfigureServer(grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder->SetMaxSendMessageSize(kMaxMessageBytes);
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxStreamsPerConnection);
  grpc::ResourceQuota quota("strata-server");
  quota.SetMaxThreads(kMaxServerThreads);
  builder->SetResourceQuota(quota);
}

std::unique_ptr<grpc::Server> StartServer(const std::string& address,
                                          const std::vector<grpc::Service*>& services, int* port,
                                          const std::vector<std::string>& also_listen) {
  // Every server answers the standard health check (grpc.health.v1.Health), which compose health
  // checks and Kubernetes probes call; gRPC's own implementation reports SERVING while the server
  // runs. The flag is read when a server is built.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ConfigureServer(&builder);
  const std::shared_ptr<grpc::ServerCredentials> credentials =
      ServerCredentialsFor(CurrentRpcAuth());
  builder.AddListeningPort(address, credentials, port);
  for (const std::string& extra : also_listen) builder.AddListeningPort(extra, credentials);
  for (grpc::Service* s : services) builder.RegisterService(s);
  return builder.BuildAndStart();
}

}  // namespace strata
