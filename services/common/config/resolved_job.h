// The resolved job (proto/strata/v1/job.proto) as every process reads it: `strata` reads the YAML
// spec once (job_spec.h), writes the result to the run directory as text and ships it to every
// service as `--job FILE`, so that a worker, a parameter server and the evaluator cannot disagree
// about a per-worker batch or a learning-rate scale. A service checks the message again against
// the same table of keys before it trusts it. A service started by hand may still take `--config`
// YAML: it reads that with the same reader, once, at start (LoadServiceJob).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/config/job_keys.h"
#include "strata/v1/job.pb.h"

namespace strata {

// The version of ResolvedJob's meaning; a service refuses a message of another. 2: the message
// holds every key of the spec (the launcher, security, switch rule and recovery cadences too).
inline constexpr uint32_t kResolvedJobFormat = 2;

// Text format, one field per line: what `strata` writes to RUN_DIR/job.resolved.txtpb.
std::string ResolvedJobText(const v1::ResolvedJob& job);
// Parses and checks a message from `text`: errors name `origin` and the line. A field out of
// range, an unknown enum value or another format is refused, since a service would otherwise run
// a job nobody asked for.
absl::StatusOr<v1::ResolvedJob> ParseResolvedJob(const std::string& text,
                                                 const std::string& origin);
absl::StatusOr<v1::ResolvedJob> LoadResolvedJob(const std::string& path);
// The problems of a message built or changed in code (what ParseResolvedJob refuses), one each.
std::vector<std::string> ResolvedJobProblems(const v1::ResolvedJob& job);

// Where a service's job comes from: the file `strata` wrote (`job`), or, for a service started by
// hand, a YAML spec with `--set` overrides (`config`, `overrides`). Exactly one of the two paths.
struct ServiceJobSource {
  std::string job;
  std::string config;
  std::vector<std::string> overrides;
};
absl::StatusOr<v1::ResolvedJob> LoadServiceJob(const ServiceJobSource& source);

// ---- what the job's keys mean together, each written once ----------------------------------

// The job has parameter servers: a `ps` job, or a `switch` job (after its switch).
inline bool UsesServers(const v1::ResolvedJob& job) {
  const v1::StrategyKind kind = job.strategy().kind();
  return kind == v1::STRATEGY_KIND_PS || kind == v1::STRATEGY_KIND_SWITCH;
}
// The job trains in a ring at some point: an `allreduce` job, or a `switch` job (before).
inline bool UsesRing(const v1::ResolvedJob& job) {
  const v1::StrategyKind kind = job.strategy().kind();
  return kind == v1::STRATEGY_KIND_ALLREDUCE || kind == v1::STRATEGY_KIND_SWITCH;
}
// PDP and APDP: the servers decide when the workers send their updates (parameter_server/pdp).
inline bool ServerDecidesPulls(v1::Consistency consistency) {
  return consistency == v1::CONSISTENCY_PDP || consistency == v1::CONSISTENCY_APDP;
}
inline bool TlsOn(const v1::ResolvedJob& job) { return job.security().tls() != v1::TLS_MODE_OFF; }
// The cores worker `rank`'s quota allows: its straggler entry if it has one, else cpu.worker
// times its speed; 0 means no quota.
double WorkerCpuShare(const v1::ResolvedCluster& cluster, int rank);
// The tensors the parameter servers partition for a built-in model (job.proto's
// `model_tensors`); nullopt for a value without one.
std::optional<int> BuiltinModelTensors(v1::ModelArch arch);
// The model as messages say it: "mlp", or "net.pt (TorchScript)" for a user's file.
std::string ModelText(const v1::ResolvedJob& job);
// The strategy as the run's first line and status.json say it: "switch (at_fraction 0.5)".
std::string StrategyText(const v1::ResolvedStrategy& strategy);
// The at_fraction rule's switch point in completed epochs: ceil(fraction * epochs), at least 1.
// The orchestrator decides by it and the workers hold before it (so both read it from here).
int64_t AtFractionSwitchEpoch(double fraction, int64_t epochs);

}  // namespace strata
