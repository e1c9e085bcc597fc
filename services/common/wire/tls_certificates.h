// A run's own certificates (docs/security.md, "Transport security"): what `strata run` makes when
// the job asks for TLS without giving a directory, and what tests make to have a second CA.
#pragma once

#include <chrono>
#include <string>

#include <absl/status/status.h>

#include "services/common/wire/tls.h"

namespace strata {

struct RunCertificateOptions {
  std::string server_name = kDefaultTlsServerName;
  // How long the certificates hold from now on. The CA's key is never written anywhere, so
  // nothing else can ever be signed by this CA; a long life only spares a long run a renewal.
  std::chrono::seconds valid_for = std::chrono::hours(24 * 365);
  // Validity starts this long before now, for clocks a little behind this machine's.
  std::chrono::seconds backdate = std::chrono::hours(1);
};

// Creates `dir` with mode 0700 (it must not exist yet, or be an empty directory of ours) and
// writes a fresh CA's certificate (ca.pem), a server certificate for options.server_name,
// localhost, 127.0.0.1 and ::1 (server.pem, server.key) and a client certificate (client.pem,
// client.key), all ECDSA P-256 signed with SHA-256; keys are mode 0600. The CA's private key only
// lives in this call.
absl::Status WriteRunCertificates(const std::string& dir, const RunCertificateOptions& options);

}  // namespace strata
