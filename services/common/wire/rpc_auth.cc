#include "services/common/wire/rpc_auth.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>

namespace strata {
namespace {

struct AuthState {
  std::mutex mu;
  std::optional<RpcAuth> auth;  // unresolved until first asked for
};

AuthState& State() {
  static auto* state = new AuthState;  // never destroyed: servers may outlive static destruction
  return *state;
}

// gRPC sends metadata values as visible ASCII; anything else could not travel in a header.
absl::Status ValidateRunToken(std::string_view token) {
  if (token.size() < kMinRunTokenChars) {
    return absl::InvalidArgumentError(
        absl::StrCat(kRunTokenEnv, " holds ", token.size(),
                     " characters; a run token needs at least ", kMinRunTokenChars,
                     " (`strata run` makes 64 hex characters; by hand: openssl rand -hex 32)"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(kRunTokenEnv, " may hold only visible ASCII characters (no spaces)"));
    }
  }
  return absl::OkStatus();
}

// `openssl rand -hex 32 > run-token`, the documented way to make a token by hand, ends the file
// with a newline, and a Kubernetes Secret hands the file to the environment as it is. Exactly one
// is dropped, in servers and clients alike, so both compare the same bytes; any other control
// character still makes the token invalid.
std::string WithoutOneTrailingNewline(std::string token) {
  if (!token.empty() && token.back() == '\n') token.pop_back();
  return token;
}

}  // namespace

std::string RunTokenFromEnvironment() {
  const char* env = std::getenv(kRunTokenEnv);
  return env == nullptr ? std::string() : WithoutOneTrailingNewline(env);
}

absl::StatusOr<std::string> GenerateRunToken() {
  unsigned char bytes[32];
  size_t filled = 0;
  while (filled < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + filled, sizeof bytes - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(
          absl::StrCat("cannot draw a run token: getrandom: ", std::strerror(errno)));
    }
    filled += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof bytes));
}

void SetRpcAuth(RpcAuth auth) {
  AuthState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.auth = std::move(auth);
}

RpcAuth CurrentRpcAuth() {
  AuthState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.auth) {
    RpcAuth auth;
    if (const char* env = std::getenv(kRunTokenEnv); env != nullptr && *env != '\0') {
      auth.token = WithoutOneTrailingNewline(env);
    } else if (auto token = GenerateRunToken(); token.ok()) {
      auth.token = *std::move(token);
    }  // else an empty token: this process's servers refuse every call
    s.auth = std::move(auth);
  }
  return *s.auth;
}

void SetRpcTls(TlsMaterial tls) {
  RpcAuth auth = CurrentRpcAuth();
  auth.tls = std::move(tls);
  SetRpcAuth(std::move(auth));
}

absl::Status InitServiceTls(const TlsFlagValues& flags) {
  auto settings = TlsSettingsFromFlags(flags);
  if (!settings.ok()) return settings.status();
  auto material = LoadTlsMaterial(*settings, TlsUse::kServerAndClient);
  if (!material.ok()) {
    return absl::Status(material.status().code(),
                        absl::StrCat("TLS: ", material.status().message()));
  }
  SetRpcTls(*std::move(material));
  return absl::OkStatus();
}

absl::Status InitServiceAuth(std::string_view service, bool insecure_no_auth) {
  if (insecure_no_auth) {
    std::fprintf(stderr,
                 "%.*s: warning: %s: calls are not authenticated; anyone who can reach this "
                 "service's port can call every method, Stop and LoadCheckpoint included\n",
                 static_cast<int>(service.size()), service.data(), kInsecureNoAuthFlag);
    RpcAuth none;
    none.insecure = true;
    SetRpcAuth(std::move(none));
    return absl::OkStatus();
  }
  const char* env = std::getenv(kRunTokenEnv);
  if (env == nullptr || *env == '\0') {
    return absl::FailedPreconditionError(absl::StrCat(
        "no run token: ", kRunTokenEnv,
        " is not set. `strata run` sets it for the services it starts; to start a service by "
        "hand, export the same token (e.g. export ",
        kRunTokenEnv, "=$(openssl rand -hex 32)) to every service and client of the run, or pass ",
        kInsecureNoAuthFlag, " to serve without authentication (see docs/security.md)"));
  }
  std::string token = WithoutOneTrailingNewline(env);
  if (absl::Status s = ValidateRunToken(token); !s.ok()) return s;
  RpcAuth auth;
  auth.token = std::move(token);
  SetRpcAuth(std::move(auth));
  return absl::OkStatus();
}

bool ConstantTimeEquals(std::string_view presented, std::string_view expected) {
  // Every byte of `expected` is visited whatever `presented` holds; a length mismatch is folded
  // into the same accumulator instead of returning early.
  uint8_t diff = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const uint8_t p = i < presented.size() ? static_cast<uint8_t>(presented[i]) : 0;
    diff |= static_cast<uint8_t>(p ^ static_cast<uint8_t>(expected[i]));
  }
  // Keep the compiler from turning the loop into an early-exit comparison.
  volatile uint8_t result = diff;
  return result == 0;
}

}  // namespace strata
