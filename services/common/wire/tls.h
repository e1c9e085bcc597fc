// Transport security between the processes of a run (docs/security.md, "Transport security"):
// which certificates a process uses, loaded and checked before it serves or calls, and the gRPC
// channel credentials made from them. MakeChannel and StartServer (rpc.h) apply them; this header
// says what the files are and what a process is told.
//
// One directory holds a run's certificates, with fixed names:
//   ca.pem                   the run's certificate authority: what every process trusts
//   server.pem, server.key   the certificate every service serves with (and its key)
//   client.pem, client.key   the certificate every caller presents under `mutual`
// Clients verify a server's certificate against the run's server name (not the address they
// dial), so one certificate serves 127.0.0.1, a Unix socket and a container's service name alike.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <grpcpp/grpcpp.h>

namespace strata {

enum class TlsMode {
  kOff,     // plaintext HTTP/2; the run token alone authenticates callers
  kOn,      // TLS: every client verifies the server's certificate; the token authenticates callers
  kMutual,  // TLS, and every server also requires a client certificate from the run's CA
};

// "off", "on", "mutual": the spelling of the job spec (security.tls) and of --tls.
const std::vector<std::string>& TlsModeNames();
absl::StatusOr<TlsMode> TlsModeFromName(std::string_view name);
std::string TlsModeName(TlsMode mode);

inline constexpr char kTlsCaFile[] = "ca.pem";
inline constexpr char kTlsServerCertFile[] = "server.pem";
inline constexpr char kTlsServerKeyFile[] = "server.key";
inline constexpr char kTlsClientCertFile[] = "client.pem";
inline constexpr char kTlsClientKeyFile[] = "client.key";
// The name clients expect in every server certificate unless told another.
inline constexpr char kDefaultTlsServerName[] = "strata";

// The flags every service binary (and strata-health) accepts, with their help texts.
inline constexpr char kTlsFlag[] = "--tls";
inline constexpr char kTlsDirFlag[] = "--tls-dir";
inline constexpr char kTlsServerNameFlag[] = "--tls-server-name";
inline constexpr char kTlsHelp[] =
    "transport security: off (plaintext), on (TLS; clients verify the server), mutual (TLS, and "
    "servers also require a client certificate); on and mutual need --tls-dir";
inline constexpr char kTlsDirHelp[] =
    "directory with ca.pem, server.pem, server.key and (mutual) client.pem, client.key";
inline constexpr char kTlsServerNameHelp[] =
    "the name clients verify in the servers' certificate (default strata)";

// What a process is told: from flags (TlsSettingsFromFlags) or from the job spec.
struct TlsSettings {
  TlsMode mode = TlsMode::kOff;
  std::string dir;
  std::string server_name = kDefaultTlsServerName;
};

// The flags' values as given; TlsSettingsFromFlags checks how they combine.
struct TlsFlagValues {
  std::string mode = "off";
  std::string dir;
  std::string server_name = kDefaultTlsServerName;
};
// --tls on|mutual without --tls-dir, or --tls-dir / --tls-server-name with --tls off, is an
// error: a directory that would be silently ignored means plaintext where TLS was meant.
absl::StatusOr<TlsSettings> TlsSettingsFromFlags(const TlsFlagValues& flags);

// What a process needs: a client only (the orchestrator, strata-health) reads the CA and, under
// mutual, the client pair; a service also its server pair.
enum class TlsUse { kClient, kServerAndClient };

// The PEM text of the files a process uses, after the checks of LoadTlsMaterial.
struct TlsMaterial {
  TlsMode mode = TlsMode::kOff;
  std::string server_name;
  std::string ca_pem;
  std::string server_cert_pem, server_key_pem;  // empty unless loaded for kServerAndClient
  std::string client_cert_pem, client_key_pem;  // empty unless mutual
  bool enabled() const { return mode != TlsMode::kOff; }
};

// Reads and checks the files `use` needs (nothing for kOff). Each problem names the file: missing
// or unreadable, not PEM, an encrypted key, a key that does not belong to its certificate, a
// certificate the CA did not sign, expired or not yet valid, made for the other side (extended key
// usage), or a server certificate that does not name `server_name`.
absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsSettings& settings, TlsUse use);

// Channel credentials that trust the run's CA and, under mutual, present the client certificate.
std::shared_ptr<grpc::ChannelCredentials> TlsChannelCredentials(const TlsMaterial& material);
// Makes a channel verify the server's certificate against material.server_name whatever address
// it dials (127.0.0.1, a Unix socket, a service name).
void SetTlsTargetName(const TlsMaterial& material, grpc::ChannelArguments* args);

}  // namespace strata
