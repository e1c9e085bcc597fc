// strata-health: asks a server for the standard gRPC health check (grpc.health.v1.Health/Check)
// and exits 0 when it answers SERVING, 1 otherwise (not serving, unreachable, deadline passed).
// The compose health checks and any generic probe run it; the call carries no run token, which
// the servers do not ask of this one method (docs/security.md). Against services with TLS on it
// takes the same --tls, --tls-dir and --tls-server-name as they do: it trusts the run's CA and,
// under mutual, presents the client certificate, without which the handshake itself fails.
#include <chrono>
#include <cstdio>
#include <string>

#include <grpcpp/grpcpp.h>
#include <CLI/CLI.hpp>

#include "grpc/health/v1/health.grpc.pb.h"
#include "services/common/wire/tls_flags.h"

int main(int argc, char** argv) {
  CLI::App app{"Strata health probe: exit 0 when the server at ADDRESS is SERVING"};
  std::string address, service;
  double deadline_s = 3.0;
  bool quiet = false;
  app.add_option("address", address, "host:port of a Strata service")->required();
  app.add_option("--service", service, "a service name; empty asks about the server as a whole");
  app.add_option("--deadline-s", deadline_s, "how long to wait for the answer, seconds")
      ->check(CLI::PositiveNumber);
  app.add_flag("--quiet,-q", quiet, "print nothing, only the exit code");
  strata::TlsFlagValues tls_flags;
  strata::AddTlsFlags(&app, &tls_flags);
  CLI11_PARSE(app, argc, argv);

  // A probe that cannot set up TLS as told exits 2, like the services: "unhealthy" (1) would hide
  // a mistake in the probe's own configuration.
  auto settings = strata::TlsSettingsFromFlags(tls_flags);
  if (!settings.ok()) {
    std::fprintf(stderr, "strata-health: %s\n", std::string(settings.status().message()).c_str());
    return 2;
  }
  auto tls = strata::LoadTlsMaterial(*settings, strata::TlsUse::kClient);
  if (!tls.ok()) {
    std::fprintf(stderr, "strata-health: TLS: %s\n", std::string(tls.status().message()).c_str());
    return 2;
  }
  std::shared_ptr<grpc::Channel> channel;
  if (tls->enabled()) {
    grpc::ChannelArguments args;
    strata::SetTlsTargetName(*tls, &args);
    channel = grpc::CreateCustomChannel(address, strata::TlsChannelCredentials(*tls), args);
  } else {
    channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  }
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000)));
  context.set_wait_for_ready(true);  // a server still starting is "not yet", not "refused"
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    if (!quiet) {
      std::fprintf(stderr, "strata-health: %s: %s\n", address.c_str(),
                   status.error_message().c_str());
    }
    return 1;
  }
  const bool serving = response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  if (!quiet) {
    std::printf("%s: %s\n", address.c_str(),
                grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()).c_str());
  }
  return serving ? 0 : 1;
}
