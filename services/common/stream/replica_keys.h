// The broker keys beside a stream in which the replicas of one run (its nonce, --stream-run) find
// each other and the orchestrator tells them of a death: shared by the replicas
// (services/worker/stream_replica.cc) and the run that starts them
// (orchestrator/lib/stream_run.cc).
#pragma once

#include <cstdint>
#include <string>

#include <absl/strings/str_cat.h>

#include "strata/v1/job.pb.h"

namespace strata::stream_keys {

// A hash: each replica's address by rank.
inline std::string Replicas(const v1::ResolvedStream& stream, const std::string& run) {
  return absl::StrCat(stream.key(), ":", stream.group(), ":replicas:", run);
}
// A hash: each replica's counts by rank, kept after each acknowledgement (a restart goes on
// from them).
inline std::string Counts(const v1::ResolvedStream& stream, const std::string& run) {
  return absl::StrCat(Replicas(stream, run), ":counts");
}
// A hash the orchestrator writes before it starts a dead replica of the mesh again: recovery
// number (1, 2, ...) -> the dead replica's rank.
inline std::string Recoveries(const v1::ResolvedStream& stream, const std::string& run) {
  return absl::StrCat(Replicas(stream, run), ":recovery");
}
// The hashes of one recovery's steps ("sent", "held", "model", "joined", "rejoined",
// "connected").
inline std::string RecoveryStep(const v1::ResolvedStream& stream, const std::string& run,
                                int64_t recovery, const char* step) {
  return absl::StrCat(Recoveries(stream, run), ":", recovery, ":", step);
}

}  // namespace strata::stream_keys
