// The certificates a run's services use under security.tls on or mutual (docs/security.md,
// "Transport security"), for the runs this machine starts (`strata run` of every strategy, the
// stream run included, and `strata supervise`): the user's own (security.tls_dir) or, without
// them, a CA and keys made for the run in its directory and removed when it ends, and the flags
// that hand them to each service.
#pragma once

#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/wire/tls.h"
#include "strata/v1/job.pb.h"

namespace strata {

struct RunTls {
  TlsMaterial client;      // what the orchestrator's own calls present
  std::string dir;         // absolute: the services may start in another working directory
  bool generated = false;  // dir is the run's own, to remove at the end
};

// `generated_dir`: where the run's own certificates go (its run directory's tls/). `attached`:
// the services were started elsewhere (`strata supervise`), so certificates made here would not
// be theirs and security.tls_dir is required.
absl::StatusOr<RunTls> PrepareRunTls(const v1::ResolvedJob& job, const std::string& generated_dir,
                                     bool attached);

// --tls MODE --tls-dir DIR --tls-server-name NAME: what every service is started with.
std::vector<std::string> TlsServiceArgs(const v1::ResolvedJob& job, const std::string& dir);

// Removes the run's own keys (not the user's); a failure is said on stderr, prefixed `command`.
void RemoveGeneratedTls(const RunTls& tls, const char* command);

}  // namespace strata
