#include "orchestrator/launch/run_tls.h"

#include <cstdio>
#include <filesystem>

#include "services/common/base/status.h"
#include "services/common/config/resolved_job.h"
#include "services/common/wire/tls_certificates.h"

namespace strata {

absl::StatusOr<RunTls> PrepareRunTls(const v1::ResolvedJob& job, const std::string& generated_dir,
                                     bool attached) {
  const v1::ResolvedSecurity& security = job.security();
  TlsSettings settings;
  STRATA_ASSIGN_OR_RETURN(settings.mode, TlsModeFromName(Spelled(security.tls())));
  settings.server_name = security.tls_server_name();
  RunTls tls;
  if (!security.tls_dir().empty()) {
    std::error_code ec;
    tls.dir = std::filesystem::absolute(security.tls_dir(), ec).lexically_normal().string();
    if (ec) tls.dir = security.tls_dir();
  } else if (attached) {
    return absl::FailedPreconditionError(
        "security.tls without security.tls_dir: the services were started elsewhere, so "
        "certificates made here would not be theirs; give the directory they use");
  } else {
    RunCertificateOptions options;
    options.server_name = security.tls_server_name();
    STRATA_RETURN_IF_ERROR(WriteRunCertificates(generated_dir, options));
    tls.dir = std::filesystem::absolute(generated_dir).lexically_normal().string();
    tls.generated = true;
  }
  settings.dir = tls.dir;
  STRATA_ASSIGN_OR_RETURN(tls.client, LoadTlsMaterial(settings, TlsUse::kClient));
  return tls;
}

std::vector<std::string> TlsServiceArgs(const v1::ResolvedJob& job, const std::string& dir) {
  const v1::ResolvedSecurity& s = job.security();
  return {"--tls", Spelled(s.tls()), "--tls-dir", dir, "--tls-server-name", s.tls_server_name()};
}

void RemoveGeneratedTls(const RunTls& tls, const char* command) {
  if (!tls.generated) return;
  std::error_code ec;
  std::filesystem::remove_all(tls.dir, ec);
  if (ec) {
    std::fprintf(stderr, "%s: cannot remove the run's certificates in %s: %s\n", command,
                 tls.dir.c_str(), ec.message().c_str());
  }
}

}  // namespace strata
