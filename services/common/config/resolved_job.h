// The resolved job (proto/strata/v1/job.proto): the job spec with its defaults filled in, its names
// turned into enums and every number that follows from it computed, here and nowhere else. `strata`
// resolves the spec once and ships the message to every service as `--job FILE` (text format), so
// a worker, a parameter server and the evaluator cannot disagree about a per-worker batch or a
// learning-rate scale. A service started by hand may still take `--config` YAML: it resolves that
// with the same function, once, at start (LoadServiceJob).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "services/common/config/job_spec.h"
#include "strata/v1/job.pb.h"

namespace strata {

// The version of ResolvedJob's meaning; a service refuses a message of another.
inline constexpr uint32_t kResolvedJobFormat = 1;

// Resolves a checked spec. Fails only when a name has no enum (a spec built in code, not parsed).
absl::StatusOr<v1::ResolvedJob> ResolveJob(const JobSpec& spec);

// Text format, one field per line: what `strata` writes to RUN_DIR/job.resolved.txtpb.
std::string ResolvedJobText(const v1::ResolvedJob& job);
// Parses and checks a message from `text`: errors name `origin` and the line. A field out of
// range, an unknown enum value or another format is refused, since a service would otherwise run
// a job nobody asked for.
absl::StatusOr<v1::ResolvedJob> ParseResolvedJob(const std::string& text,
                                                 const std::string& origin);
absl::StatusOr<v1::ResolvedJob> LoadResolvedJob(const std::string& path);

// Where a service's job comes from: the file `strata` wrote (`job`), or, for a service started by
// hand, a YAML spec with `--set` overrides (`config`, `overrides`). Exactly one of the two paths.
struct ServiceJobSource {
  std::string job;
  std::string config;
  std::vector<std::string> overrides;
};
absl::StatusOr<v1::ResolvedJob> LoadServiceJob(const ServiceJobSource& source);

// The parts of a resolved job in the spec's own types, for the code that takes those (the data set
// readers, the optimizer's schedule): one mapping, used by every process.
DatasetSpec DatasetSpecOf(const v1::ResolvedJob& job);
LrScheduleSpec LrScheduleOf(const v1::ResolvedTraining& training);

// The spec's spelling of each enum ("fashion-mnist", "resnet20", "ssp", "tcp"), for messages,
// logs and the libraries keyed by name.
std::string DatasetNameText(v1::DatasetName name);
std::string LabelSetText(v1::LabelSet set);
std::string ModelArchText(v1::ModelArch arch);
std::string StrategyKindText(v1::StrategyKind kind);
std::string ConsistencyText(v1::Consistency consistency);
std::string DataLinkText(v1::DataLink link);
std::string ShardMethodText(v1::ShardMethod method);

}  // namespace strata
