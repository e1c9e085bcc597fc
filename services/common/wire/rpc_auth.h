// The run's shared secret (docs/security.md, "Authentication"). Every call between the processes
// of a run carries `authorization: Bearer <token>`; every server made by StartServer refuses a call
// without the right token with UNAUTHENTICATED before any handler runs. MakeChannel and
// StartServer (rpc.h) apply it; this header says where the token comes from.
#pragma once

#include <string>
#include <string_view>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include "services/common/wire/tls.h"

namespace strata {

// The environment variable that carries the token from `strata run` (or a test) to the services
// it starts. Never a flag: a command line is readable by every user of the machine
// (/proc/PID/cmdline) and is recorded in the run's events.
inline constexpr char kRunTokenEnv[] = "STRATA_RUN_TOKEN";
// The opt-out every service binary accepts: serve without checking tokens, with a warning.
inline constexpr char kInsecureNoAuthFlag[] = "--insecure-no-auth";
inline constexpr char kInsecureNoAuthHelp[] =
    "serve without checking the run token: anyone who can reach the port may call every method, "
    "Stop and LoadCheckpoint included (default: the token comes from the environment variable "
    "STRATA_RUN_TOKEN, and a service without one refuses to start)";
// Shortest token a service accepts: 128 bits in hex.
inline constexpr size_t kMinRunTokenChars = 32;

// How this process's clients (MakeChannel) and servers (StartServer) authenticate.
struct RpcAuth {
  std::string token;      // sent by clients, required by servers; empty: servers refuse all calls
  bool insecure = false;  // --insecure-no-auth: clients send nothing, servers check nothing
  // Transport security (tls.h), independent of the token: off unless set (SetRpcTls, or
  // InitServiceTls from a service's flags).
  TlsMaterial tls;
};

// 256 bits from the kernel's random source (getrandom), as 64 hex characters.
absl::StatusOr<std::string> GenerateRunToken();

// STRATA_RUN_TOKEN as every process takes it: exactly one trailing newline dropped (a token file
// made the documented way, `openssl rand -hex 32 > run-token`, ends with one, and a Kubernetes
// Secret passes the file on as it is); "" when unset.
std::string RunTokenFromEnvironment();

// Sets this process's auth; channels and servers made afterwards use it (`strata run` with the
// token it generated, a service with --insecure-no-auth).
void SetRpcAuth(RpcAuth auth);

// This process's auth: what SetRpcAuth set; else the token in STRATA_RUN_TOKEN; else a random token
// of this process's own (fail closed: its servers answer only its own channels and the children it
// starts through ChildProcess, which pass the token on). Resolved once.
RpcAuth CurrentRpcAuth();

// Sets the transport security of this process's channels and servers made afterwards, keeping its
// token (`strata run` with the run's certificates, tests).
void SetRpcTls(TlsMaterial tls);

// For a service's main(), after InitServiceAuth and before it serves: --tls, --tls-dir and
// --tls-server-name checked and the certificates loaded (tls.h). An error names the flag or the
// file; the service then exits with code 2.
absl::Status InitServiceTls(const TlsFlagValues& flags);

// For a service's main(), before it serves: the token from STRATA_RUN_TOKEN, or, with
// `insecure_no_auth`, no check at all (a warning on stderr). Without either, an error that names
// both ways; the service then exits with code 2.
absl::Status InitServiceAuth(std::string_view service, bool insecure_no_auth);

// Equality whose running time does not depend on where `a` and `b` first differ (only on the
// length of `expected`), so that timing a refused call does not reveal a token byte by byte.
bool ConstantTimeEquals(std::string_view presented, std::string_view expected);

}  // namespace strata
